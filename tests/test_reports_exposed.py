"""Which records leak, as a user sees it: ``privgate check --exposed N`` and the exposed records in every format.

The leaky model's report (``--exposed 4``, every format, the console view) is built in process (``tests/inproc.py``:
the CLI's report, files and stdout, see ``test_front_door.py``); the CLI runs in a subprocess for the digits example
(its images written as artefacts and embedded in the HTML) and for bad ``--exposed`` values (exit 2).
"""

from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET

import inproc
import numpy as np
import pytest
from cases import run_cli

FORMATS = ("json", "markdown", "html", "junit", "sarif")


def _check(case, out, *extra, policy="internal", model=None, cwd=None):
    args = ["check", str(model or case.leaky_ts), "--policy", policy]
    args += ["--members", str(case.members), "--nonmembers", str(case.nonmembers)]
    args += [x for fmt in FORMATS for x in (f"--{fmt}", str(out / f"r.{fmt}"))]
    return run_cli(*args, *extra, cwd=cwd)


@pytest.fixture(scope="module")
def leaky_run(case, tmp_path_factory):
    """``_check(case, out, "--exposed", "4")`` in process: the folder of the written formats, the console view (the
    CLI's stdout) and the parsed JSON report."""
    out = tmp_path_factory.mktemp("exposed")
    report = inproc.check(case.leaky_ts, "internal", case.members, case.nonmembers, exposed=4)
    assert report.exit_code == 1, report.summary
    for fmt, text in inproc.render(report, *FORMATS).items():
        (out / f"r.{fmt}").write_text(text, encoding="utf-8")
    return out, inproc.console(report), json.loads((out / "r.json").read_text())


def test_json_lists_the_most_exposed_members_with_every_attacks_view(case, leaky_run):
    _, _, rep = leaky_run
    ex = rep["exposed"]
    ran = {a["name"]: a for a in rep["attacks"] if a["status"] == "ran"}
    assert ex["n"] == 4 and len(ex["records"]) == 4 and ex["n_members"] == 300
    assert ex["attack"] in ran
    # the leading attack is the one with the highest TPR at 1 % FPR (0.1 % cannot be measured on 150 non-members)
    tpr1 = {n: next(p["tpr"] for p in a["tpr_at_fpr"] if p["fpr"] == 0.01) for n, a in ran.items()}
    assert tpr1[ex["attack"]] == max(t for t in tpr1.values() if t is not None)
    members = np.load(case.members)
    lead_scores = [r["attacks"][ex["attack"]]["score"] for r in ex["records"]]
    assert lead_scores == sorted(lead_scores, reverse=True)
    assert [r["attacks"][ex["attack"]]["rank"] for r in ex["records"]] == [1, 2, 3, 4]
    for rec in ex["records"]:
        assert 0 <= rec["member_index"] < len(members["y"])
        assert rec["label"] == int(members["y"][rec["member_index"]])  # the row of the members file
        assert rec["split"] in ("calibration", "evaluation")
        assert set(rec["attacks"]) == set(ran)  # every attack that ran, its score, rank and ROC point
        for view in rec["attacks"].values():
            assert 1 <= view["rank"] <= 300 and 0.0 <= view["fpr"] <= 1.0 and 0.0 <= view["tpr"] <= 1.0
    # the top record of a strong leak is flagged at a low FPR
    assert ex["records"][0]["attacks"][ex["attack"]]["fpr"] <= 0.02


