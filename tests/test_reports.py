"""Report formats: JUnit, SARIF (validated against the vendored 2.1.0 schema), Markdown, HTML, and
``privgate report render``. The HTML in a real browser: ``tests/test_html_browser.py``."""

from __future__ import annotations

import base64
import json
import math
import re
import struct
import subprocess
import xml.etree.ElementTree as ET
import zlib
from pathlib import Path

import jsonschema
import numpy as np
import pytest
from pipeline_cases import constant_model, leaky_tree
from pydantic import ValidationError

import privgate
from privgate import Report
from privgate.io.png import png_bytes
from privgate.report import available_formats, render
from privgate.report.charts import Series, line_chart, roc_chart
from privgate.report.markdown import cell
from privgate.report.model import AttackSummary
from privgate.report.remediation import chosen_epsilon
from privgate.report.remediation import view as remediation_view
from privgate.report.remediation_section import RemediationSection

DATA = Path(__file__).parent / "data"
POLICY = """\
# a policy with two checks; the SARIF locations point at their lines
name: team-policy
sensitivity: internal
release: api
attacks:
  loss: {}
  confidence: {}
  correctness: {}
checks:
  - id: mia-accuracy
    attack: best
    metric: accuracy
    max: 0.8
  - id: mia-tpr
    attack: best
    metric: tpr_at_fpr
    fpr: 0.001
    max: 0.05
"""


def _row(eps: float, utility: float, acc: float, status: str, spent: float, sigma: float) -> dict:
    """A row as privgate.dp.remediate writes it."""
    return {
        "epsilon": eps,
        "utility": utility,
        "utility_ci": [utility - 0.04, utility + 0.03],
        "utility_ok": True,
        "checks": [{"id": "mia-accuracy", "value": acc, "ci": [acc - 0.1, acc + 0.1], "status": status}],
        "privacy": status,
        "verdict": status,
        "accepted": status == "pass",
        "training": {
            "target_epsilon": eps,
            "epsilon": spent,
            "delta": 6.7e-4,
            "noise_multiplier": sigma,
            "max_grad_norm": 1.0,
            "sample_rate": 0.33,
            "steps": 120,
            "epochs": 40,
            "batch_size": 50,
            "accountant": "prv",
            "n_train": 150,
            "seconds": 0.4,
            "calibration_seconds": 2.3,
            "accountant_note": None,
            "architecture_changes": [],
        },
        "audit_seconds": 0.03,
    }


#: The shape privgate.dp.remediate gives report.remediation (values made up).
REMEDIATION = {
    "strategy": "ladder",
    "schedule": [50.0, 20.0, 10.0, 5.0],
    "original": {
        "verdict": "fail",
        "utility": 0.94,
        "utility_ci": [0.9, 0.96],
        "checks": [{"id": "mia-accuracy", "value": 0.88, "status": "fail"}],
    },
    "utility": {"metric": "accuracy", "data": "<population>", "floor": 0.85, "rule": "max_drop 0.1"},
    "trainings": 4,
    "clip_search_trainings": 0,
    "chosen_epsilon": 5.0,
    "rows": [
        _row(50.0, 0.93, 0.81, "fail", 49.9, 0.6),
        _row(20.0, 0.91, 0.74, "pass", 19.9, 0.9),
        _row(10.0, 0.90, 0.66, "pass", 9.99, 1.6),
        _row(5.0, 0.88, 0.58, "pass", 4.99, 2.8),
    ],
    "settings": {"epochs": 40, "batch_size": 50, "max_grad_norm": 1.0, "clip_search": [], "delta": 6.7e-4},
    "architecture_changes": [],
    "selection_leakage": "Choosing ε by repeatedly attacking candidate models on the same audit data is "
    "itself a data-dependent choice (recorded so it can be accounted for).",
    "status": "hardened",
    "chosen": {"epsilon": 5.0, "epsilon_spent": 4.99, "utility": 0.88},
    "reason": "DP-SGD at ε = 5 (δ = 0.00067) passes every check with utility 0.8800 (original 0.9400, floor 0.8500)",
    "seconds": 25.5,
}


@pytest.fixture(scope="module")
def policy_file(tmp_path_factory) -> Path:
    p = tmp_path_factory.mktemp("policy") / "policy.yaml"
    p.write_text(POLICY)
    return p


