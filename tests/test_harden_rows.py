"""A scikit-learn capacity search whose rows explain themselves, and that stops when the audit size cannot succeed.

Issue 42: a policy extending another had every candidate's interval null (its budget was split over the ladder
for the audited policy only, leaving the extended one a negative share); candidate rows now carry each check's
interval, status and reason, and why the search did not take them; and a search that no candidate can win at
this audit size stops before fitting any, naming the check and the rows it needs.
"""

from __future__ import annotations

import json
import math
import textwrap
from pathlib import Path

import numpy as np
import pytest
from cases import run_cli

from privgate import api

#: The parent spends 1 % of the budget; the child 2 % in all: split over 3 steps, the child's own share was 2/3 %
#: − 1 % < 0 before the fix.
PARENT = textwrap.dedent(
    """
    name: parent
    sensitivity: confidential
    release: api
    confidence: 0.99
    attacks: {loss: {}}
    checks:
      - {id: acc, attack: loss, metric: accuracy, max: 0.9}
    """
)
CHILD = textwrap.dedent(
    """
    name: child
    extends: parent.yaml
    sensitivity: confidential
    release: api
    confidence: 0.98
    checks:
      - {id: auc, attack: loss, metric: auc, max: 0.7}
    remediation:
      enabled: true
      strategy: ladder
      capacity: [{min_samples_leaf: 2}, {min_samples_leaf: 16}, {min_samples_leaf: 64}]
    utility: {max_drop: 0.5}
    """
)


@pytest.fixture(scope="module")
def forest(tmp_path_factory) -> Path:
    import skops.io as sio
    from sklearn.ensemble import RandomForestClassifier

    d = tmp_path_factory.mktemp("harden-rows")
    rng = np.random.default_rng(3)
    x = rng.normal(size=(800, 6))
    y = (x[:, 0] + x[:, 1] + rng.normal(0, 1.5, 800) > 0).astype(np.int64)
    np.savez(d / "m.npz", x=x[:400], y=y[:400])
    np.savez(d / "n.npz", x=x[400:], y=y[400:])
    sio.dump(RandomForestClassifier(n_estimators=20, random_state=0).fit(x[:400], y[:400]), d / "rf.skops")
    (d / "parent.yaml").write_text(PARENT)
    (d / "child.yaml").write_text(CHILD)
    return d


def test_every_candidate_row_has_its_intervals_its_reasons_and_why_it_was_not_taken(forest, tmp_path):
    h = api.harden(str(forest / "rf.skops"), str(forest / "child.yaml"), str(forest / "m.npz"),
                   str(forest / "n.npz"), output_model=str(tmp_path / "out.skops"))  # fmt: skip
    rem = h.report.remediation
    assert h.status == "hardened" and rem.rows, rem.reason
    for row in rem.rows:
        assert {c.id for c in row.checks} == {"auc", "parent:acc"}
        for c in row.checks:  # each candidate's checks decided on real intervals, at the split budget
            assert c.ci is not None and all(v is not None and math.isfinite(v) for v in c.ci), (row.step, c)
            assert c.status in ("pass", "fail", "inconclusive") and c.reason
            assert c.ci[0] <= c.value <= c.ci[1]
        if row.accepted:
            assert row.reason is None or "the search took" in row.reason
        else:
            assert row.reason and "check '" in row.reason and "[" in row.reason, row.reason
    first = rem.rows[0]  # min_samples_leaf=2 on a leaking forest: a check fails or is undecided, with its interval
    assert not first.accepted and ("is fail" in first.reason or "is inconclusive" in first.reason), first.reason
    assert len([r for r in rem.rows if r.accepted and r.reason is None]) == 1  # the one taken


def test_a_search_no_candidate_can_win_at_this_audit_size_stops_before_fitting(forest, tmp_path):
    policy = tmp_path / "low.yaml"
    policy.write_text(
        CHILD.replace("extends: parent.yaml\n", "").replace(
            "- {id: auc, attack: loss, metric: auc, max: 0.7}",
            "- {id: auc, attack: loss, metric: auc, max: 0.7}\n  - {id: low, attack: loss, metric: tpr_at_fpr, "
            "fpr: 0.01, max: 0.05}",
        )
    )
    out = tmp_path / "r.json"
    r = run_cli("harden", "rf.skops", "--policy", str(policy), "--members", "m.npz", "--nonmembers", "n.npz",
                "--output-model", str(tmp_path / "o.skops"), "--json", str(out), cwd=forest)  # fmt: skip
    rep = json.loads(out.read_text())
    rem = rep["remediation"]
    assert rem["status"] == "no_setting" and rem["first_broken"] == "audit_size", rem["reason"]
    assert rem["rows"] == [] and rem["trainings"] in (0, None)  # nothing was fitted
    assert "'low'" in rem["reason"] and "400 non-members" in rem["reason"]
    need = next(c for c in rep["checks"] if c["id"] == "low")
    assert need["status"] == "inconclusive"
    # the verdict is the original's, never softer: it fails (exit 1) or is inconclusive (exit 3)
    assert r.returncode == {"fail": 1, "inconclusive": 3}[rep["verdict"]], r.stdout + r.stderr
    assert "no candidate can pass" in r.stdout and not (tmp_path / "o.skops").exists()


def test_the_stop_sizes_at_the_candidates_confidence_and_never_for_a_point_decision():
    from privgate import CheckResult, Report
    from privgate.dp.candidates import undecidable
    from privgate.policy import parse_policy

    low = CheckResult(id="low", attack="loss", metric="tpr_at_fpr", value=0.03, ci=[0.0, 0.2], threshold=0.05,
                      status="inconclusive", reason="…", confidence=0.99, fpr=0.01)  # fmt: skip
    original = Report(privgate_version="0", verdict="inconclusive", summary="", checks=[low], attacks=[],
                      data={"members": {"n": 2000}, "nonmembers": {"n": 2000}})  # fmt: skip
    text = "name: p\nsensitivity: confidential\nrelease: api\nconfidence: 0.99\nattacks: {loss: {}}\nchecks:\n" \
           "  - {id: low, attack: loss, metric: tpr_at_fpr, fpr: 0.01, max: 0.05}\n"  # fmt: skip
    policy = parse_policy(text)
    assert undecidable(original, policy, policy) is None  # 2,000 + 2,000 rows pass a model leaking nothing
    why = undecidable(original, policy, policy.split_budget(8))  # at 1 − 0.01/8 they no longer do
    assert why is not None and "'low'" in why and "2,000 non-members" in why
    assert undecidable(original, parse_policy(text + "decision: point\n"), policy.split_budget(8)) is None
