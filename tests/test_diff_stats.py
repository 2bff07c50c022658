"""The statistics of ``privgate diff``: tests of a difference against known truths.

Newcombe's published intervals, the closed-form z-test of two independent
normal estimates, the false-alarm rate on pairs of runs that leak equally
(at most the level asked for), and the power to see a real regression.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as st

from privgate import CheckResult, stats
from privgate.report.evidence import check_estimate
from privgate.stats import difference as D


class _Wilson:
    """A proportion k/n with Wilson bounds (the building block of :class:`D.Epsilon`)."""

    def __init__(self, k: int, n: int) -> None:
        self.k, self.n, self.value = k, n, k / n

    def lower(self, a: float) -> float:
        return D.wilson(self.k, self.n, a)[0]

    def upper(self, a: float) -> float:
        return D.wilson(self.k, self.n, a)[1]


@pytest.mark.parametrize(
    "k2, n2, k1, n1, lo, hi",
    [  # Newcombe (1998), Stat. Med. 17:873, Table II, method 10 (hybrid score), 95% two-sided
        (56, 70, 48, 80, 0.0524, 0.3339),
        (9, 10, 3, 10, 0.1705, 0.8090),
        (5, 56, 0, 29, -0.0381, 0.1926),
        (0, 10, 0, 20, -0.1611, 0.2775),
    ],
)
def test_difference_of_proportions_is_newcombes_interval(k2, n2, k1, n1, lo, hi):
    """MOVER over two Wilson bounds is Newcombe's method 10: checks :func:`D.bounds` and :func:`D.wilson` together."""
    base, new = _Wilson(k1, n1), _Wilson(k2, n2)
    got = D.bounds(base, new, 0.025)  # each end one-sided 97.5 %: the 95 % two-sided interval
    assert got == pytest.approx((lo, hi), abs=6e-5)


def test_two_normal_estimates_give_the_z_test():
    base, new = D.Normal(0.60, 0.02), D.Normal(0.70, 0.03)
    se = math.hypot(0.02, 0.03)
    for tol in (0.0, 0.02, 0.1, 0.15, 0.3):
        assert D.p_value(base, new, tol) == pytest.approx(st.norm.sf((0.1 - tol) / se), rel=1e-6, abs=1e-12)
    ch = D.compare(base, new, 0.02, 0.005)
    z = st.norm.isf(0.005)
    assert (ch.lo, ch.hi) == pytest.approx((0.1 - z * se, 0.1 + z * se))
    assert not ch.regressed and ch.p_value == pytest.approx(0.01325, abs=1e-5)  # p > 0.005: not proven
    assert D.compare(base, new, 0.0, 0.005).regressed  # p = 0.0028 < 0.005


def test_identical_estimates_change_nothing_and_p_is_a_half():
    acc = D.Rates(80, 150, 70, 150)
    ch = D.compare(acc, acc, 0.0, 0.01)
    assert ch.change == 0 and ch.p_value == 0.5 and not ch.regressed and not ch.improved
    assert ch.lo == pytest.approx(-ch.hi) and ch.lo < 0


def test_p_value_agrees_with_the_bound_at_every_level():
    base, new = D.Rates(75, 150, 70, 150), D.Rates(110, 150, 60, 150)
    p = D.p_value(base, new, 0.02)
    assert 0 < p < 0.5
    for level in (p / 2, p * 2):
        assert D.compare(base, new, 0.02, level).regressed == (p < level)


def test_epsilon_without_false_positives_cannot_regress():
    """A run with no false positive at its threshold cannot bound ε above, so nothing is proven against it."""
    base, new = D.Epsilon(5, 150, 0, 150, 1e-5), D.Epsilon(149, 150, 1, 150, 1e-5)
    assert math.isinf(base.upper(0.05)) and base.lower(0.05) <= base.value == pytest.approx(math.log(11), abs=1e-3)
    ch = D.compare(base, new, 0.5, 0.05)
    assert ch.lo == -math.inf and not ch.regressed and ch.change > 2 and ch.p_value == 1.0


def test_degenerate_interval_is_not_evidence():
    assert D.Interval(0.3, 0.3, 0.3, 0.95).degenerate
    c = CheckResult(
        id="c",
        attack="a",
        metric="similarity",
        value=0.3,
        ci=[0.3, 0.3],
        threshold=1,
        status="pass",
        reason="",
        confidence=0.95,
    )
    est, _, why = check_estimate(c)
    assert est is None and "no width" in why


