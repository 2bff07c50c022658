"""Duplicated rows (issue 42 item 3): refused naming ``--drop-duplicates``, or dropped from both sides and counted.

Before: 1,278 member rows among the non-members were refused ("remove the duplicates") without saying how;
removing them from the non-members only shifted the non-members (accuracy 0.785 → 0.609) and inflated the attack
AUC to 0.81, and nothing warned: the blind baseline was skipped for want of a population. Now the refusal names the
option, ``--drop-duplicates`` (config ``drop_duplicates``, ``drop_duplicates=True`` in the API and the assertions)
drops a row on both sides from both and keeps repeats once, the report counts what went from each side, and the
blind baseline runs without a population (calibrated on half the non-members, measured on the other half): a
shifted split is flagged, a fair one is not.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from cases import run_cli

from privgate import CheckSettings, api
from privgate.errors import DataError
from privgate.policy import parse_policy

LOSS = """
name: loss
sensitivity: internal
release: api
confidence: 0.95
attacks: {loss: {}}
checks: [{id: auc, attack: loss, metric: auc, max: 0.99}]
"""
COUNTS = {
    "members": {"shared": 5, "repeated": 1, "removed": 6},
    "nonmembers": {"shared": 5, "repeated": 1, "removed": 6},
}


@pytest.fixture
def overlapping(case, tmp_path):
    """The case's members with member row 0 twice, and its non-members with member rows 10-14 and a repeat."""
    m, n = np.load(case.members), np.load(case.nonmembers)
    xm, ym = np.r_[m["x"], m["x"][:1]], np.r_[m["y"], m["y"][:1]]
    xn, yn = np.r_[n["x"], m["x"][10:15], n["x"][3:4]], np.r_[n["y"], m["y"][10:15], n["y"][3:4]]
    np.savez(tmp_path / "m.npz", x=xm, y=ym)
    np.savez(tmp_path / "n.npz", x=xn, y=yn)
    (tmp_path / "loss.yaml").write_text(LOSS)
    return tmp_path


def test_the_cli_drops_duplicates_from_both_sides_counts_them_and_runs_the_blind_baseline(case, overlapping):
    out = overlapping / "r.json"
    d = overlapping
    given = ["--members", str(d / "m.npz"), "--nonmembers", str(d / "n.npz"), "--policy", str(d / "loss.yaml")]
    r = run_cli("check", str(case.safe_ts), *given, "--drop-duplicates", "--json", str(out), "--no-step-summary", cwd=d)
    assert r.returncode in (0, 1, 3), (r.returncode, r.stderr[-2000:])
    report = json.loads(out.read_text())
    assert report["data"]["duplicates"] == COUNTS
    assert report["data"]["members"]["n"] == 295 and report["data"]["nonmembers"]["n"] == 300
    said = (
        "--drop-duplicates removed 6 member row(s) (5 also among the non-members, 1 repeats) and 6 non-member "
        "row(s) (5 also among the members, 1 repeats)"
    )
    assert said in " ".join(r.stdout.split()) and any(w.startswith(said) for w in report["warnings"])
    blind = next(a for a in report["attacks"] if a["name"] == "blind")  # the policy names no blind: dropping adds it
    assert blind["status"] == "ran" and "no population" in blind["notes"][0]


def test_the_refusal_names_the_option_through_the_api_and_the_assertions_alike(case, overlapping):
    from privgate import assert_mia_below

    needles = ("n.npz: 5 member row(s) also appear among the non-members (same features and label; first: members "
               "row 11 is non-members row 301)", "or pass --drop-duplicates (config drop_duplicates = true; "
               "drop_duplicates=True in the API and the assertions) to drop them from both sides.")  # fmt: skip
    members, nonmembers, policy = overlapping / "m.npz", overlapping / "n.npz", str(overlapping / "loss.yaml")
    for run in (lambda: api.check(case.safe_ts, policy, members, nonmembers),
                lambda: assert_mia_below(case.safe_ts, members, nonmembers, auc=0.9, attack="loss")):  # fmt: skip
        with pytest.raises(DataError) as refused:
            run()
        assert refused.value.exit_code == 2 and all(n in str(refused.value) for n in needles), str(refused.value)
    settings = CheckSettings(case.safe_ts, policy, members, nonmembers, drop_duplicates=True)
    assert api.check(settings).data["duplicates"] == COUNTS
    report = assert_mia_below(case.safe_ts, members, nonmembers, auc=0.9, attack="loss", drop_duplicates=True)
    assert report.data["duplicates"] == COUNTS and report.data["members"]["n"] == 295


# --------------------------------------------------------------------------- the blind baseline without a population

BLIND = parse_policy(
    """
name: blind
sensitivity: internal
release: api
confidence: 0.95
attacks: {loss: {}, blind: {}}
checks: [{id: auc, attack: loss, metric: auc, max: 0.99}]
"""
)


def _breast_cancer_audit(members: np.ndarray, nonmembers: np.ndarray, seed: int):
    from sklearn.datasets import load_breast_cancer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    x, y = load_breast_cancer(return_X_y=True)
    model = make_pipeline(StandardScaler(), LogisticRegression(max_iter=500)).fit(x[members], y[members])
    report = api.check(model, BLIND, (x[members], y[members]), (x[nonmembers], y[nonmembers]), seed=seed)
    blind = next(a for a in report.attacks if a.name == "blind")
    return blind, [w for w in report.warnings if "blind baseline 'blind'" in w]


def test_a_shifted_split_is_flagged_without_a_population():
    """Non-members from another part of the data set (the larger tumours, by mean radius): the blind baseline,
    calibrated on half the non-members and measured on the other half, separates them and the report says so."""
    from sklearn.datasets import load_breast_cancer

    radius = load_breast_cancer().data[:, 0]
    order = np.argsort(radius)
    rng = np.random.default_rng(0)
    members = rng.choice(order[:350], 200, replace=False)
    blind, warned = _breast_cancer_audit(members, order[-200:], seed=0)
    assert blind.status == "ran" and blind.auc_ci[0] > 0.6, (blind.auc, blind.auc_ci)
    assert warned and "separates members from non-members" in warned[0]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_fair_split_is_not_flagged(seed):
    """A random split of the same data: the interval holds 0.5 (no false alarm on these seeds)."""
    rng = np.random.default_rng(seed)
    members, nonmembers = np.split(rng.permutation(569)[:500], 2)
    blind, warned = _breast_cancer_audit(members, nonmembers, seed)
    assert blind.status == "ran" and blind.auc_ci[0] <= 0.5 <= blind.auc_ci[1] and not warned, blind.auc_ci
