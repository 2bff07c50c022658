"""Exact binomial confidence bounds and the Bonferroni adjustment: the counting behind every rate privgate reports."""

from __future__ import annotations

from scipy.special import betaincinv

# Beta(a, b)'s q-quantile is betaincinv(a, b, q): the function scipy.stats.beta.ppf evaluates (the same
# values, bit for bit), without loading scipy.stats, which a refused run or `privgate diff` never needs.


def clopper_pearson(k: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Two-sided exact binomial interval for a proportion k/n (Clopper & Pearson 1934).

    lo = Beta(α/2; k, n−k+1) quantile, hi = Beta(1−α/2; k+1, n−k) quantile, with
    lo = 0 when k = 0 and hi = 1 when k = n. Coverage is at least ``confidence``.
    """
    if n <= 0:
        return 0.0, 1.0
    alpha = 1.0 - confidence
    lo = 0.0 if k <= 0 else float(betaincinv(k, n - k + 1, alpha / 2))
    hi = 1.0 if k >= n else float(betaincinv(k + 1, n - k, 1 - alpha / 2))
    return lo, hi


def cp_lower(k: int, n: int, alpha: float) -> float:
    """One-sided exact lower 1−α confidence bound for a proportion k/n."""
    if n <= 0 or k <= 0:
        return 0.0
    return float(betaincinv(k, n - k + 1, alpha))


def cp_upper(k: int, n: int, alpha: float) -> float:
    """One-sided exact upper 1−α confidence bound for a proportion k/n."""
    if n <= 0 or k >= n:
        return 1.0
    return float(betaincinv(k + 1, n - k, 1 - alpha))


def bonferroni(confidence: float, m: int) -> float:
    """Per-comparison confidence so that ``m`` statements hold jointly at ``confidence``."""
    return 1.0 - (1.0 - confidence) / max(1, m)