@pytest.fixture(scope="module")
def failing(policy_file) -> Report:
    """Decision tree on random labels: accuracy fails, TPR at 0.1 % FPR cannot be measured on 100 non-members."""
    model, members, nonmembers = leaky_tree()
    return privgate.check(model, str(policy_file), members, nonmembers)


@pytest.fixture(scope="module")
def passing() -> Report:
    model, members, nonmembers = constant_model()
    return privgate.check(model, "internal", members, nonmembers)


def test_every_format_is_registered():
    assert set(available_formats()) >= {"json", "junit", "sarif", "markdown", "html"}


def test_the_fixture_reports_have_the_expected_verdicts(failing, passing):
    assert failing.verdict == "fail"
    assert [c.status for c in failing.checks] == ["fail", "inconclusive"]
    assert failing.checks[0].value > 0.8
    assert passing.verdict == "pass"


# --------------------------------------------------------------------------- JUnit


def test_junit_has_one_testcase_per_check_with_the_message(failing):
    root = ET.fromstring(render(failing, "junit").encode())
    suite = root.find("testsuite")
    assert suite.get("tests") == "2" and suite.get("failures") == "1" and suite.get("errors") == "1"
    assert root.get("tests") == "2" and root.get("failures") == "1"
    cases = {c.get("name"): c for c in suite.findall("testcase")}
    assert list(cases) == ["mia-accuracy", "mia-tpr"]
    acc = failing.checks[0]
    failure = cases["mia-accuracy"].find("failure")
    msg = failure.get("message")
    assert failure.text == msg
    # attack, metric, value with interval, threshold and sample sizes
    assert f"best → {acc.chosen_attack}" in msg and "metric accuracy" in msg
    assert f"{acc.value:.3f} [{acc.ci[0]:.3f}, {acc.ci[1]:.3f}]" in msg
    assert "threshold ≤ 0.8" in msg
    assert f"{acc.n_members} members / {acc.n_nonmembers} non-members" in msg
    assert "audit set 200 members / 200 non-members" in msg
    error = cases["mia-tpr"].find("error")
    assert error.get("type") == "privgate.inconclusive"
    assert error.get("message").startswith("inconclusive")
    assert "1000 non-members" in error.get("message")
    props = {p.get("name"): p.get("value") for p in suite.find("properties")}
    assert props["verdict"] == "fail" and props["policy"] == "team-policy" and props["seed"] == "0"


def test_junit_of_a_passing_report_has_no_failures(passing):
    root = ET.fromstring(render(passing, "junit").encode())
    suite = root.find("testsuite")
    assert suite.get("failures") == "0" and suite.get("errors") == "0" and suite.get("tests") == "1"
    assert suite.find("testcase/system-out").text.startswith("PASS")


# --------------------------------------------------------------------------- SARIF


@pytest.fixture(scope="module")
def sarif_validator():
    schema = json.loads((DATA / "sarif-schema-2.1.0.json").read_text())
    return jsonschema.Draft4Validator(schema)


