"""Two releases of a language model: ``privgate diff`` between their reports, and ``assert_mia_below`` in a suite.

The reports are made in process (the CLI's own subprocess runs are in test_lm.py); ``privgate diff`` runs as a
user runs it, and the assertion runs in a user's test file through pytester.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cases import run_cli

pytestmark = pytest.mark.slow
pytest_plugins = ["pytester"]

POLICY = """name: lm-release
sensitivity: internal
release: api
confidence: 0.95
attacks: {lm_loss: {}, min_k: {k: 0.2}}
checks:
  - {id: mia-auc, attack: best, metric: auc, max: 0.8}
"""


@pytest.fixture(scope="module")
def releases(clinical, tmp_path_factory):
    """JSON reports of the memorising model and of the one fine-tuned on other records, and a policy file."""
    from privgate import check

    d = tmp_path_factory.mktemp("releases")
    policy = d / "policy.yaml"
    policy.write_text(POLICY)
    files = {}
    for name, nonmembers in (("memorised", "nonmembers.jsonl"), ("other", "nonmembers.jsonl")):
        rep = check(str(clinical / name), str(policy), str(clinical / "members.jsonl"), str(clinical / nonmembers))
        files[name] = d / f"{name}.json"
        files[name].write_text(rep.to_json())
    fewer = d / "fewer.jsonl"
    fewer.write_text("".join((clinical / "nonmembers.jsonl").read_text().splitlines(keepends=True)[:100]))
    rep = check(str(clinical / "other"), str(policy), str(clinical / "members.jsonl"), str(fewer))
    files["other-fewer"] = d / "other-fewer.json"
    files["other-fewer"].write_text(rep.to_json())
    return files


def _diff(base: Path, new: Path, tmp: Path):
    out = tmp / "diff.json"
    r = run_cli("diff", str(base), str(new), "--json", str(out))
    return r, (json.loads(out.read_text()) if out.exists() else None)


def test_diff_of_two_lm_releases_finds_the_memorising_one(releases, tmp_path):
    r, d = _diff(releases["other"], releases["memorised"], tmp_path)
    assert r.returncode == 1, r.stderr
    rows = {row["id"]: row for row in d["rows"]}
    assert d["result"] == "regression" and d["data_sha256"]
    for name in ("mia-auc", "lm_loss", "min_k"):
        assert rows[name]["status"] == "regressed" and rows[name]["change_ci"][0] > 0.25, rows[name]
    assert rows["mia-auc"]["base"]["value"] < 0.7 < 0.95 < rows["mia-auc"]["new"]["value"]
    # the console shows the JSON's change (≈ +0.4 to +0.6: *other*'s loss AUC is chance, 0.41-0.53 over seeds 0-3)
    assert "REGRESSION:" in r.stdout and f"lm_loss auc {rows['lm_loss']['change']:+.3f}" in r.stdout
    # the other way round: the release that stopped memorising is an improvement, exit 0
    back, d2 = _diff(releases["memorised"], releases["other"], tmp_path)
    assert back.returncode == 0 and {row["status"] for row in d2["rows"] if row["kind"] == "attack"} >= {"improved"}


def test_diff_refuses_lm_reports_of_different_audit_data(releases, tmp_path):
    r, _ = _diff(releases["other"], releases["other-fewer"], tmp_path)
    assert r.returncode == 2
    assert "the reports audit different data (nonmembers sha256" in r.stderr and "Traceback" not in r.stderr


def test_diff_compares_exact_canary_exposure(clinical, tmp_path):
    """An exposure computed by ranking every candidate has no sampling error: its change is exact."""
    from privgate import check
    from privgate.settings import TextOptions

    policy = str(Path(__file__).resolve().parent.parent / "examples" / "clinical_notes" / "policy.yaml")
    for name in ("memorised", "other"):
        rep = check(
            str(clinical / name),
            policy,
            str(clinical / "members.jsonl"),
            str(clinical / "nonmembers.jsonl"),
            text=TextOptions(canaries=str(clinical / "canaries.jsonl")),
        )
        (tmp_path / f"{name}.json").write_text(rep.to_json())
    r, d = _diff(tmp_path / "other.json", tmp_path / "memorised.json", tmp_path)
    assert r.returncode == 1, r.stderr
    row = next(row for row in d["rows"] if row["id"] == "canary-exposure")
    assert row["status"] == "regressed" and row["tolerance"] == 1.0 and row["method"].startswith("exact exposure")
    # "other" never saw the canaries: each one's rank among the 10^4 candidates is uniform, so exposure ≥ 10 bits
    # (rank ≤ 9) has probability 9/10^4, and the larger of the two is below 10 bits but for 1 builder seed in 550;
    # the memorised model ranks both secrets first of 10^4 (13.3 bits)
    assert row["base"]["value"] < 10 and row["new"]["value"] > 13 and row["change_ci"][0] == row["change_ci"][1]
    assert row["change"] == pytest.approx(row["new"]["value"] - row["base"]["value"])


#: 0.8, not 0.75: the upper end of "other"'s best-attack interval (chance AUC, 60 + 60 records, Bonferroni over the
#: attacks) is 0.652, 0.603, 0.722, 0.687 for builder seeds 0-3 (benchmarks/lm/lm_fixture_seeds.py), too near 0.75
USER_TESTS = """
from pytest_privgate import assert_mia_below

MEMBERS, NONMEMBERS = {members!r}, {nonmembers!r}


def test_model_fine_tuned_on_other_records():
    report = assert_mia_below({other!r}, MEMBERS, NONMEMBERS, auc=0.8)
    assert report.target["kind"] == "causal_lm" and report.checks[0].ci[1] < 0.8


def test_memorising_model():
    assert_mia_below({memorised!r}, MEMBERS, NONMEMBERS, auc=0.8)
"""


def test_assert_mia_below_on_a_model_directory_and_text_files(pytester: pytest.Pytester, clinical):
    pytester.makepyfile(
        test_user=USER_TESTS.format(
            members=str(clinical / "members.jsonl"),
            nonmembers=str(clinical / "nonmembers.jsonl"),
            other=str(clinical / "other"),
            memorised=str(clinical / "memorised"),
        )
    )
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1)
    out = result.stdout.str()
    assert f"assert_mia_below failed (policy 'assert_mia_below' on {clinical / 'memorised'}):" in out
    line = next(x for x in out.splitlines() if "FAIL — check mia-auc: attack best → " in x)
    assert "metric auc = 1.000 [0.9" in line and "threshold ≤ 0.8" in line and "60 members / 60 non-members" in line
