"""Every audited row's scores as a file (issue 42 item 7): ``--records FILE`` and ``api.write_records``, and the
exposed-members table as a user reads it (labels as the model knows them, the rows' base, no calibration TPR, within
the terminal's width).

One in-process audit of the text-labelled forest (``tests/tables_case.py``: labels ``bad``/``fair``/``good``, two
cheap attacks, one TPR-at-FPR check) serves the content tests; the CLI runs in a subprocess once per behaviour: the
file written with the JSON report, an unknown extension refused, an input never overwritten.
"""

from __future__ import annotations

import io
import json

import numpy as np
import pandas as pd
import pytest
from cases import run_cli

from privgate import api

POLICY = """
name: records
sensitivity: confidential
release: api
confidence: 0.95
attacks:
  loss: {}
  entropy: {}
checks:
  - {id: tpr, attack: loss, metric: tpr_at_fpr, fpr: 0.1, max: 0.5}
"""


@pytest.fixture(scope="module")
def audit(tables, tmp_path_factory):
    d = tmp_path_factory.mktemp("records")
    (d / "p.yaml").write_text(POLICY)
    report = api.check(tables / "rf.skops", d / "p.yaml", tables / "m.parquet", tables / "n.parquet", cache_dir="off")
    return d, report


def test_one_record_per_audited_row_with_its_row_label_split_and_every_attacks_score(tables, audit):
    _, report = audit
    t = pd.DataFrame(report.records_table())
    members, nonmembers = pd.read_parquet(tables / "m.parquet"), pd.read_parquet(tables / "n.parquet")
    assert list(t.columns) == ["row", "side", "split", "label", "score:loss", "score:entropy", "flagged:loss@0.1"]
    assert len(t) == 400 and t["side"].value_counts().to_dict() == {"member": 200, "non-member": 200}
    for side, frame in (("member", members), ("non-member", nonmembers)):
        mine = t[t["side"] == side]
        assert mine["row"].tolist() == list(range(200))  # 0-based, in its own file's order
        assert mine["label"].tolist() == frame["label"].tolist()  # the labels as the model knows them, not 0/1/2
    assert set(t["split"]) == {"calibration", "evaluation"}
    m = t["side"] == "member"
    assert t.loc[m, "score:loss"].mean() > t.loc[~m, "score:loss"].mean()  # higher = more likely member
    # the check's decision: the threshold calibrated on the calibration non-members at FPR 0.1 flags ≤ 10 % of them
    cal_out = t[(t["split"] == "calibration") & ~m]
    assert 0 < cal_out["flagged:loss@0.1"].sum() <= 0.1 * len(cal_out)
    assert (t["flagged:loss@0.1"] == (t["score:loss"] >= t.loc[t["flagged:loss@0.1"], "score:loss"].min())).all()
    # the exposed members are the same rows, with the same scores
    for rec in report.exposed["records"]:
        row = t[m & (t["row"] == rec["member_index"])].iloc[0]
        assert row["score:loss"] == pytest.approx(rec["attacks"]["loss"]["score"])
        assert row["label"] == rec["class"] == members["label"][rec["member_index"]]


@pytest.mark.parametrize("ext", ["csv", "parquet"])
def test_api_writes_the_records_and_the_json_references_them_without_per_row_data(audit, ext):
    d, report = audit
    path = d / f"records.{ext}"
    referenced = api.write_records(report, path)
    back = pd.read_csv(path) if ext == "csv" else pd.read_parquet(path)
    expected = pd.DataFrame(report.records_table())
    pd.testing.assert_frame_equal(back, expected, check_dtype=False)
    ref = json.loads(referenced.to_json())["records"]
    assert ref["path"] == str(path) and ref["rows"] == 400 and ref["columns"] == list(expected.columns)
    assert "0-based" in ref["row_base"]
    assert len(referenced.to_json()) < len(report.to_json()) + 2000  # a reference, not 400 rows


def test_an_unknown_extension_is_one_sentence_and_writes_nothing(audit):
    from privgate import PrivgateError

    d, report = audit
    with pytest.raises(PrivgateError, match=r"^records path .*r\.xlsx: unknown extension '\.xlsx'; name a \.csv or"):
        api.write_records(report, d / "r.xlsx")
    assert not (d / "r.xlsx").exists()


