"""How many members and non-members decide a check: the audit size at which its interval clears the threshold.

Pure arithmetic over the intervals of :mod:`privgate.stats.membership` and
:mod:`privgate.stats.epsilon`, at the interval's own confidence (the policy's,
Bonferroni-split as the gate splits it) and the gate's calibration/evaluation
split. A size *decides* a check when, with probability ``power`` (80 % by
default), the interval lies wholly on one side of ``max`` for a model whose
true value is ``value``. Derivations, assumptions and the simulations that
check them: ``docs/statistics.md`` ("How much audit data decides a check").
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from scipy.special import ndtri

from privgate.stats.binomial import cp_lower, cp_upper
from privgate.stats.epsilon import _epsilon_lb_counts, max_provable_epsilon
from privgate.stats.membership import MIN_GROUP

#: The probability that the audit decides the check, at the sizes returned.
POWER = 0.8
#: Largest audit (members + non-members) the search considers; beyond it "no size decides".
LIMIT = 100_000_000
#: Metrics whose interval the audit size sets (others: :func:`needed` says why not).
SIZED = ("accuracy", "advantage", "auc", "tpr_at_fpr", "epsilon_lb")
#: What each sized metric is for a model that leaks nothing (a random guesser); ``tpr_at_fpr``'s is its FPR.
NULL = {"accuracy": 0.5, "advantage": 0.0, "auc": 0.5, "epsilon_lb": 0.0}


@dataclass(frozen=True)
class Needed:
    """The members and non-members (in all: calibration + evaluation) that decide a check, or why none do."""

    members: int | None
    nonmembers: int | None
    sentence: str

    @property
    def decidable(self) -> bool:
        return self.members is not None

    def covers(self, members: int, nonmembers: int) -> bool:
        """Whether an audit of this many members and non-members is large enough."""
        return self.members is not None and members >= self.members and nonmembers >= int(self.nonmembers or 0)

    def as_dict(self) -> dict[str, int] | None:
        return None if self.members is None else {"members": self.members, "nonmembers": int(self.nonmembers or 0)}


@dataclass(frozen=True)
class Rates:
    """An operating point's TPR and FPR (threshold metrics), for the variance of accuracy, advantage and ε."""

    tpr: float
    fpr: float


def null_value(metric: str, fpr: float | None = None) -> float | None:
    """The metric of a model that leaks nothing (TPR = FPR everywhere), or None for an unsized metric."""
    if metric == "tpr_at_fpr":
        return None if fpr is None else float(fpr)
    return NULL.get(metric)


def assumed_value(metric: str, threshold: float, share: float, fpr: float | None = None) -> float | None:
    """A value ``share`` of the way from leaking nothing (0) to the threshold (1); None for an unsized metric."""
    null = null_value(metric, fpr)
    return None if null is None else null + share * (threshold - null)


def resolvable(metric: str, members: int, nonmembers: int, fpr: float | None = None) -> bool:
    """Whether an audit of this size measures ``metric`` at all (a value, however wide its interval): every
    calibration/evaluation group holds :data:`MIN_GROUP` rows and, for TPR at FPR f, each split ⌈1/f⌉ non-members."""
    (c1, e1), (c0, e0) = _halves(members), _halves(nonmembers)
    if min(c1, e1, c0, e0) < MIN_GROUP:
        return False
    need = math.ceil(1.0 / fpr - 1e-9) if metric == "tpr_at_fpr" and fpr else 0
    return min(c0, e0) >= need


def measurable_sizes(metric: str, fpr: float | None = None) -> Needed:
    """The fewest members and non-members that measure ``metric`` at all: what a point decision needs."""
    need = math.ceil(1.0 / fpr - 1e-9) if metric == "tpr_at_fpr" and fpr else 0
    m, n = 2 * MIN_GROUP, max(2 * MIN_GROUP, 2 * need)
    return Needed(m, n, f"decided on the point estimate: {m:,} members and {n:,} non-members measure {metric} at all")


# --------------------------------------------------------------------------- one size, decided or not


def _halves(n: int) -> tuple[int, int]:
    """(calibration, evaluation) sizes of a group of n, as :func:`privgate.stats.calibration_mask` cuts it."""
    cal = int(round(0.5 * n))
    return cal, n - cal


def _z(p: float) -> float:
    return float(ndtri(p))


def _shifted_rates(r: Rates, n1: int, n0: int, shift: float) -> tuple[float, float]:
    """TPR and FPR moved so that TPR − FPR moves by ``shift`` standard errors, each by its share of the variance."""
    vt, vf = r.tpr * (1 - r.tpr) / n1, r.fpr * (1 - r.fpr) / n0
    var = vt + vf
    if var <= 0:
        return r.tpr, r.fpr
    d = shift * math.sqrt(var)
    return min(1.0, max(0.0, r.tpr + d * vt / var)), min(1.0, max(0.0, r.fpr - d * vf / var))