def test_sarif_is_valid_and_points_at_the_policy_lines(failing, policy_file, sarif_validator, monkeypatch):
    monkeypatch.chdir(policy_file.parent)
    log = json.loads(render(failing, "sarif"))
    sarif_validator.validate(log)
    run = log["runs"][0]
    rules = [r["id"] for r in run["tool"]["driver"]["rules"]]
    assert rules == ["privgate/accuracy", "privgate/tpr_at_fpr", "privgate/exposed_record"]
    exposed = [r for r in run["results"] if r["ruleId"] == "privgate/exposed_record"]
    results = [r for r in run["results"] if r["ruleId"] != "privgate/exposed_record"]
    # one note per exposed training record (the model fails), pointing at its row of the members
    assert len(exposed) == len(failing.exposed["records"]) == 10
    assert {r["level"] for r in exposed} == {"note"}
    first = failing.exposed["records"][0]
    assert exposed[0]["locations"][0]["logicalLocations"][0]["name"] == f"members[{first['member_index']}]"
    assert exposed[0]["properties"]["memberIndex"] == first["member_index"]
    assert f"training record {first['member_index']} " in exposed[0]["message"]["text"]
    assert [(r["ruleId"], r["level"]) for r in results] == [
        ("privgate/accuracy", "error"),
        ("privgate/tpr_at_fpr", "warning"),
    ]
    assert [rules[r["ruleIndex"]] for r in run["results"]] == [r["ruleId"] for r in run["results"]]
    lines = POLICY.splitlines()
    for r, check_id in zip(results, ["mia-accuracy", "mia-tpr"]):
        loc = r["locations"][0]["physicalLocation"]
        assert loc["artifactLocation"] == {"uri": "policy.yaml", "uriBaseId": "%SRCROOT%"}
        assert lines[loc["region"]["startLine"] - 1].strip() == f"- id: {check_id}"
        assert r["properties"]["check"] == check_id
    assert results[0]["properties"]["value"] == pytest.approx(failing.checks[0].value)
    assert "threshold ≤ 0.8" in results[0]["message"]["text"]
    assert run["invocations"][0]["exitCode"] == 1
    assert len({r["partialFingerprints"]["privgateCheck/v1"] for r in results}) == 2


def test_sarif_of_a_passing_report_is_valid_and_empty(passing, sarif_validator):
    log = json.loads(render(passing, "sarif"))
    sarif_validator.validate(log)
    assert log["runs"][0]["results"] == []
    assert log["version"] == "2.1.0"


def test_sarif_with_a_builtin_policy_points_at_the_model(failing, sarif_validator, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rep = failing.model_copy(
        update={
            "policy": {**failing.policy, "source": "internal"},
            "target": {**failing.target, "path": "models/model.pt"},
        }
    )
    log = json.loads(render(rep, "sarif"))
    sarif_validator.validate(log)
    checks = [r for r in log["runs"][0]["results"] if r["ruleId"] != "privgate/exposed_record"]
    assert {r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] for r in checks} == {"models/model.pt"}


# --------------------------------------------------------------------------- Markdown


def _rows(md: str, header_start: str) -> list[str]:
    lines = md.splitlines()
    i = next(k for k, line in enumerate(lines) if line.startswith(header_start))
    out = []
    for line in lines[i + 2 :]:
        if not line.startswith("|"):
            break
        out.append(line)
    return out


def _cells(row: str) -> list[str]:
    return [c.strip() for c in re.split(r"(?<!\\)\|", row)[1:-1]]


def test_markdown_has_verdict_checks_and_attacks(failing):
    md = render(failing, "markdown")
    assert md.startswith("## privgate ❌ FAIL · policy `team-policy`")
    checks = [_cells(r) for r in _rows(md, "| status | check |")]
    acc = failing.checks[0]
    assert checks[0][:4] == ["❌ fail", "`mia-accuracy`", f"best → {acc.chosen_attack}", "accuracy"]
    assert checks[0][4] == f"{acc.value:.3f} [{acc.ci[0]:.3f}, {acc.ci[1]:.3f}]"
    assert checks[0][5:] == ["≤ 0.8", f"{acc.n_members}/{acc.n_nonmembers}"]
    assert checks[1][0] == "⚠️ inconclusive" and checks[1][4] == "n/a"
    attacks = [_cells(r) for r in _rows(md, "| attack | access |")]
    assert [a[0] for a in attacks] == ["loss", "confidence", "correctness"]
    loss = failing.attacks[0]
    assert attacks[0][2] == f"{loss.auc:.3f} [{loss.auc_ci[0]:.3f}, {loss.auc_ci[1]:.3f}]"
    assert attacks[0][4] == "too few non-members"
    assert "Remediation" not in md


def test_markdown_cells_cannot_break_a_row(failing):
    assert cell("a | b\nc") == "a \\| b c"
    c = failing.checks[0].model_copy(update={"id": "x|y"})
    md = render(failing.model_copy(update={"checks": [c]}), "markdown")
    assert len(_cells(_rows(md, "| status | check |")[0])) == 7


