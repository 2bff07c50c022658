"""Attack precision, recall and F1 at a calibrated threshold, with intervals (the measures of
the federated audit of Gao 2024, University of Zurich).

At the calibration split's advantage-maximising threshold (:func:`privgate.stats.membership.balanced_accuracy`), the
evaluation split gives TPR and FPR; precision is reported at equal priors (Shokri et al. 2017, arXiv 1610.05820),
precision = TPR / (TPR + FPR), recall = TPR, F1 = 2·TPR / (1 + TPR + FPR). Intervals: Clopper-Pearson on TPR and
FPR at 1 − α/2 each (Bonferroni), evaluated at the corners; recall's at 1 − α.
Why that threshold and not F1's: ``docs/internals-training-stats.md``.
"""

from __future__ import annotations

import math

from privgate.stats.binomial import clopper_pearson
from privgate.stats.membership import Estimate, SplitScores, balanced_accuracy


def _precision(tpr: float, fpr: float) -> float:
    return tpr / (tpr + fpr) if tpr + fpr > 0 else math.nan


def _f1(tpr: float, fpr: float) -> float:
    return 2 * tpr / (1 + tpr + fpr)


def precision_recall_f1(split: SplitScores, confidence: float = 0.95) -> dict[str, Estimate]:
    """``{"precision", "recall", "f1"}`` at the calibrated threshold, each with its interval (module docstring)."""
    acc = balanced_accuracy(split, confidence)
    if not acc.resolvable:
        return {m: Estimate.unresolved(m, acc.reason or "", confidence, acc.n_members, acc.n_nonmembers) for m in _M}
    d = acc.details
    tpr, fpr = float(d["tpr"]), float(d["fpr"])
    (tl, th), (fl, fh) = d["tpr_ci"], d["fpr_ci"]
    n1, n0 = acc.n_members, acc.n_nonmembers
    common = {"threshold": acc.threshold, "tp": d["tp"], "fp": d["fp"], "tpr": tpr, "fpr": fpr}
    rl, rh = clopper_pearson(int(d["tp"]), n1, confidence)
    out = {"recall": Estimate("recall", tpr, rl, rh, confidence, n1, n0, acc.threshold, details=common)}
    p = _precision(tpr, fpr)
    if math.isnan(p):
        out["precision"] = Estimate.unresolved(
            "precision",
            "the calibrated threshold flags no evaluation row, so precision is undefined",
            confidence,
            n1,
            n0,
        )
    else:
        lo, hi = _precision(tl, fh), _precision(th, fl)
        out["precision"] = Estimate(
            "precision", p, 0.0 if math.isnan(lo) else lo, 1.0 if math.isnan(hi) else hi, confidence, n1, n0,
            acc.threshold, details=common,
        )  # fmt: skip
    out["f1"] = Estimate(
        "f1", _f1(tpr, fpr), _f1(tl, fh), _f1(th, fl), confidence, n1, n0, acc.threshold, details=common
    )
    return {m: out[m] for m in _M}


_M = ("precision", "recall", "f1")

__all__ = ["precision_recall_f1"]
