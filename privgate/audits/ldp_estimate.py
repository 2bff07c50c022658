"""ε of an LDP mechanism from a distinguisher's error counts: the point value and a sound lower bound.

ε-LDP implies FP + e^ε·FN ≥ 1 and e^ε·FP + FN ≥ 1 (Kairouz, Oh & Viswanath 2015, arXiv 1311.0776; Matsumoto
et al. 2022, arXiv 2206.09122, Theorem 1). The point value ε_emp (Eq. 3) is reported and never decides; the
lower bound puts Clopper-Pearson upper bounds of FP and FN (each at α/2) into the same expression, so
P[bound > true ε] ≤ α (as in Jagielski et al. 2020, arXiv 2006.07709; Nasr et al. 2021, arXiv 2101.04535). A
report of m cells takes each at α/m (Bonferroni). :func:`max_provable_from_trials` is the most K trials can
ever show. See ``docs/audits.md`` ("The estimate").
"""

from __future__ import annotations

import math

from privgate.stats import cp_upper


def _log_ratio(num: float, den: float) -> float:
    if num <= 0:
        return -math.inf
    if den <= 0:
        return math.inf
    return math.log(num / den)


def epsilon_empirical(fp: float, fn: float) -> float:
    """Matsumoto et al. 2022, Eq. 3: max(ln((1−FP)/FN), ln((1−FN)/FP)); ``inf`` when a rate is 0, negative below
    guessing."""
    return max(_log_ratio(1.0 - fp, fn), _log_ratio(1.0 - fn, fp))


def upper_rates(fp: int, n_g1: int, fn: int, n_g2: int, alpha: float) -> tuple[float, float]:
    """(FP⁺, FN⁺): one-sided Clopper-Pearson upper bounds, each at level α/2."""
    return cp_upper(fp, n_g1, alpha / 2), cp_upper(fn, n_g2, alpha / 2)


def epsilon_lb_from_errors(fp: int, n_g1: int, fn: int, n_g2: int, alpha: float) -> float:
    """A 1 − α lower bound on ε from FP errors in ``n_g1`` trials and FN errors in ``n_g2`` trials (≥ 0)."""
    fp_hi, fn_hi = upper_rates(fp, n_g1, fn, n_g2, alpha)
    return max(0.0, _log_ratio(1.0 - fp_hi, fn_hi), _log_ratio(1.0 - fn_hi, fp_hi))


def max_provable_from_trials(n_g1: int, n_g2: int, alpha: float) -> float:
    """The largest lower bound these trial counts can show: a distinguisher that never errs."""
    return epsilon_lb_from_errors(0, n_g1, 0, n_g2, alpha)


__all__ = ["epsilon_empirical", "epsilon_lb_from_errors", "max_provable_from_trials", "upper_rates"]