def test_markdown_remediation_table(failing):
    md = render(failing.model_copy(update={"remediation": REMEDIATION}), "markdown")
    assert "### Remediation (DP-SGD)" in md and "Chosen ε: **5**" in md
    assert "strategy: ladder · schedule: 50, 20, 10, 5 · trainings: 4" in md and "utility floor: 0.85" in md
    assert "*selection leakage*: Choosing ε" in md and "*reason*: DP-SGD at ε = 5" in md
    header = _cells(next(line for line in md.splitlines() if line.startswith("| ε |")))
    assert header == [
        "ε",
        "utility",
        "utility_ci",
        "utility_ok",
        "mia-accuracy",
        "mia-accuracy status",
        "privacy",
        "verdict",
        "accepted",
        "ε spent",
        "σ",
    ]
    rows = [_cells(r) for r in _rows(md, "| ε |")]
    assert [r[0] for r in rows] == ["50", "20", "10", "5"]
    assert rows[0][1:] == ["0.93", "[0.89, 0.96]", "true", "0.81", "fail", "fail", "fail", "false", "49.9", "0.6"]


def test_remediation_view_reads_the_typed_section(failing):
    """The section is typed (privgate.report.remediation_section): partial sections load, unknown keys are
    ignored, and a wrong type is an error when the report is read — nothing is guessed."""
    assert remediation_view(failing) is None
    partial = remediation_view(failing.model_copy(update={"remediation": {"chosen_epsilon": 2.0}}))
    assert partial.rows == [] and partial.chosen_epsilon == 2.0 and not partial.plottable
    odd = remediation_view(failing.model_copy(update={"remediation": {"steps": [{"epsilon": 1}], "rows": []}}))
    assert odd.rows == [] and odd.chosen_epsilon is None and not odd.plottable  # 'steps' is not a row key
    bad = json.loads(failing.to_json())
    bad["remediation"] = {"rows": [{"epsilon": "big"}]}
    with pytest.raises(ValidationError, match="epsilon"):
        Report.model_validate(bad)
    full = remediation_view(failing.model_copy(update={"remediation": REMEDIATION}))
    assert full.epsilon_key == "epsilon" and full.utility_keys == ["utility"] and full.leakage_keys == ["mia-accuracy"]
    assert full.plottable and full.chosen_epsilon == 5.0 and full.utility_floor == 0.85
    assert chosen_epsilon(None) is None and chosen_epsilon({"chosen_epsilon": None}) is None
    for rem in ({"chosen_epsilon": 2.0}, {"steps": [{"epsilon": "big"}]}, {"rows": []}, {"rows": [{"epsilon": 1.0}]}):
        rep = failing.model_copy(update={"remediation": rem})
        assert "Remediation" in render(rep, "markdown") and "Remediation" in render(rep, "html")


# --------------------------------------------------------------------------- HTML


