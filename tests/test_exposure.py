"""Which records leak: the exposed-members ranking as a pure function (reports are tested in test_reports_exposed)."""

from __future__ import annotations

import numpy as np

from privgate.stats.exposed_members import ScoredAttack, exposed_members, leading_attack


def _world(seed: int = 0):
    rng = np.random.default_rng(seed)
    n = 400
    membership = np.r_[np.ones(n, bool), np.zeros(n, bool)]
    perm = rng.permutation(2 * n)
    membership = membership[perm]
    member_index = np.where(membership, perm, -1)  # pooled order: members first, so a member's pooled index is its row
    calibration = rng.random(2 * n) < 0.5
    strong = rng.normal(0, 1, 2 * n) + 3.0 * membership
    weak = rng.normal(0, 1, 2 * n)
    return membership, member_index, calibration, strong, weak


def test_the_strongest_attack_leads_and_its_top_members_are_listed_with_every_attacks_view():
    membership, member_index, calibration, strong, weak = _world()
    attacks = {"strong": ScoredAttack(strong, 0.98, {0.01: 0.6}), "weak": ScoredAttack(weak, 0.5, {0.01: 0.01})}
    ex = exposed_members(attacks, membership, calibration, member_index, labels=np.zeros(len(strong), int), n=5)
    assert ex["attack"] == "strong" and ex["n"] == 5 and ex["n_members"] == 400
    rows = np.flatnonzero(membership)
    top = rows[np.argsort(-strong[rows])[:5]]
    assert [r["member_index"] for r in ex["records"]] == [int(member_index[t]) for t in top]
    first = ex["records"][0]
    assert first["attacks"]["strong"]["rank"] == 1
    # FPR/TPR: the evaluation split's ROC point at the record's score
    s = first["attacks"]["strong"]["score"]
    ev_out = strong[~calibration & ~membership]
    ev_in = strong[~calibration & membership]
    assert first["attacks"]["strong"]["fpr"] == np.mean(ev_out >= s)
    assert first["attacks"]["strong"]["tpr"] == np.mean(ev_in >= s)
    assert first["split"] == ("calibration" if calibration[top[0]] else "evaluation")
    # the weak attack's rank of the same member is reported too, and is what its score says
    w = first["attacks"]["weak"]
    assert w["rank"] == 1 + int(np.sum(weak[rows] > w["score"]))


def test_no_record_list_without_attacks_or_when_zero_is_asked():
    membership, member_index, calibration, strong, _ = _world()
    assert exposed_members({}, membership, calibration, member_index, np.zeros(len(strong), int)) is None
    attacks = {"a": ScoredAttack(strong, 0.9, {0.01: 0.3})}
    assert exposed_members(attacks, membership, calibration, member_index, np.zeros(len(strong), int), n=0) is None


def test_leading_attack_uses_the_lowest_measured_fpr_then_auc():
    s = np.zeros(3)
    attacks = {
        "auc-strong": ScoredAttack(s, 0.95, {0.001: None, 0.01: 0.10}),
        "tail-strong": ScoredAttack(s, 0.80, {0.001: None, 0.01: 0.30}),
        "unmeasured": ScoredAttack(s, 0.99, {0.001: None, 0.01: None}),
    }
    assert leading_attack(attacks) == "tail-strong"
    attacks["deep"] = ScoredAttack(s, 0.7, {0.001: 0.05, 0.01: 0.2})
    assert leading_attack(attacks) == "deep"  # 0.1 % FPR measured: it decides
    assert leading_attack({"x": ScoredAttack(s, 0.6, {}), "y": ScoredAttack(s, 0.7, {})}) == "y"