def _advantage_decided(adv_max: float, r: Rates, n1: int, n0: int, conf: float, zp: float) -> bool:
    """Accuracy and advantage: Clopper-Pearson TPR and FPR at α/2 each (α/4 a tail), the rates moved by zp s.e."""
    a4 = (1 - conf) / 4
    if r.tpr - r.fpr > adv_max:  # a violation: the lower bound must clear max
        t, f = _shifted_rates(r, n1, n0, -zp)
        return cp_lower(t * n1, n1, a4) - cp_upper(f * n0, n0, a4) > adv_max
    t, f = _shifted_rates(r, n1, n0, zp)
    return cp_upper(t * n1, n1, a4) - cp_lower(f * n0, n0, a4) <= adv_max


def hanley_mcneil_var(a: float, n1: int, n0: int) -> float:
    """Variance of an AUC estimate (Hanley & McNeil 1982), Q₁ = A/(2−A), Q₂ = 2A²/(1+A)."""
    q1, q2 = a / (2 - a), 2 * a * a / (1 + a)
    return (a * (1 - a) + (n1 - 1) * (q1 - a * a) + (n0 - 1) * (q2 - a * a)) / (n1 * n0)


def _auc_decided(value: float, mx: float, var: float, conf: float, zp: float) -> bool:
    """DeLong's interval on the logit scale (:func:`privgate.stats.auc`) around the value moved by zp s.e."""
    se = math.sqrt(var)
    zc = _z(1 - (1 - conf) / 2)
    a = value - zp * se if value > mx else value + zp * se
    if not 0.0 < a < 1.0:
        return (a >= 1.0 and value > mx) or (a <= 0.0 and value <= mx)
    half = zc * se / (a * (1 - a))
    centre = math.log(a / (1 - a))
    if value > mx:
        return 1 / (1 + math.exp(-(centre - half))) > mx
    return 1 / (1 + math.exp(-(centre + half))) <= mx


def order_stat_ranks(n: int, fpr: float, a: float) -> tuple[int | None, int | None]:
    """The ranks (1 = highest) of :func:`privgate.stats.membership._order_stat_thresholds`' two thresholds.

    High side: the smallest k with P(Bin(n, f) ≥ k) ≤ a; low side: the largest k
    with P(Bin(n, f) ≤ k − 1) ≤ a (it exists only when (1 − f)ⁿ ≤ a). None where there is none.
    """
    from scipy.stats import binom

    k_high = int(binom.isf(a, n, fpr)) + 1
    while k_high > 1 and binom.sf(k_high - 2, n, fpr) <= a:
        k_high -= 1
    while k_high <= n and binom.sf(k_high - 1, n, fpr) > a:
        k_high += 1
    high = k_high if k_high <= n else None
    if binom.cdf(0, n, fpr) > a:
        return high, None
    j = max(0, int(binom.ppf(a, n, fpr)))
    while j > 0 and binom.cdf(j, n, fpr) > a:
        j -= 1
    while j + 1 < n and binom.cdf(j + 1, n, fpr) <= a:
        j += 1
    return high, j + 1


def _tpr_decided(value: float, mx: float, f: float, n1: int, nc: int, n0: int, conf: float, zp: float) -> bool:
    """TPR at FPR f (:func:`privgate.stats.tpr_at_fpr`): CP bounds at α/4 at the order-statistic thresholds.

    The ROC curve is taken as the chord TPR(x) = value·x/f through (0, 0) and (f, value): for a
    concave curve it lies below the curve left of f and above it right of f, so it errs on the
    cautious side of both bounds. The threshold at rank k has a true FPR of Beta(k, nc − k + 1).
    """
    need = math.ceil(1.0 / f - 1e-9)
    if nc < need or n0 < need:
        return False
    a = (1 - conf) / 4
    high, low = order_stat_ranks(nc, f, a)
    k = low if value > mx else high
    if k is None:
        return False
    x = k / (nc + 1)
    slope = value / f
    p = min(1.0, slope * x)
    var = p * (1 - p) / n1 + slope * slope * x * (1 - x) / (nc + 2)
    if value > mx:
        return cp_lower(max(0.0, p - zp * math.sqrt(var)) * n1, n1, a) > mx
    return cp_upper(min(1.0, p + zp * math.sqrt(var)) * n1, n1, a) <= mx


def _epsilon_decided(value: float, mx: float, r: Rates, n1: int, n0: int, conf: float, zp: float, delta: float) -> bool:
    """ε lower bound: a pass needs counts that could prove more than ``max``; a fail, a bound above it."""
    if value <= mx:
        return max_provable_epsilon(n1, n0, delta, conf) > mx
    t, f = _shifted_rates(r, n1, n0, -zp)
    return _epsilon_lb_counts(t * n1, n1, f * n0, n0, 1 - conf, delta) > mx