@pytest.mark.parametrize("few", ["m", "n"])
def test_rows_index_the_users_file_before_sub_sampling(tables, audit, few):
    """200 rows on one side against 60 on the other are sub-sampled to 60 each: each record's row is still its row in
    the user's 200-row file, its label that row's."""
    d, _ = audit
    files = {"m": tables / "m.parquet", "n": tables / "n.parquet"}
    pd.read_parquet(files[few]).iloc[:60].to_parquet(d / "few.parquet")
    full = "n" if few == "m" else "m"
    files[few] = d / "few.parquet"
    report = api.check(tables / "rf.skops", d / "p.yaml", files["m"], files["n"], cache_dir="off")
    t = pd.DataFrame(report.records_table())
    mine = t[t["side"] == ("member" if full == "m" else "non-member")]
    assert len(mine) == 60 and mine["row"].max() >= 60  # rows of the 200-row file, not positions among the 60 kept
    assert mine["label"].tolist() == pd.read_parquet(files[full])["label"].iloc[mine["row"]].tolist()


@pytest.mark.parametrize("width", [80, 120])
def test_the_exposed_table_shows_class_names_its_rows_base_and_fits_the_width(audit, width):
    from rich.console import Console

    from privgate.report.show import show

    _, report = audit
    buf = io.StringIO()
    show(report, Console(file=buf, highlight=False, soft_wrap=True, width=width, emoji=False))
    text = buf.getvalue()
    table = text[text.index("Most exposed members") :].split("INCONCLUSIVE")[0].split("FAIL")[0].split("PASS")[0]
    assert max(len(line) for line in table.splitlines()) <= width, table
    assert "row = 0-based index in m.parquet" in table
    rows = [line.split("│")[1:-1] for line in table.splitlines() if line.startswith("│")]
    cells = [[c.strip() for c in r] for r in rows if r[0].strip()]
    assert cells and {c[2] for c in cells} <= {"bad", "fair", "good"}  # class names, not encoded labels
    for c in cells:
        assert (c[6] == "—") == (c[3] == "calibration")  # no TPR for a calibration row
    assert any(c[3] == "calibration" for c in cells) or all(c[6].endswith("%") for c in cells)


def _check(tables, d, *extra):
    args = ["check", str(tables / "rf.skops"), "--policy", str(d / "p.yaml"), "--members", str(tables / "m.parquet")]
    return run_cli(*args, "--nonmembers", str(tables / "n.parquet"), "--no-step-summary", *extra)


def test_the_cli_writes_the_records_with_the_json_report(tables, audit):
    d, _ = audit
    out = d / "cli"
    r = _check(tables, d, "--json", str(out / "r.json"), "--records", str(out / "r.csv"))
    assert r.returncode in (0, 1, 3), r.stderr
    rep = json.loads((out / "r.json").read_text())
    t = pd.read_csv(out / "r.csv")
    assert rep["records"]["path"] == str(out / "r.csv") and rep["records"]["rows"] == len(t) == 400
    assert rep["records"]["columns"] == list(t.columns) and "score:loss" not in json.dumps(rep["attacks"])
    assert f"records: {out / 'r.csv'}" in r.stdout
    assert np.isfinite(t["score:entropy"]).all()


@pytest.mark.parametrize(
    ("name", "needle"),
    [
        ("r.txt", "--records {p}: unknown extension '.txt'; name a .csv or .parquet file."),
        ("m.parquet", "the records file (--records) would overwrite an input, the members data"),
    ],
)
def test_the_cli_refuses_a_bad_records_path_before_any_work(tables, audit, tmp_path, name, needle):
    d, _ = audit
    p = tables / name if name == "m.parquet" else tmp_path / name
    before = p.read_bytes() if p.exists() else None
    r = _check(tables, d, "--json", str(tmp_path / "r.json"), "--records", str(p))
    err = " ".join(r.stderr.split())
    assert r.returncode == 2 and "Traceback" not in err and needle.format(p=p) in err, err
    assert not (tmp_path / "r.json").exists()
    assert (p.read_bytes() if p.exists() else None) == before  # an input is never overwritten