def test_a_boolean_standard_error_in_a_report_is_not_a_number():
    """A report read back may hold anything in ``details``: ``"se": true`` is no DeLong standard error (it was read
    as 1.0, one rule of report/numbers.py for every reader now), so the AUC falls back to its interval."""
    c = CheckResult(
        id="c",
        attack="a",
        metric="auc",
        value=0.7,
        ci=[0.6, 0.8],
        threshold=1,
        status="pass",
        reason="",
        confidence=0.95,
        details={"se": True},
    )
    est, method, _ = check_estimate(c)
    assert method == "MOVER from the reported intervals"
    assert (est.value, est.lower(0.025), est.upper(0.025)) == pytest.approx((0.7, 0.6, 0.8))
    c.details["se"] = 0.05
    est, method, _ = check_estimate(c)
    assert method == "z-test of two DeLong AUCs" and est.lower(0.025) == pytest.approx(0.7 - 1.959964 * 0.05)


def _split(rng: np.random.Generator, n: int, shift: float) -> stats.SplitScores:
    """Scores of an attack: members N(shift, 1), non-members N(0, 1), n of each in each split."""
    return stats.SplitScores(rng.normal(shift, 1, n), rng.normal(0, 1, n), rng.normal(shift, 1, n), rng.normal(0, 1, n))


def _as_check(e: stats.Estimate, metric: str, fpr: float | None = None) -> CheckResult:
    return CheckResult(
        id="c",
        attack="a",
        metric=metric,
        value=e.value,
        ci=[e.lo, e.hi],
        threshold=1.0,
        status="pass",
        reason="",
        confidence=e.confidence,
        fpr=fpr,
        details=dict(e.details),
    )


def _measured(sp: stats.SplitScores) -> dict[str, D.Bounded]:
    """What the diff reads from a report's checks, made by the gate's own statistics."""
    out = {
        "auc": check_estimate(_as_check(stats.auc(sp.eval_in, sp.eval_out, 0.95), "auc")),
        "accuracy": check_estimate(_as_check(stats.balanced_accuracy(sp, 0.95), "accuracy")),
        "tpr_at_fpr": check_estimate(_as_check(stats.tpr_at_fpr(sp, 0.05, 0.95), "tpr_at_fpr", 0.05)),
    }
    assert [m for _, m, _ in out.values()] == [
        "z-test of two DeLong AUCs",
        "MOVER with Clopper-Pearson TPR/FPR bounds",
        "MOVER from the reported intervals",
    ]
    return {k: est for k, (est, _, _) in out.items()}


def test_false_alarm_rate_on_equally_leaky_runs_is_at_most_the_level():
    """Two independent audits of attacks that leak equally (AUC 0.64): 'regressed' at level 0.05 in ≤ 5 % of pairs."""
    rng = np.random.default_rng(7)
    sims, level = 300, 0.05
    alarms = {"auc": 0, "accuracy": 0, "tpr_at_fpr": 0, "epsilon": 0}
    for _ in range(sims):
        base, new = _measured(_split(rng, 150, 0.5)), _measured(_split(rng, 150, 0.5))
        for k in ("auc", "accuracy", "tpr_at_fpr"):
            alarms[k] += D.bounds(base[k], new[k], level)[0] > 0.0
        # ε at one threshold with TPR 0.3, FPR 0.1 in both runs
        eb = D.Epsilon(int(rng.binomial(150, 0.3)), 150, int(rng.binomial(150, 0.1)), 150, 1e-5)
        en = D.Epsilon(int(rng.binomial(150, 0.3)), 150, int(rng.binomial(150, 0.1)), 150, 1e-5)
        alarms["epsilon"] += D.bounds(eb, en, level)[0] > 0.0
    slack = 3 * math.sqrt(level * (1 - level) / sims)  # 3 binomial standard deviations
    rates = {k: v / sims for k, v in alarms.items()}
    print("false-alarm rates at level 0.05:", rates)
    assert all(r <= level + slack for r in rates.values()), rates


def test_a_real_regression_is_found():
    """AUC 0.60 → 0.86 (members shifted 0.35 → 1.5), 150 + 150 evaluation rows, level 0.05/4: the AUC test finds it
    in every pair, the conservative accuracy test in at least 90 % (37 of 40 with this seed)."""
    rng = np.random.default_rng(8)
    found = {"auc": 0, "accuracy": 0}
    for _ in range(40):
        base, new = _measured(_split(rng, 150, 0.35)), _measured(_split(rng, 150, 1.5))
        for k in found:
            found[k] += D.bounds(base[k], new[k], 0.05 / 4)[0] > 0.02
    assert found["auc"] == 40 and found["accuracy"] >= 36, found