# --------------------------------------------------------------------------- the smallest size


def _smallest(decided: Callable[[int], bool], low: int) -> int | None:
    """The smallest scale t ≥ ``low`` with ``decided(t)`` (doubling, then bisection), None beyond the limit."""
    t = max(1, low)
    if decided(t):
        return t
    while not decided(2 * t):
        t *= 2
        if t > LIMIT:
            return None
    lo, hi = t, 2 * t  # decided(hi), not decided(lo)
    while hi - lo > max(1, lo // 1000):  # to 0.1 %: the normal approximations are not finer than that
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if decided(mid) else (mid, hi)
    return hi


def needed(
    metric: str,
    value: float,
    threshold: float,
    confidence: float,
    *,
    ratio: float = 1.0,
    fpr: float | None = None,
    delta: float | None = None,
    rates: Rates | None = None,
    auc_var: Callable[[int, int], float] | None = None,
    power: float = POWER,
) -> Needed:
    """The members and non-members that decide ``metric ≤ threshold`` for a model whose true value is ``value``.

    Args:
        metric: ``accuracy``, ``advantage``, ``auc``, ``tpr_at_fpr`` or ``epsilon_lb`` (others: no size).
        value: the observed or assumed value of the metric (``epsilon_lb``: ε itself).
        threshold: the check's ``max``.
        confidence: the interval's two-sided confidence, every Bonferroni split included.
        ratio: members per non-member (the audit's); the sizes keep it.
        fpr, delta: the check's ``fpr`` (``tpr_at_fpr``) and ``delta`` (``epsilon_lb``).
        rates: the operating point's TPR and FPR (accuracy, advantage, ε); default symmetric around the value.
        auc_var: the AUC estimate's variance at (members, non-members) in evaluation; default Hanley-McNeil.
        power: the probability the audit decides the check at the sizes returned.
    """
    if metric not in SIZED:
        return Needed(None, None, f"privgate does not size audits for {metric}: the audit's rows do not set its "
                                  "interval alone")  # fmt: skip
    if not math.isfinite(value):
        return Needed(None, None, f"no {metric} value to size the audit for")
    if metric != "epsilon_lb" and value == threshold:
        return Needed(None, None, f"{metric} {value:.4g} sits on the threshold {threshold:g}: no audit size decides it")
    zp = _z(power)
    r = max(ratio, 1e-6)

    def sizes(t: int) -> tuple[int, int]:  # t non-members, the members in the audit's ratio
        return max(2 * MIN_GROUP, math.ceil(r * t)), max(2 * MIN_GROUP, t)

    def decided(t: int) -> bool:
        m, n = sizes(t)
        (_, n1), (nc, n0) = _halves(m), _halves(n)
        if metric in ("accuracy", "advantage"):
            adv, mx = (2 * value - 1, 2 * threshold - 1) if metric == "accuracy" else (value, threshold)
            point = rates or Rates(min(1.0, max(0.0, (1 + adv) / 2)), min(1.0, max(0.0, (1 - adv) / 2)))
            return _advantage_decided(mx, point, n1, n0, confidence, zp)
        if metric == "auc":
            v = min(max(value, 1e-9), 1 - 1e-9)
            var = auc_var(n1, n0) if auc_var is not None else hanley_mcneil_var(v, n1, n0)
            return _auc_decided(v, threshold, var, confidence, zp)
        if metric == "tpr_at_fpr":
            return _tpr_decided(value, threshold, float(fpr or 0.01), n1, nc, n0, confidence, zp)
        point = rates or Rates(0.5, 0.5)
        return _epsilon_decided(value, threshold, point, n1, n0, confidence, zp, 1e-5 if delta is None else delta)

    t = _smallest(decided, 2 * MIN_GROUP)
    if t is None:
        return Needed(None, None, f"no audit of up to {LIMIT:,} non-members decides {metric} {value:.4g} against "
                                  f"{threshold:g}: the value is too close to the threshold")  # fmt: skip
    m, n = sizes(t)
    side = "prove it above" if value > threshold and metric != "epsilon_lb" else "show it within"
    return Needed(
        m,
        n,
        f"about {m:,} members and {n:,} non-members would {side} {threshold:g} at {confidence * 100:.4g}% "
        f"confidence in {power:.0%} of audits, if {metric} is {value:.4g}",
    )


__all__ = [
    "LIMIT",
    "NULL",
    "POWER",
    "SIZED",
    "Needed",
    "Rates",
    "assumed_value",
    "hanley_mcneil_var",
    "needed",
    "null_value",
    "measurable_sizes",
    "order_stat_ranks",
    "resolvable",
]
