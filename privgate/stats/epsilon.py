"""Differential privacy seen as hypothesis testing: ε ↔ balanced accuracy, and empirical ε lower bounds.

An (ε, δ)-DP algorithm bounds every membership test: TPR ≤ e^ε·FPR + δ and
1 − FPR ≤ e^ε·(1 − TPR) + δ (Kairouz, Oh & Viswanath 2015, arXiv 1311.0776).
Read the other way, an attack's measured TPR and FPR prove a lower bound on the
ε of the training algorithm (Jagielski et al. 2020, arXiv 2006.07709; Nasr et
al. 2021, arXiv 2101.04535).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from privgate.stats.binomial import cp_lower, cp_upper
from privgate.stats.membership import Estimate, SplitScores, _counts, _midpoint_below


def accuracy_bound(epsilon: float, delta: float = 0.0) -> float:
    """Largest balanced MIA accuracy an (ε, δ)-DP algorithm allows: (e^ε + δ)/(1 + e^ε).

    From the hypothesis-testing characterisation of DP (Kairouz, Oh & Viswanath
    2015, arXiv 1311.0776): TPR ≤ e^ε·FPR + δ and 1−FPR ≤ e^ε·(1−TPR) + δ.
    """
    if epsilon > 700:  # e^ε overflows; the bound is 1 to machine precision
        return 1.0
    return min(1.0, (math.exp(epsilon) + delta) / (1.0 + math.exp(epsilon)))


def epsilon_from_rates(tpr: float, fpr: float, delta: float = 0.0) -> float:
    """Smallest ε consistent with an attack reaching (TPR, FPR) under (ε, δ)-DP.

    ε ≥ max(ln((TPR − δ)/FPR), ln((1 − δ − FPR)/(1 − TPR))) (Kairouz et al. 2015;
    used for auditing by Jagielski et al. 2020, arXiv 2006.07709, and Nasr et al.
    2021, arXiv 2101.04535). Returns 0 when neither ratio exceeds 1 and ``inf``
    when a ratio has a zero denominator with a positive numerator.
    """
    best = 0.0
    for num, den in ((tpr - delta, fpr), (1.0 - delta - fpr, 1.0 - tpr)):
        if num <= 0:
            continue
        if den <= 0:
            return math.inf
        best = max(best, math.log(num / den))
    return best


# --------------------------------------------------------------------------- ε lower bound


@dataclass(frozen=True)
class Split:
    """Choose the threshold on the calibration split, bound ε on the evaluation split."""


@dataclass(frozen=True)
class Bonferroni:
    """Bound ε at ``n_thresholds`` label-blind thresholds (quantiles of all scores) on the
    evaluation split, each at α/n_thresholds, and keep the largest bound."""

    n_thresholds: int = 16


def _epsilon_lb_counts(tp: int, n1: int, fp: int, n0: int, alpha: float, delta: float) -> float:
    """1−α lower bound on ε from one threshold: CP lower TPR and CP upper FPR at α/2 each."""
    tpr_lo = cp_lower(tp, n1, alpha / 2)
    fpr_hi = cp_upper(fp, n0, alpha / 2)
    return epsilon_from_rates(tpr_lo, fpr_hi, delta)


def max_provable_epsilon(n_members: int, n_nonmembers: int, delta: float, confidence: float, m: int = 1) -> float:
    """The largest ε lower bound these sample sizes could ever show (a perfect attack)."""
    return _epsilon_lb_counts(n_members, n_members, 0, n_nonmembers, (1 - confidence) / m, delta)


def _haldane_point(tp: int, n1: int, fp: int, n0: int, delta: float) -> float:
    """Point estimate of ε with a +½ correction so that zero counts stay finite."""
    return epsilon_from_rates((tp + 0.5) / (n1 + 1), (fp + 0.5) / (n0 + 1), delta)


def _bonferroni_thresholds(
    split: SplitScores, strategy: Bonferroni, alpha: float, delta: float
) -> tuple[np.ndarray, int, float]:
    """``m`` label-blind thresholds (quantiles of the pooled evaluation scores), ``m`` and the largest bound any
    labelling could show at them (all k scores above a threshold are members)."""
    n1, n0 = len(split.eval_in), len(split.eval_out)
    m = max(1, strategy.n_thresholds)
    pooled = np.r_[split.eval_in, split.eval_out]
    thresholds = np.unique(np.quantile(pooled, np.linspace(0, 1, m + 2)[1:-1]))
    above = [int(np.sum(pooled >= t)) for t in thresholds]
    ceiling = max(_epsilon_lb_counts(min(k, n1), n1, max(0, k - n1), n0, alpha / m, delta) for k in above)
    return thresholds, m, ceiling


def _calibrated_threshold(split: SplitScores, alpha: float, delta: float) -> np.ndarray:
    """The one threshold with the best bound on the calibration split (just below that score)."""
    cal = np.r_[split.cal_in, split.cal_out]
    thresholds = np.unique(cal)
    cal_bounds = [_epsilon_lb_counts(*_counts_full(split.cal_in, split.cal_out, t), alpha, delta) for t in thresholds]
    return np.array([_midpoint_below(cal, float(thresholds[int(np.argmax(cal_bounds))]))])


def epsilon_lower_bound(
    split: SplitScores,
    delta: float = 1e-5,
    confidence: float = 0.95,
    strategy: Split | Bonferroni = Split(),
    check_max: float | None = None,
) -> Estimate:
    """Empirical lower bound on the ε of the training algorithm, valid at ``confidence``.

    For a threshold with counts (TP of n₁ members, FP of n₀ non-members), (ε, δ)-DP
    implies TPR ≤ e^ε FPR + δ and 1 − FPR ≤ e^ε (1 − TPR) + δ, so
    ε ≥ ln((TPR_lo − δ)/FPR_hi) and ε ≥ ln((1 − δ − FPR_hi)/(1 − TPR_lo)) with
    Clopper-Pearson bounds at α/2 each (Jagielski et al. 2020, arXiv 2006.07709;
    Nasr et al. 2021, arXiv 2101.04535). Choosing the threshold is accounted for:

    * :class:`Split` (default) picks the threshold with the best bound on the
      calibration split and bounds ε once on the evaluation split;
    * :class:`Bonferroni` tries label-blind thresholds on the evaluation split at
      α/m each.

    ``value`` and ``lo`` are the lower bound; ``hi`` is a Haldane-corrected point
    estimate at the same threshold (not a confidence bound). If ``check_max`` is
    given and no attack on these counts could prove ε above it, the estimate is
    unresolvable: a pass would say nothing.
    """
    name = "epsilon_lb"
    reason = split.too_small()
    if reason:
        return Estimate.unresolved(name, reason, confidence, len(split.eval_in), len(split.eval_out))
    alpha = 1 - confidence
    e_in, e_out = split.eval_in, split.eval_out
    n1, n0 = len(e_in), len(e_out)
    if isinstance(strategy, Bonferroni):
        thresholds, m_eff, ceiling = _bonferroni_thresholds(split, strategy, alpha, delta)
    else:
        thresholds, m_eff = _calibrated_threshold(split, alpha, delta), 1
        ceiling = max_provable_epsilon(n1, n0, delta, confidence)
    best_lb, best_t, best_counts = -1.0, float(thresholds[0]), (0, 0)
    for t in thresholds:
        tp, fp = _counts(e_in, e_out, float(t))
        lb = _epsilon_lb_counts(tp, n1, fp, n0, alpha / m_eff, delta)
        if lb > best_lb:
            best_lb, best_t, best_counts = lb, float(t), (tp, fp)
    tp, fp = best_counts
    details = {
        "delta": delta,
        "strategy": type(strategy).__name__.lower(),
        "tp": tp,
        "fp": fp,
        "tpr": tp / n1,
        "fpr": fp / n0,
        "max_provable": ceiling,
        **split.sizes(),
    }
    if check_max is not None and ceiling <= check_max:
        reason = (
            f"with {n1} members and {n0} non-members in the evaluation split no attack could prove "
            f"ε above {ceiling:.2f} (δ={delta:g}), so a bound of {check_max:g} cannot be tested; add audit data"
        )
        args = (best_lb, best_lb, best_lb, confidence, n1, n0, best_t)
        return Estimate(name, *args, resolvable=False, reason=reason, details=details)
    point = max(best_lb, _haldane_point(tp, n1, fp, n0, delta))
    return Estimate(name, best_lb, best_lb, point, confidence, n1, n0, best_t, details=details)


def _counts_full(in_s: np.ndarray, out_s: np.ndarray, t: float) -> tuple[int, int, int, int]:
    tp, fp = _counts(in_s, out_s, t)
    return tp, len(in_s), fp, len(out_s)