def decode_png(data: bytes) -> np.ndarray:
    """A small PNG decoder (8-bit grayscale/RGB/RGBA, non-interlaced) for checking images in tests."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, header = 8, b"", None
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        tag, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        if tag == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif tag == b"IDAT":
            idat += body
        pos += 12 + length
    w, h, depth, colour, _, _, interlace = header
    assert depth == 8 and interlace == 0
    ch = {0: 1, 2: 3, 4: 2, 6: 4}[colour]
    raw = zlib.decompress(idat)
    stride = w * ch
    rows = []
    prev = np.zeros(stride, dtype=np.int64)
    for y in range(h):
        f = raw[y * (stride + 1)]
        line = np.frombuffer(raw, dtype=np.uint8, count=stride, offset=y * (stride + 1) + 1).astype(np.int64)
        if f == 0:
            cur = line
        elif f == 1:  # Sub: a running sum along each channel
            cur = np.cumsum(line.reshape(w, ch), axis=0).reshape(-1) & 0xFF
        elif f == 2:  # Up
            cur = (line + prev) & 0xFF
        else:  # Average or Paeth: sequential along the row
            ln, up, out = line.tolist(), prev.tolist(), [0] * stride
            for x in range(stride):
                a = out[x - ch] if x >= ch else 0
                b = up[x]
                if f == 3:
                    p = (a + b) >> 1
                else:
                    c = up[x - ch] if x >= ch else 0
                    pa, pb, pc = abs(b - c), abs(a - c), abs(a + b - 2 * c)
                    p = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                out[x] = (ln[x] + p) & 0xFF
            cur = np.array(out, dtype=np.int64)
        rows.append(cur)
        prev = cur
    return np.array(rows, dtype=np.uint8).reshape(h, w, ch)


def test_png_encoder_round_trips():
    img = (np.arange(48).reshape(6, 8) * 5).astype(np.uint8)
    assert np.array_equal(decode_png(png_bytes(img))[:, :, 0], img)
    rgb = np.stack([img, img[::-1], 255 - img], axis=2)
    assert np.array_equal(decode_png(png_bytes(rgb)), rgb)


def _points(svg: str, name: str) -> list[tuple[float, float]]:
    pts = re.search(rf"class='series' data-name='{re.escape(name)}' points='([^']+)'", svg).group(1).split()
    return [tuple(map(float, p.split(","))) for p in pts]


def test_roc_chart_uses_log_log_axes():
    a = AttackSummary(
        name="loss",
        threat_model="black-box",
        status="ran",
        auc=0.8,
        n_members=100,
        n_nonmembers=100,
        roc={"fpr": [0.0, 0.01, 0.1, 1.0], "tpr": [0.0, 0.1, 0.5, 1.0]},
    )
    xy = _points(roc_chart([a]), "loss (AUC 0.800)")
    # axes 0.01..1 on a 482 x 322 px plot whose top-left corner is (62, 30)
    x = lambda f: 62 + 482 * (math.log10(f) + 2) / 2  # noqa: E731
    y = lambda t: 30 + 322 * (1 - (math.log10(t) + 2) / 2)  # noqa: E731
    assert (x(0.1), y(0.5)) == pytest.approx(xy[xy.index(min(xy, key=lambda p: abs(p[0] - x(0.1))))], abs=0.11)
    assert x(0.1) == pytest.approx(62 + 241)  # FPR 0.1 sits half-way on a log axis
    # FPR = 0 cannot be drawn on a log axis: clipped to the corner
    assert xy[0] == (62.0, 352.0)
    # between operating points the curve follows the straight ROC segment of linear space,
    # TPR = 0.5 + 0.5 (FPR - 0.1) / 0.9, which is curved on log-log axes
    between = [(px, py) for px, py in xy if x(0.1) + 1 < px < x(1.0) - 1]
    assert len(between) >= 5
    for px, py in between:
        f = 10 ** ((px - 62) / 482 * 2 - 2)
        assert py == pytest.approx(y(0.5 + 0.5 * (f - 0.1) / 0.9), abs=0.15)
    assert roc_chart([AttackSummary(name="x", threat_model="black-box", status="unavailable")]) is None


def test_line_chart_linear_axis():
    svg = line_chart(
        [Series("u", [1.0, 10.0], [0.0, 1.0], "#000")],
        x_range=(1, 10),
        y_range=(0, 1),
        x_log=True,
        y_log=False,
        x_label="x",
        y_label="y",
        title="t",
    )
    pts = re.search(r"points='([^']+)'", svg).group(1).split()
    assert pts == ["62.0,352.0", "544.0,30.0"]


def test_html_is_self_contained_with_checks_roc_and_remediation(failing):
    rng = np.random.default_rng(0)
    attacks = [a.model_copy(deep=True) for a in failing.attacks]
    attacks[0].extras["reconstructions"] = rng.random((4, 64)).tolist()
    attacks[1].extras["artefacts"] = {
        "reconstructions.png": png_bytes(np.full((8, 16), 200, np.uint8)),
        "reconstructions.csv": b"a,b\n",
    }
    rep = failing.model_copy(update={"remediation": REMEDIATION, "attacks": attacks})
    page = render(rep, "html")
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    assert "id='verdict'>FAIL<" in page
    # nothing fetched from elsewhere: the only URL is the SVG namespace
    assert set(re.findall(r"https?://[^\s'\"<>]+", page)) == {"http://www.w3.org/2000/svg"}
    assert "<script" not in page
    acc = failing.checks[0]
    assert page.count("<tr class='check ") == 2 and f"{acc.value:.3f} [{acc.ci[0]:.3f}, {acc.ci[1]:.3f}]" in page
    roc = page[page.index("<figure id='roc'>") :]
    roc = roc[: roc.index("</figure>")]
    assert roc.count("class='series'") == len([a for a in failing.attacks if a.status == "ran"]) == 3
    rem = page[page.index("<figure id='remediation'>") :]
    rem = rem[: rem.index("</figure>")]
    assert "chosen ε = 5" in rem and "utility floor 0.85" in rem and "mia-accuracy max 0.8" in rem
    assert re.findall(r"class='series' data-name='([^']+)'", rem) == ["utility", "mia-accuracy"]
    tiles = re.findall(r"<img class='tile' alt='loss: reconstructions #\d' src='data:image/png;base64,([^']+)'", page)
    assert len(tiles) == 4 and decode_png(base64.b64decode(tiles[0])).shape == (8, 8, 1)
    assert page.count("<img class='grid' alt='confidence: reconstructions.png'") == 1


def test_report_render_never_opens_the_artefact_paths_a_report_names(failing, tmp_path, monkeypatch):
    """A report is data: ``report render`` lists saved artefacts by name and embeds none of them (issue 26)."""
    run_dir = tmp_path / "ci"
    grid = run_dir / "run.artefacts" / "inversion" / "reconstructions.png"
    grid.parent.mkdir(parents=True)
    grid.write_bytes(png_bytes(np.tile(np.arange(16, dtype=np.uint8) * 16, (8, 1))))
    attacks = [a.model_copy(deep=True) for a in failing.attacks]
    attacks[0].extras["artefacts"] = [
        "run.artefacts/inversion/reconstructions.png",
        "run.artefacts/inversion/reconstructions.csv",
        str(grid),
    ]
    (run_dir / "run.json").write_text(failing.model_copy(update={"attacks": attacks}).to_json())
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    r = _cli("report", "render", str(run_dir / "run.json"), "--html", "page.html")
    assert r.exit_code == 0, r.output
    page = (elsewhere / "page.html").read_text()
    assert "<img class='grid'" not in page
    listed = page[page.index("<p class='muted' id='not-embedded'>") :].split("</p>")[0]
    assert "<code>loss: run.artefacts/inversion/reconstructions.png</code>" in listed
    assert f"<code>loss: {grid}</code>" in listed and "reconstructions.csv" not in listed


def test_html_embeds_the_images_its_run_attached(failing):
    """check attaches the PNGs it wrote (attach_images); the HTML embeds exactly those bytes, never reads a path."""
    from privgate.report.html import attach_images

    png = png_bytes(np.tile(np.arange(16, dtype=np.uint8) * 16, (8, 1)))
    attacks = [a.model_copy(deep=True) for a in failing.attacks]
    attacks[0].extras["artefacts"] = ["nowhere/inversion/reconstructions.png"]
    rep = attach_images(failing.model_copy(update={"attacks": attacks}), {"nowhere/inversion/reconstructions.png": png})
    page = render(rep, "html")
    uris = re.findall(r"<img class='grid' alt='loss: reconstructions.png' src='data:image/png;base64,([^']+)'>", page)
    assert len(uris) == 1 and base64.b64decode(uris[0]) == png
    assert "_images" not in rep.to_json()  # never in the JSON


def test_html_without_attacks_or_remediation(passing):
    bare = passing.model_copy(update={"attacks": [], "checks": []})
    page = render(bare, "html")
    assert "The policy requires no checks." in page and "<svg" not in page and "Remediation" not in page


# --------------------------------------------------------------------------- privgate report render


def _privgate(*args: str, **kw) -> subprocess.CompletedProcess:
    from privgate_cli import PRIVGATE

    return subprocess.run([*PRIVGATE, *args], capture_output=True, text=True, timeout=300, **kw)


def _cli(*args: str):
    from click.testing import CliRunner

    from privgate.cli import cli

    return CliRunner().invoke(cli, list(args))


def test_report_render_writes_every_format(failing, tmp_path, sarif_validator):
    run = tmp_path / "run.json"
    run.write_text(failing.to_json())
    before = run.read_bytes()
    out = tmp_path / "out"
    # as a user runs it: the installed console script
    r = _privgate(
        "report",
        "render",
        str(run),
        "--html",
        str(out / "r.html"),
        "--markdown",
        str(out / "r.md"),
        "--junit",
        str(out / "r.xml"),
        "--sarif",
        str(out / "r.sarif"),
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    assert run.read_bytes() == before
    assert (out / "r.md").read_text() == render(failing, "markdown")
    assert (out / "r.xml").read_text() == render(failing, "junit")
    sarif_validator.validate(json.loads((out / "r.sarif").read_text()))
    assert "<svg" in (out / "r.html").read_text()
    assert sorted(p.name for p in out.iterdir()) == ["r.html", "r.md", "r.sarif", "r.xml"]  # no temporary files left


def test_report_render_bad_input(failing, tmp_path):
    run = tmp_path / "run.json"
    run.write_text(failing.to_json())
    before = run.read_bytes()
    bad = tmp_path / "bad.json"
    bad.write_text('{"verdict": "fail"}')
    r = _cli("report", "render", str(bad), "--html", str(tmp_path / "x.html"))
    assert r.exit_code == 2 and "not a privgate JSON report" in r.output and "Traceback" not in r.output
    assert not (tmp_path / "x.html").exists()
    r = _cli("report", "render", str(tmp_path / "missing.json"), "--html", str(tmp_path / "x.html"))
    assert r.exit_code == 2 and "report file not found" in r.output
    r = _cli("report", "render", str(run))
    assert r.exit_code == 2 and "nothing to render" in r.output
    r = _cli("report", "render", str(run), "--html", str(run))
    assert r.exit_code == 2 and "would overwrite an input" in r.output and run.read_bytes() == before


def test_report_render_step_summary_appends(failing, tmp_path, monkeypatch):
    run = tmp_path / "run.json"
    run.write_text(failing.to_json())
    summary = tmp_path / "summary.md"
    summary.write_text("earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    r = _cli("report", "render", str(run), "--step-summary")
    assert r.exit_code == 0, r.output
    assert summary.read_text() == "earlier step\n" + render(failing, "markdown")


def test_report_outputs_for_github(failing, tmp_path):
    run = tmp_path / "run.json"
    run.write_text(failing.to_json())
    r = _cli("report", "outputs", str(run))
    assert r.exit_code == 0
    assert dict(line.split("=", 1) for line in r.output.splitlines()) == {
        "verdict": "fail",
        "exit-code": "1",
        "checks": "2",
        "failed": "1",
        "inconclusive": "1",
        "passed": "0",
        "epsilon": "",
    }
    run.write_text(failing.model_copy(update={"remediation": RemediationSection.model_validate(REMEDIATION)}).to_json())
    assert "epsilon=5\n" in _cli("report", "outputs", str(run)).output
    assert chosen_epsilon(REMEDIATION) == 5.0


def test_roc_curves_have_distinct_colours_and_the_legend_sits_below_the_plot():
    from privgate.attacks import available_attacks

    names = sorted(available_attacks()) + [f"extra_{i}" for i in range(10)]  # every attack, and more than the palette
    attacks = [
        AttackSummary(
            name=n,
            threat_model="black-box",
            status="ran",
            auc=0.6,
            n_members=100,
            n_nonmembers=100,
            roc={"fpr": [0.0, 0.01 * (i + 1), 1.0], "tpr": [0.0, 0.5, 1.0]},
        )
        for i, n in enumerate(names)
    ]
    svg = roc_chart(attacks)
    colours = re.findall(r"class='series' data-name='[^']+' points='[^']+' fill='none' stroke='(#[0-9a-f]{6})'", svg)
    assert len(names) == len(available_attacks()) + 10 and len(colours) == len(names) == len(set(colours))
    legend = re.findall(
        r"<g class='legend' data-name='([^']+)'><line x1='[\d.]+' y1='(\d+)' x2='[\d.]+' y2='\d+' "
        r"stroke='(#[0-9a-f]{6})'",
        svg,
    )
    assert [(n, c) for n, _, c in legend] == [(f"{n} (AUC 0.600)", c) for n, c in zip(names, colours)]
    # the plot is 322 px tall from y = 30 and its axis label sits at y = 392: every legend row is below both
    assert min(int(y) for _, y, _ in legend) > 392
    height = int(re.search(r"<svg [^>]*height='(\d+)'", svg).group(1))
    assert max(int(y) for _, y, _ in legend) < height
