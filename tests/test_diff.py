"""``privgate diff BASE.json NEW.json`` on real report pairs, run as a user runs it.

One generalising and one memorising MLP on the same 300 + 300 audit rows
(the session ``case`` of ``tests/cases.py``), each audited as ``privgate check`` audits it (in process):
the same model twice is no regression (exit 0), memorising after generalising
is one (exit 1, naming the metric, the change, its interval and the p-value),
and reports of different policies, data or schema cannot be compared (exit 2,
with the reason). Outputs never overwrite the reports they read.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cases import run_cli

import privgate
from privgate import Report
from privgate.report.diff import NotComparable, diff_reports


def _check(case, model: Path, out: Path, policy: str = "internal", nonmembers: Path | None = None) -> Path:
    """A report as ``privgate check MODEL --policy POLICY ... --json OUT`` writes it (in process: faster)."""
    report = privgate.check(str(model), policy, str(case.members), str(nonmembers or case.nonmembers), cache_dir="off")
    out.write_text(report.to_json())
    return out


@pytest.fixture(scope="module")
def reports(case, tmp_path_factory):
    d = tmp_path_factory.mktemp("reports")
    return {
        "safe": _check(case, case.safe_ts, d / "safe.json"),
        "safe-again": _check(case, case.safe_ts, d / "safe-again.json"),
        "leaky": _check(case, case.leaky_ts, d / "leaky.json"),
        "safe-confidential": _check(case, case.safe_ts, d / "safe-confidential.json", policy="confidential"),
    }


def _load(p: Path) -> Report:
    return Report.from_json(p.read_text())


def test_reports_carry_a_fingerprint_of_the_audit_data(reports):
    a, b = _load(reports["safe"]), _load(reports["leaky"])
    assert len(a.data["sha256"]) == 64 and a.data["sha256"] == b.data["sha256"]
    assert a.data["members"]["sha256"] != a.data["nonmembers"]["sha256"]
    assert a.policy["regression"] == {"tolerance": 0.02, "metrics": {"advantage": 0.04, "epsilon_lb": 0.5}}


def test_same_model_twice_is_no_regression(reports, tmp_path):
    out = tmp_path / "diff.json"
    r = run_cli("diff", str(reports["safe"]), str(reports["safe-again"]), "--json", str(out), "--no-step-summary")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "NO REGRESSION" in r.stdout
    d = json.loads(out.read_text())
    assert d["result"] == "no regression" and d["exit_code"] == 0 and d["comparisons"] >= 2
    assert d["level"] == pytest.approx(d["alpha"] / d["comparisons"]) and d["alpha"] == pytest.approx(0.01)
    compared = [row for row in d["rows"] if row["change"] is not None]
    assert len(compared) == d["comparisons"]
    for (
        row
    ) in compared:  # identical numbers: no change, an interval around 0, p at least ½ for 'worse by more than 0.02'
        assert row["change"] == 0 and row["change_ci"][0] < 0 < row["change_ci"][1]
        assert row["status"] == "within tolerance" and row["p_value"] >= 0.5
    assert any("same model file" in n for n in d["notes"])


def test_memorising_after_generalising_is_a_regression(reports, tmp_path):
    out, md = tmp_path / "diff.json", tmp_path / "diff.md"
    r = run_cli(
        "diff",
        str(reports["safe"]),
        str(reports["leaky"]),
        "--json",
        str(out),
        "--markdown",
        str(md),
        "--no-step-summary",
    )
    assert r.returncode == 1, r.stdout + r.stderr
    d = json.loads(out.read_text())
    acc = next(row for row in d["rows"] if row["id"] == "mia-accuracy")
    assert acc["status"] == "regressed" and acc["metric"] == "accuracy"
    assert acc["base"]["value"] < 0.6 < 0.85 < acc["new"]["value"]  # generalising ~0.55, memorising ~0.91
    lo, hi = acc["change_ci"]
    assert 0.02 < lo < acc["change"] < hi and acc["p_value"] < d["level"]
    assert acc["method"] == "MOVER with Clopper-Pearson TPR/FPR bounds"
    losses = next(row for row in d["rows"] if row["kind"] == "attack" and row["id"] == "loss")
    assert losses["status"] == "regressed" and losses["method"] == "z-test of two DeLong AUCs"
    assert losses["new"]["value"] - losses["base"]["value"] == pytest.approx(losses["change"])
    # the console and the Markdown say which metric regressed, by how much, its interval and p
    assert "REGRESSION" in r.stdout and "mia-accuracy" in r.stdout
    text = md.read_text()
    assert text.startswith("## privgate diff ❌ REGRESSION · policy `internal`")
    row = next(line for line in text.splitlines() if "`mia-accuracy`" in line)
    assert "❌ regressed" in row and f"{acc['change']:+.3f} [{lo:+.3f}, {hi:+.3f}]" in row
    assert f"α/m = {d['level']:.2g}" in text


def test_the_reverse_is_an_improvement_and_tolerance_can_absorb_a_regression(reports, tmp_path):
    r = run_cli("diff", str(reports["leaky"]), str(reports["safe"]), "--no-step-summary")
    assert r.returncode == 0 and "improved" in r.stdout
    wide = run_cli("diff", str(reports["safe"]), str(reports["leaky"]), "--tolerance", "0.5", "--no-step-summary")
    assert wide.returncode == 0, wide.stdout  # the ~0.36 change is within 0.5
    only_acc = run_cli(
        "diff", str(reports["safe"]), str(reports["leaky"]), "--tolerance", "accuracy=0.5", "--no-step-summary"
    )
    assert only_acc.returncode == 1  # the AUC rows keep the policy's 0.02


def test_different_policies_cannot_be_compared(reports, tmp_path):
    out = tmp_path / "diff.json"
    r = run_cli(
        "diff", str(reports["safe"]), str(reports["safe-confidential"]), "--json", str(out), "--no-step-summary"
    )
    assert r.returncode == 2 and not out.exists()
    assert "different policies" in r.stderr and "'internal' in" in r.stderr and "Traceback" not in r.stderr


def test_different_data_and_missing_fingerprints_cannot_be_compared(case, reports, tmp_path):
    import numpy as np

    with np.load(case.nonmembers) as z:
        np.savez(tmp_path / "fewer.npz", x=z["x"][:-10], y=z["y"][:-10])
    other = _check(case, case.safe_ts, tmp_path / "other.json", nonmembers=tmp_path / "fewer.npz")
    r = run_cli("diff", str(reports["safe"]), str(other), "--no-step-summary")
    assert r.returncode == 2 and "audit different data (nonmembers sha256" in r.stderr
    old = json.loads(reports["safe"].read_text())
    del old["data"]["sha256"]
    (tmp_path / "old.json").write_text(json.dumps(old))
    r = run_cli("diff", str(tmp_path / "old.json"), str(reports["safe"]), "--no-step-summary")
    assert r.returncode == 2 and "carries no fingerprint of its audit data" in r.stderr


def test_a_schema_mismatch_cannot_be_compared(reports, tmp_path):
    old = json.loads(reports["safe"].read_text())
    old["schema_version"] = 0
    (tmp_path / "v0.json").write_text(json.dumps(old))
    r = run_cli("diff", str(tmp_path / "v0.json"), str(reports["leaky"]), "--no-step-summary")
    assert r.returncode == 2 and "schema version 0" in r.stderr and "schema version" in r.stderr
    newer = dict(old, schema_version=99)
    (tmp_path / "v99.json").write_text(json.dumps(newer))
    r = run_cli("diff", str(reports["safe"]), str(tmp_path / "v99.json"), "--no-step-summary")
    assert r.returncode == 2 and "newer than this privgate understands" in r.stderr
    (tmp_path / "junk.json").write_text("{}")
    r = run_cli("diff", str(tmp_path / "junk.json"), str(reports["safe"]), "--no-step-summary")
    assert r.returncode == 2 and "not a privgate JSON report" in r.stderr


def test_outputs_never_overwrite_the_reports(reports, tmp_path):
    before = reports["safe"].read_bytes()
    r = run_cli(
        "diff", str(reports["safe"]), str(reports["leaky"]), "--json", str(reports["safe"]), "--no-step-summary"
    )
    assert r.returncode == 2 and "would overwrite an input" in r.stderr
    assert reports["safe"].read_bytes() == before
    same = tmp_path / "out"
    r = run_cli(
        "diff",
        str(reports["safe"]),
        str(reports["leaky"]),
        "--json",
        str(same),
        "--markdown",
        str(same),
        "--no-step-summary",
    )
    assert r.returncode == 2 and "each output needs its own path" in r.stderr and not same.exists()


@pytest.mark.parametrize(
    "bad, message",
    [("-1", "must be a number >= 0"), ("auc=x", "not a number"), ("recall=0.1", "unknown metric 'recall'")],
)
def test_bad_tolerance_is_one_sentence(reports, bad, message):
    r = run_cli("diff", str(reports["safe"]), str(reports["leaky"]), "--tolerance", bad, "--no-step-summary")
    assert r.returncode == 2 and message in r.stderr and "Traceback" not in r.stderr


def test_step_summary_gets_the_markdown(reports, tmp_path):
    summary = tmp_path / "summary.md"
    r = run_cli("diff", str(reports["safe"]), str(reports["leaky"]), env={"GITHUB_STEP_SUMMARY": str(summary)})
    assert r.returncode == 1 and summary.read_text().startswith("## privgate diff ❌ REGRESSION")


def test_python_api_refuses_incomparable_reports(reports):
    with pytest.raises(NotComparable, match="different policies"):
        diff_reports(_load(reports["safe"]), _load(reports["safe-confidential"]))
