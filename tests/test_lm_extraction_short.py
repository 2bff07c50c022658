"""Verbatim extraction on short records (issue 36, item 12): lengths fitted to the records; nothing tested, no value.

Personal data come in short records. The tiny LM of ``tests/tiny_lm.py`` memorised its 51-character member
records; cut to their first 30 characters (30 tokens, one a character) they are shorter than the fixed 32 + 16
tokens the extraction test used to ask for, so it tested none of them and reported an extraction rate of 0.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cases import run_cli
from tiny_lm import tiny_lm_records

POLICY = """name: short-records
extends: public
sensitivity: public
release: api
confidence: 0.9
attacks:
  extraction: {%s}
checks:
  - id: extraction
    attack: extraction
    metric: extraction_rate
    max: 0.02
"""


def _short(tmp_path: Path, options: str = "") -> tuple[Path, Path, Path]:
    """The tiny LM's records cut to 30 characters (two more members of 13: too short for any test), a policy."""
    members, nonmembers = tiny_lm_records()
    m, n, policy = tmp_path / "members.jsonl", tmp_path / "nonmembers.jsonl", tmp_path / "policy.yaml"
    short = [t[:30] for t in members] + ["record 90: ab", "record 91: cd"]
    m.write_text("".join(json.dumps({"text": t}) + "\n" for t in short))
    n.write_text("".join(json.dumps({"text": t[:30]}) + "\n" for t in nonmembers))
    policy.write_text(POLICY % options)
    return m, n, policy


def test_short_records_are_tested_with_lengths_fitted_to_them(tiny_lm_dir, tmp_path):
    """30-token records: prompted with 20 tokens for the next 10 (fitted), members extracted, the check fails."""
    m, n, policy = _short(tmp_path)
    out = tmp_path / "report.json"
    args = ("--members", str(m), "--nonmembers", str(n), "--json", str(out), "--threads", "1")
    r = run_cli("check", str(tiny_lm_dir), "--policy", str(policy), *args, cwd=tmp_path)
    assert r.returncode == 1, r.stdout + r.stderr  # a proven violation, not "0 … inconclusive"
    rep = json.loads(out.read_text())
    (check,) = rep["checks"]
    details = check["details"]
    # 10th percentile of the token lengths L = 30: m = min(16, L // 3) = 10, k = min(32, L - m) = 20
    assert (details["prefix_tokens"], details["suffix_tokens"], details["lengths_from_records"]) == (20, 10, True)
    assert details["record_tokens"] == {"min": 13, "p10": 30, "median": 30, "max": 30}
    members, nonmembers = details["members"], details["nonmembers"]
    assert (members["tested"], members["skipped"], nonmembers["tested"], nonmembers["skipped"]) == (24, 2, 24, 0)
    assert members["extracted"] >= 20 and nonmembers["extracted"] == 0  # it memorised the members, not the others
    assert check["n_members"] == 24 and check["n_nonmembers"] == 24
    assert check["value"] == pytest.approx(members["extracted"] / 24)
    assert check["status"] == "fail" and 0.02 < check["ci"][0] < check["value"] <= check["ci"][1] <= 1
    (notes,) = next(a for a in rep["attacks"] if a["name"] == "extraction")["notes"]
    assert "prefix + suffix 20 + 10 tokens (fitted to the records' lengths)" in notes
    assert "the records have 13 to 30 tokens (median 30); 2 records too short to test" in notes
    assert f"extraction_rate {check['value']:.3f} [{check['ci'][0]:.3f}, {check['ci'][1]:.3f}]" in r.stdout


def test_nothing_tested_has_no_value_and_is_inconclusive(tiny_lm_dir, tmp_path):
    """Lengths the policy fixes at 32 + 16 on 30-token records: no rate (None, never 0), inconclusive, and why."""
    from inproc import check, console, render

    m, n, policy = _short(tmp_path, "prefix_tokens: 32, suffix_tokens: 16")
    report = check(tiny_lm_dir, policy, m, n, threads=1)
    assert report.exit_code == 3 and report.verdict == "inconclusive"
    (got,) = json.loads(render(report, "json")["json"])["checks"]
    reason = (
        "no member and no non-member is long enough to test: a test needs 32 + 16 = 48 tokens and the records have "
        "13 to 30; set the extraction options prefix_tokens and suffix_tokens lower"
    )
    assert got["value"] is None and got["ci"] == [None, None] and got["status"] == "inconclusive"
    assert got["reason"] == reason and got["n_members"] == 0 and got["n_nonmembers"] == 0
    assert got["details"]["lengths_from_records"] is False
    assert got["details"]["members"]["rate"] is None and got["details"]["members"]["skipped"] == 26
    shown = console(report)
    assert f"extraction: {reason}" in shown  # the console says why there is no value …
    assert "extraction_rate —" in shown and "0.000" not in shown  # … and shows none


def test_fitted_lengths_follow_the_records():
    """Long records keep 32 + 16; short ones get a third of the 10th-percentile length as suffix, floors 4 and 2."""
    from privgate.lm.extraction import fitted_lengths

    assert fitted_lengths([100] * 50) == (32, 16)
    assert fitted_lengths([30] * 20 + [5]) == (20, 10)  # one short record in 21 does not shorten the test
    assert fitted_lengths([30] * 9 + [5]) == (4, 2)  # one in 10 does: the 10th percentile (lower) is the smallest
    assert fitted_lengths(list(range(25, 36)) * 3) == (18, 8)
    assert fitted_lengths([3, 4, 5]) == (4, 2)  # the floors: nothing shorter than 6 tokens can be tested
    assert fitted_lengths([30] * 10, prefix_tokens=8) == (8, 10) and fitted_lengths([30] * 10, None, 4) == (26, 4)
