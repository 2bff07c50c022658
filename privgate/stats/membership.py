"""Statistics over membership-inference scores: pure functions, no I/O.

Scores of members (label 1) and non-members (label 0), higher = "more likely a member", a member called at
``score >= threshold``. Threshold metrics pick their threshold on a calibration split and are measured on a disjoint
evaluation split (:class:`SplitScores`); rates come with Clopper-Pearson intervals (Clopper & Pearson 1934), a TPR
and an FPR combined each at α/2 (Bonferroni). A metric the data cannot resolve comes back ``resolvable=False`` with
the reason, never as a number that looks decided (:data:`MIN_GROUP` per group; ``ceil(1/f)`` non-members per split
for TPR at FPR ``f``; the ε bound, :func:`privgate.stats.epsilon.max_provable_epsilon`).
Why: ``docs/statistics.md`` and ``docs/internals-training-stats.md``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from privgate.stats.binomial import bonferroni, clopper_pearson, cp_lower, cp_upper

#: Fewest examples per (split × membership) group for any metric.
MIN_GROUP = 10


# --------------------------------------------------------------------------- containers


@dataclass(frozen=True)
class SplitScores:
    """Scores split into calibration (threshold choice) and evaluation (measurement)."""

    cal_in: np.ndarray
    cal_out: np.ndarray
    eval_in: np.ndarray
    eval_out: np.ndarray

    @classmethod
    def from_mask(cls, scores: np.ndarray, membership: np.ndarray, calibration: np.ndarray) -> SplitScores:
        """Split ``scores`` by ``membership`` (bool) and a boolean ``calibration`` mask."""
        s = np.asarray(scores, dtype=float)
        m = np.asarray(membership, dtype=bool)
        c = np.asarray(calibration, dtype=bool)
        return cls(s[c & m], s[c & ~m], s[~c & m], s[~c & ~m])

    def sizes(self) -> dict[str, int]:
        return {
            "calibration_members": len(self.cal_in),
            "calibration_nonmembers": len(self.cal_out),
            "evaluation_members": len(self.eval_in),
            "evaluation_nonmembers": len(self.eval_out),
        }

    def too_small(self) -> str | None:
        """Why the split cannot support any metric, or None."""
        small = {k: v for k, v in self.sizes().items() if v < MIN_GROUP}
        if small:
            parts = ", ".join(f"{v} {k.replace('_', ' ')}" for k, v in small.items())
            return f"too few audit examples ({parts}; need at least {MIN_GROUP} in each group)"
        return None


@dataclass(frozen=True)
class Estimate:
    """A metric value with its confidence interval and the evidence behind it."""

    metric: str
    value: float
    lo: float
    hi: float
    confidence: float
    n_members: int
    n_nonmembers: int
    threshold: float | None = None
    resolvable: bool = True
    reason: str | None = None
    details: Mapping[str, Any] = field(default_factory=dict)
    #: False when the attack's scores cannot be placed at the requested operating point at all
    #: (ties or too few distinct values, see :func:`tpr_at_fpr`): unlike too little data, more
    #: audit data would not help, so such an attack is not a candidate of a ``best`` check.
    measurable: bool = True

    @classmethod
    def unresolved(
        cls, metric: str, reason: str, confidence: float, n_members: int = 0, n_nonmembers: int = 0
    ) -> Estimate:
        nan = float("nan")
        return cls(metric, nan, nan, nan, confidence, n_members, n_nonmembers, resolvable=False, reason=reason)


def calibration_mask(membership: np.ndarray, seed: int, fraction: float = 0.5) -> np.ndarray:
    """A seeded, membership-stratified boolean mask selecting the calibration split."""
    m = np.asarray(membership, dtype=bool)
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0x5EED]))
    mask = np.zeros(len(m), dtype=bool)
    for group in (np.flatnonzero(m), np.flatnonzero(~m)):
        chosen = rng.permutation(group)[: int(round(fraction * len(group)))]
        mask[chosen] = True
    return mask


# --------------------------------------------------------------------------- ROC and AUC


def roc(in_scores: np.ndarray, out_scores: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """ROC curve (fpr, tpr, thresholds) of "member iff score >= threshold": a first point (0, 0) at +inf, then one
    per distinct score, highest first (scikit-learn's ``roc_curve(..., drop_intermediate=False)``).

    Counted by binary search on the sorted scores: ``roc_curve`` validates its inputs for milliseconds a call, and
    every attack's accuracy and advantage check and every report's curve comes here.
    """
    ins, outs = np.sort(np.asarray(in_scores, dtype=float)), np.sort(np.asarray(out_scores, dtype=float))
    cuts = np.unique(np.r_[ins, outs])[::-1]
    tpr = np.r_[0.0, (len(ins) - np.searchsorted(ins, cuts)) / len(ins)]
    fpr = np.r_[0.0, (len(outs) - np.searchsorted(outs, cuts)) / len(outs)]
    return fpr, tpr, np.r_[np.inf, cuts]


def _below(sorted_other: np.ndarray, scores: np.ndarray) -> np.ndarray:
    """Per score: how many of ``sorted_other`` lie below it, ties counting half.

    The placement values of DeLong's variance: a member's mid-rank among all scores less its mid-rank among the
    members (Sun & Xu 2014), counted by binary search instead of three full rankings.
    """
    left = np.searchsorted(sorted_other, scores, side="left")
    right = np.searchsorted(sorted_other, scores, side="right")
    return (left + right) / 2.0


def auc(in_scores: np.ndarray, out_scores: np.ndarray, confidence: float = 0.95) -> Estimate:
    """AUC = P(member score > non-member score) + ½ P(tie), with DeLong's interval.

    The variance is DeLong, DeLong & Clarke-Pearson (1988), computed from
    mid-ranks (Sun & Xu 2014); the interval is formed on the logit scale, which
    keeps it inside [0, 1] and improves coverage near the ends (Pepe 2003,
    §5.2). When the estimate is exactly 0 or 1 the DeLong variance collapses;
    the interval then falls back to the exact binomial bound of
    ``min(n_members, n_non-members)`` all-successes trials, so perfect
    separation on few examples is not reported as certain.
    """
    x = np.asarray(in_scores, dtype=float)
    y = np.asarray(out_scores, dtype=float)
    n1, n0 = len(x), len(y)
    if n1 < MIN_GROUP or n0 < MIN_GROUP:
        return Estimate.unresolved(
            "auc",
            f"too few examples for an AUC ({n1} members, {n0} non-members; need {MIN_GROUP} each)",
            confidence,
            n1,
            n0,
        )
    from scipy.special import ndtri  # imported when used, like sklearn above

    v10 = _below(np.sort(y), x) / n0  # per member: fraction of non-members below it (ties: half)
    v01 = 1.0 - _below(np.sort(x), y) / n1  # per non-member: fraction of members above it
    a = float(v10.mean())
    var = float(np.var(v10, ddof=1) / n1 + np.var(v01, ddof=1) / n0)
    z = float(ndtri(1 - (1 - confidence) / 2))
    if 0.0 < a < 1.0 and var > 0:
        se_logit = math.sqrt(var) / (a * (1 - a))
        centre = math.log(a / (1 - a))
        lo = 1 / (1 + math.exp(-(centre - z * se_logit)))
        hi = 1 / (1 + math.exp(-(centre + z * se_logit)))
    else:
        k = min(n1, n0)
        edge = (1 - confidence) / 2
        if a >= 1.0:
            lo, hi = edge ** (1.0 / k), 1.0
        elif a <= 0.0:
            lo, hi = 0.0, 1 - edge ** (1.0 / k)
        else:  # all scores tied
            lo, hi = clopper_pearson(k // 2, k, confidence)
    return Estimate("auc", a, lo, hi, confidence, n1, n0, details={"se": math.sqrt(max(var, 0.0))})


# --------------------------------------------------------------------------- threshold metrics


def _counts(split_in: np.ndarray, split_out: np.ndarray, threshold: float) -> tuple[int, int]:
    return int(np.sum(split_in >= threshold)), int(np.sum(split_out >= threshold))


def _rates_ci(tp: int, n1: int, fp: int, n0: int, confidence: float) -> tuple[tuple[float, float], tuple[float, float]]:
    """CP intervals for TPR and FPR, each at 1 − α/2 so that both hold jointly at 1 − α."""
    per = bonferroni(confidence, 2)
    return clopper_pearson(tp, n1, per), clopper_pearson(fp, n0, per)


def _midpoint_below(cal: np.ndarray, t: float) -> float:
    """Move a threshold that sits on a calibration score halfway down to the next lower one.

    The calibration split only says the cut lies between two observed scores;
    the midpoint stops the evaluation split from losing members that fall in
    that gap (a threshold on the lowest calibration member is needlessly strict).
    """
    below = cal[cal < t]
    if not np.isfinite(t) or below.size == 0:
        return float(t)
    return float((t + below.max()) / 2.0)


def _best_advantage_threshold(cal_in: np.ndarray, cal_out: np.ndarray) -> float:
    """The highest ROC threshold with the largest TPR − FPR (+inf when no cut beats calling no one), moved halfway
    down to the next calibration score (:func:`_midpoint_below`)."""
    fpr, tpr, thr = roc(cal_in, cal_out)
    i = int(np.argmax(tpr - fpr))
    return _midpoint_below(np.r_[cal_in, cal_out], float(thr[i]))


def _at_threshold(metric: str, split: SplitScores, confidence: float) -> Estimate:
    reason = split.too_small()
    if reason:
        return Estimate.unresolved(metric, reason, confidence, len(split.eval_in), len(split.eval_out))
    t = _best_advantage_threshold(split.cal_in, split.cal_out)
    n1, n0 = len(split.eval_in), len(split.eval_out)
    tp, fp = _counts(split.eval_in, split.eval_out, t)
    (tl, th), (fl, fh) = _rates_ci(tp, n1, fp, n0, confidence)
    tpr, fpr = tp / n1, fp / n0
    details = {"tpr": tpr, "fpr": fpr, "tpr_ci": [tl, th], "fpr_ci": [fl, fh], "tp": tp, "fp": fp, **split.sizes()}
    if metric == "accuracy":
        return Estimate(
            "accuracy",
            (tpr + 1 - fpr) / 2,
            (tl + 1 - fh) / 2,
            (th + 1 - fl) / 2,
            confidence,
            n1,
            n0,
            t,
            details=details,
        )
    return Estimate("advantage", tpr - fpr, tl - fh, th - fl, confidence, n1, n0, t, details=details)


def balanced_accuracy(split: SplitScores, confidence: float = 0.95) -> Estimate:
    """Balanced MIA accuracy ½(TPR + 1 − FPR) at the threshold that maximises it on calibration.

    The threshold-selection protocol follows Yeom et al. (2018, arXiv 1709.01604)
    and Song & Mittal (2021, arXiv 2003.10595), measured here on a disjoint
    evaluation split; the interval combines Clopper-Pearson intervals on TPR and
    FPR (Bonferroni, α/2 each). 0.5 is random guessing.
    """
    return _at_threshold("accuracy", split, confidence)


def advantage(split: SplitScores, confidence: float = 0.95) -> Estimate:
    """Membership advantage TPR − FPR (Yeom et al. 2018, arXiv 1709.01604) at a calibrated threshold.

    Equals 2·accuracy − 1 at the same threshold; 0 is random guessing.
    """
    return _at_threshold("advantage", split, confidence)


def _threshold_at_fpr(out_scores: np.ndarray, fpr: float) -> float:
    """Lowest threshold whose empirical FPR on ``out_scores`` is at most ``fpr``."""
    s = np.sort(np.asarray(out_scores, dtype=float))[::-1]  # descending
    k = int(math.floor(fpr * len(s)))  # false positives allowed
    if k >= len(s):
        return float(s[-1])
    # threshold strictly above the (k+1)-th highest non-member score
    return float(np.nextafter(s[k], np.inf))


def threshold_at_fpr(out_scores: np.ndarray, fpr: float) -> float:
    """The calibrated threshold of a TPR-at-FPR check: the lowest whose FPR on ``out_scores`` is at most ``fpr``."""
    return _threshold_at_fpr(out_scores, fpr)


def _order_stat_thresholds(out_scores: np.ndarray, fpr: float, a: float) -> tuple[float | None, float | None]:
    """Thresholds whose true FPR is ≥ ``fpr`` (resp. ≤ ``fpr``) with probability ≥ 1 − a.

    With s₁ ≥ s₂ ≥ … the non-member scores, the true FPR of "score ≥ s_k" is the
    k-th smallest of n uniforms, Beta(k, n−k+1), so P(FPR < f) = P(Bin(n, f) ≥ k)
    (order statistics; e.g. David & Nagaraja 2003, §2.5). The high side uses the
    smallest k with P(Bin(n, f) ≥ k) ≤ a; the low side the largest k with
    P(Bin(n, f) < k) ≤ a and a threshold strictly above s_k (ties only lower it).
    ``None`` when n is too small for that side.
    """
    from scipy import stats as _st

    s = np.sort(np.asarray(out_scores, dtype=float))[::-1]
    n = len(s)
    ks = np.arange(1, n + 1)
    p_below = _st.binom.sf(ks - 1, n, fpr)  # P(FPR(s_k) < f)
    p_above = _st.binom.cdf(ks - 1, n, fpr)  # P(FPR(s_k) > f)
    hi_ok = np.flatnonzero(p_below <= a)
    lo_ok = np.flatnonzero(p_above <= a)
    t_high = float(s[hi_ok[0]]) if hi_ok.size else None
    t_low = float(np.nextafter(s[lo_ok[-1]], np.inf)) if lo_ok.size else None
    return t_high, t_low


def attainable_fprs(out_scores: np.ndarray, fpr: float) -> tuple[float, float, int]:
    """The empirical FPRs a threshold can reach on ``out_scores`` next to ``fpr``: (below, above, tie).

    A threshold "score ≥ t" flags all non-members at or above t, so its FPR can
    only be a multiple of 1/n that skips every group of tied scores at once.
    ``below`` is the largest attainable FPR ≤ ``fpr``, ``above`` the smallest one
    above it, and ``tie`` the number of non-members in the score group whose
    inclusion jumps from one to the other.
    """
    s = np.asarray(out_scores, dtype=float)
    n = len(s)
    values, counts = np.unique(s, return_counts=True)
    cum = np.cumsum(counts[::-1]) / n  # FPR of "score >= v" for v in descending order
    steps = np.r_[0.0, cum]
    tol = 1e-12
    below = float(steps[steps <= fpr + tol].max())
    higher = steps[steps > fpr + tol]
    above = float(higher.min()) if higher.size else 1.0
    tie = int(round((above - below) * n))
    return below, above, tie


def measurable_at(out_scores: np.ndarray, fpr: float) -> str | None:
    """Why an attack's scores cannot be placed at FPR ``fpr`` (None when they can).

    The operating point is measurable when the attainable FPRs around ``fpr`` on
    the calibration non-members are no further apart than ``fpr`` itself, i.e.
    no tie group straddling the point holds more non-members than the whole
    false-positive budget (and more than one). A score with few distinct values
    (prediction correctness: two) or heavy ties (saturated confidences) jumps
    over the point: its TPR "at FPR f" is then a TPR at some other FPR, and its
    interval spans almost [0, 1] whatever the amount of data.
    """
    n = len(out_scores)
    below, above, tie = attainable_fprs(out_scores, fpr)
    if above - below > fpr + 1e-12 and tie > max(1, fpr * n):
        return (
            f"not measurable at FPR {fpr:g}: its scores jump from FPR {below:.3g} to {above:.3g} on the calibration "
            f"non-members ({tie} of {n} tie at one score, {len(np.unique(out_scores))} distinct values), so "
            f"no threshold "
            f"operates at FPR {fpr:g}"
        )
    return None


def tpr_at_fpr(split: SplitScores, fpr: float, confidence: float = 0.95) -> Estimate:
    """TPR at a fixed low FPR, the measure Carlini et al. (2022, arXiv 2112.03570) argue for.

    ``value`` is the evaluation TPR at the lowest threshold whose FPR on the
    calibration non-members is ≤ ``fpr``. The interval bounds the TPR of the
    attack's ROC curve *at* FPR = ``fpr`` and accounts for the threshold being
    estimated: the upper bound is the Clopper-Pearson upper bound (α/4) of the
    TPR at a threshold whose FPR is ≥ ``fpr`` with probability 1 − α/4, the
    lower bound the CP lower bound at a threshold whose FPR is ≤ ``fpr`` with
    probability 1 − α/4 (see :func:`_order_stat_thresholds`; 0 when the
    calibration split is too small to place one). Since TPR is monotone in FPR,
    the interval holds at 1 − α. The exact counts and the CP interval at the
    point threshold are in ``details``. Unresolvable when either split holds
    fewer than ``ceil(1/fpr)`` non-members (module docstring); ``measurable``
    is False, with the reason, when the scores cannot be placed at ``fpr`` at all
    (:func:`measurable_at`). ``details`` reports the FPR the point threshold
    achieves on the evaluation split with its Clopper-Pearson interval, so a TPR
    "at 1 %" that was really measured at 4 % cannot pass unnoticed; the
    decisions use ``lo``/``hi``, which bound the curve at ``fpr`` itself.
    """
    name = "tpr_at_fpr"
    reason = split.too_small()
    if reason:
        return Estimate.unresolved(name, reason, confidence, len(split.eval_in), len(split.eval_out))
    need = math.ceil(1.0 / fpr - 1e-9)
    n_cal, n_eval = len(split.cal_out), len(split.eval_out)
    if n_cal < need or n_eval < need:
        return Estimate.unresolved(
            name,
            f"measuring TPR at FPR {fpr:g} needs at least {need} non-members in each of the calibration "
            f"and evaluation splits ({2 * need} in all); the audit data has {n_cal} and {n_eval}",
            confidence,
            len(split.eval_in),
            n_eval,
        )
    alpha = 1.0 - confidence
    t = _threshold_at_fpr(split.cal_out, fpr)
    n1 = len(split.eval_in)
    tp, fp = _counts(split.eval_in, split.eval_out, t)
    value = tp / n1
    t_high, t_low = _order_stat_thresholds(split.cal_out, fpr, alpha / 4)
    hi = cp_upper(int(np.sum(split.eval_in >= t_high)), n1, alpha / 4) if t_high is not None else 1.0
    lo = cp_lower(int(np.sum(split.eval_in >= t_low)), n1, alpha / 4) if t_low is not None else 0.0
    details = {
        "fpr_target": fpr,
        "fpr_achieved": fp / n_eval,
        "fpr_ci": list(clopper_pearson(fp, n_eval, confidence)),
        "tpr_ci_at_threshold": list(clopper_pearson(tp, n1, confidence)),
        "tp": tp,
        "fp": fp,
        "threshold_high": t_high,
        "threshold_low": t_low,
        **split.sizes(),
    }
    why = measurable_at(split.cal_out, fpr)
    if why:
        details["not_measurable"] = why
    return Estimate(
        name,
        value,
        min(lo, value),
        max(hi, value),
        confidence,
        n1,
        n_eval,
        t,
        details=details,
        measurable=why is None,
        reason=why,
    )


def empirical_tpr_at_fpr(in_scores: np.ndarray, out_scores: np.ndarray, fpr: float) -> float:
    """Descriptive TPR at FPR ≤ ``fpr`` read off one ROC curve (no split, no interval)."""
    f, t, _ = roc(in_scores, out_scores)
    ok = f <= fpr + 1e-12
    return float(t[ok].max()) if ok.any() else 0.0


# --------------------------------------------------------------------------- class-dependent thresholds


def classwise_normalise(scores: np.ndarray, groups: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """Standardise scores per class with the mean/std of the ``reference`` examples of that class.

    Song & Mittal (2021, arXiv 2003.10595) show that class-dependent thresholds
    strengthen metric-based attacks; a per-class z-score fitted on calibration
    *non-members* turns one global threshold into one threshold per class. The
    fit never sees evaluation examples. Classes without at least two reference
    examples keep the global standardisation.
    """
    s = np.asarray(scores, dtype=float)
    g = np.asarray(groups)
    ref = np.asarray(reference, dtype=bool)
    out = np.empty_like(s)
    gm, gs = s[ref].mean(), s[ref].std() or 1.0
    for c in np.unique(g):
        sel = g == c
        r = sel & ref
        if r.sum() >= 2:
            mu, sd = s[r].mean(), s[r].std()
            out[sel] = (s[sel] - mu) / (sd if sd > 1e-12 else gs)
        else:
            out[sel] = (s[sel] - gm) / gs
    return out
