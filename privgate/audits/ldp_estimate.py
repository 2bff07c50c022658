"""ε of an LDP mechanism from a distinguisher's error counts: the point value of
Matsumoto et al. 2022 (arXiv 2206.09122) and a sound lower bound.

A mechanism M is ε-LDP iff for every pair of inputs and every rejection region
S, with FP = P[M(x) ∈ S] and FN = P[M(x') ∉ S] (Kairouz, Oh & Viswanath 2015,
arXiv 1311.0776; Matsumoto et al. 2022 (arXiv 2206.09122), Theorem 1):

    FP + e^ε·FN ≥ 1   and   e^ε·FP + FN ≥ 1.

Both are linear in (FP, FN), so they also hold for the average over pairs
drawn at random (the game draws a pair per trial). Hence

* the point value (Matsumoto et al. 2022, Eq. 3): ε_emp = max(ln((1−FP)/FN), ln((1−FN)/FP))
  from the observed rates — it can exceed the true ε by chance (Matsumoto et al. 2022 (arXiv 2206.09122)
  reports 4.07 at ε = 4) and never decides anything here;
* the lower bound: with Clopper-Pearson upper bounds FP⁺ and FN⁺ (Clopper &
  Pearson 1934), each at level α/2, both rates lie below their bounds with
  probability ≥ 1 − α, and then ε ≥ max(0, ln((1−FP⁺)/FN⁺), ln((1−FN⁺)/FP⁺)).
  So P[lower bound > true ε] ≤ α (the auditing bound of Jagielski et al. 2020,
  arXiv 2006.07709, and Nasr et al. 2021, arXiv 2101.04535, for LDP).

When one verdict reports m cells (adversary × distinguisher × claimed ε), each
cell's bound is taken at α/m (Bonferroni), so every bound in the report holds
at once with probability ≥ 1 − α. The largest bound K trials can ever show
(no error at all) is :func:`max_provable_from_trials`: a claim at or above it can
never be refuted by this audit.
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
