"""The audit size that decides a check (privgate.stats.power), against known truths and simulated audits.

Simulated audits draw binormal scores with a known AUC / accuracy / TPR, decide them with privgate's own
interval functions, and count how often the interval clears the threshold: at the size ``needed`` returns it
should be about its promised 80 %, at half that size clearly less.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import binom, norm

from privgate import stats
from privgate.stats.membership import _order_stat_thresholds
from privgate.stats.power import POWER, Rates, needed, order_stat_ranks


def _decided_share(metric: str, mu: float, mx: float, conf: float, m: int, n: int, reps: int, fpr: float = 0.1):
    rng = np.random.default_rng(7)
    hits = 0
    for r in range(reps):
        s = np.r_[rng.normal(mu, 1, m), rng.normal(0, 1, n)]
        member = np.r_[np.ones(m, bool), np.zeros(n, bool)]
        sp = stats.SplitScores.from_mask(s, member, stats.calibration_mask(member, r))
        if metric == "auc":
            e = stats.auc(sp.eval_in, sp.eval_out, conf)
        elif metric == "accuracy":
            e = stats.balanced_accuracy(sp, conf)
        else:
            e = stats.tpr_at_fpr(sp, fpr, conf)
        hits += e.hi <= mx or e.lo > mx
    return hits / reps


@pytest.mark.parametrize(
    ("metric", "mu", "mx", "conf"),
    [
        ("auc", 0.0, 0.7, 0.99),  # a model that leaks nothing, shown within 0.7
        ("auc", 1.2, 0.7, 0.99),  # AUC 0.80, proven above 0.7
        ("accuracy", 0.0, 0.65, 0.99),
        ("tpr_at_fpr", 0.0, 0.3, 0.95),  # TPR = FPR = 0.1, shown within 0.3
    ],
)
def test_at_the_needed_size_the_check_is_decided_about_as_often_as_promised(metric, mu, mx, conf):
    value = {"auc": norm.cdf(mu / math.sqrt(2)), "accuracy": norm.cdf(mu / 2), "tpr_at_fpr": 0.1}[metric]
    found = needed(metric, value, mx, conf, fpr=0.1 if metric == "tpr_at_fpr" else None)
    assert found.decidable and found.members == found.nonmembers  # the ratio kept: 1
    at = _decided_share(metric, mu, mx, conf, found.members, found.nonmembers, 80)
    half = _decided_share(metric, mu, mx, conf, found.members // 2, found.nonmembers // 2, 80)
    assert 0.65 <= at <= 0.99, (found, at)  # the promise is 80 %; the approximations err on the safe side
    assert half < at - 0.2 and half < POWER, (found, half)


def test_tpr_at_fpr_needs_a_threshold_below_the_fpr_before_it_can_fail():
    # The lower bound needs a calibration threshold whose FPR is ≤ f with probability 1 − a: the highest
    # non-member score qualifies only when (1 − f)^n ≤ a, i.e. n ≥ ln(a) / ln(1 − f).
    f, a = 0.01, 0.05 / 4
    n_min = math.ceil(math.log(a) / math.log(1 - f))
    assert order_stat_ranks(n_min - 1, f, a)[1] is None
    assert order_stat_ranks(n_min, f, a)[1] == 1
    # and the ranks are those of the gate's own order-statistic thresholds
    scores = np.arange(500, dtype=float)  # distinct: rank k is the k-th highest
    for n, ff, aa in ((500, 0.01, 0.0125), (500, 0.05, 0.001), (300, 0.1, 0.02)):
        high, low = order_stat_ranks(n, ff, aa)
        t_high, t_low = _order_stat_thresholds(scores[:n], ff, aa)
        s = np.sort(scores[:n])[::-1]
        assert t_high == s[high - 1]
        assert t_low == np.nextafter(s[low - 1], np.inf)
        assert binom.sf(high - 1, n, ff) <= aa < binom.sf(high - 2, n, ff)


def test_a_value_on_the_threshold_is_decided_by_no_size_and_says_so():
    found = needed("accuracy", 0.65, 0.65, 0.99)
    assert found.members is None and found.as_dict() is None
    assert "sits on the threshold" in found.sentence
    assert needed("similarity", 0.01, 0.05, 0.99).members is None  # a metric whose rows do not set its interval


def test_epsilon_lb_needs_the_counts_that_could_prove_more_than_max():
    conf, mx, delta = 0.99, 2.0, 1e-5
    found = needed("epsilon_lb", 0.0, mx, conf, delta=delta)
    (m, n) = found.members, found.nonmembers
    half = lambda k: k - int(round(k / 2))  # noqa: E731 - the evaluation half
    assert stats.max_provable_epsilon(half(m), half(n), delta, conf) > mx
    assert stats.max_provable_epsilon(half(m) - 1, half(n) - 1, delta, conf) <= mx


def test_more_members_per_non_member_keeps_the_ratio_and_observed_rates_are_used():
    base = needed("accuracy", 0.55, 0.65, 0.99)
    skewed = needed("accuracy", 0.55, 0.65, 0.99, ratio=3.0)
    assert skewed.members == math.ceil(3 * skewed.nonmembers) and skewed.nonmembers < base.nonmembers
    # a threshold with few false positives measures the FPR more precisely: fewer rows
    lopsided = needed("accuracy", 0.55, 0.65, 0.99, rates=Rates(0.15, 0.05))
    assert lopsided.members < base.members