def test_every_format_shows_the_exposed_records(leaky_run):
    out, stdout, rep = leaky_run
    ex = rep["exposed"]
    first = str(ex["records"][0]["member_index"])
    # console
    assert f"Most exposed members (by {ex['attack']})" in stdout
    # Markdown: a table with one row per record, the member index in the second column
    md = (out / "r.markdown").read_text()
    assert f"### Most exposed members (by `{ex['attack']}`)" in md
    rows = [line for line in md.split("### Most exposed members", 1)[1].splitlines() if line.startswith("| ")][1:]
    assert [row.split("|")[2].strip() for row in rows] == [str(rec["member_index"]) for rec in ex["records"]]
    # HTML: a table, every attack's rank and FPR for each record
    html = (out / "r.html").read_text()
    assert "<table id='exposed'>" in html and html.count("<tr>", html.index("<table id='exposed'>")) >= 5
    # JUnit: one property per record and the table in the suite's output
    suite = ET.fromstring((out / "r.junit").read_text().encode()).find("testsuite")
    props = {p.get("name"): p.get("value") for p in suite.find("properties")}
    assert [k for k in props if k.startswith("exposed.")] == ["exposed.1", "exposed.2", "exposed.3", "exposed.4"]
    assert props["exposed.1"].startswith(f"member {first} ")
    assert "Remove, deduplicate or down-weight" in suite.find("system-out").text
    # SARIF: the model fails, so one note per record
    log = json.loads((out / "r.sarif").read_text())
    notes = [x for x in log["runs"][0]["results"] if x["ruleId"] == "privgate/exposed_record"]
    assert [x["properties"]["memberIndex"] for x in notes] == [rec["member_index"] for rec in ex["records"]]
    assert {x["level"] for x in notes} == {"note"}


def test_exposed_zero_lists_none_and_a_passing_model_adds_no_sarif_notes(case):
    """The report's content, built in process (``inproc``: the CLI's report, see ``test_front_door.py``)."""
    report = inproc.check(case.leaky_ts, "internal", case.members, case.nonmembers, exposed=0)
    assert report.exit_code == 1
    text = inproc.render(report, "json", "markdown")
    rep = json.loads(text["json"])
    assert rep["exposed"] is None and "Most exposed" not in text["markdown"]
    report = inproc.check(case.safe_ts, "internal", case.members, case.nonmembers)
    text = inproc.render(report, "json", "sarif")
    rep = json.loads(text["json"])
    assert rep["verdict"] == "pass", report.summary
    assert len(rep["exposed"]["records"]) == 10  # the default N
    log = json.loads(text["sarif"])
    assert not [x for x in log["runs"][0]["results"] if x["ruleId"] == "privgate/exposed_record"]


def test_bad_exposed_values_are_usage_errors(case, tmp_path):
    r = _check(case, tmp_path, "--exposed", "-1")
    assert r.returncode == 2 and "--exposed" in r.stderr and "Traceback" not in r.stderr
    shutil.copy(case.leaky_ts, tmp_path / "m.pt")
    (tmp_path / "privgate.toml").write_text("exposed = -3\n")
    r = _check(case, tmp_path, model=tmp_path / "m.pt", cwd=tmp_path)
    assert r.returncode == 2 and "'exposed' must be 0 or more, got -3" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "r.json").exists()


def test_image_data_gets_each_exposed_records_image_in_the_html(tmp_path):
    """Digits (8×8 images): the records' images are saved as artefacts and embedded in the HTML report."""
    from pathlib import Path

    digits = Path(__file__).resolve().parent.parent / "examples" / "digits"
    work = tmp_path / "digits"
    shutil.copytree(digits, work, ignore=shutil.ignore_patterns("__pycache__"))
    r = run_cli(
        "check", "--policy", "internal", "--json", "r.json", "--html", "r.html", "--exposed", "3", "-q", cwd=work
    )
    assert r.returncode in (0, 1, 3), r.stderr
    rep = json.loads((work / "r.json").read_text())
    images = [rec["image"] for rec in rep["exposed"]["records"]]
    assert len(images) == 3
    for rec, path in zip(rep["exposed"]["records"], images):
        p = Path(path) if Path(path).is_absolute() else work / path
        assert p.read_bytes().startswith(b"\x89PNG") and p.name == f"member-{rec['member_index']}.png"
    html = (work / "r.html").read_text()
    assert html.count("<img class='tile' alt='member ") == 3 and "src='data:image/png;base64," in html
