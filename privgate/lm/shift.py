"""Distribution-shift guard: can a classifier that never queries the model tell members from non-members?

Duan et al. 2024 (MIMIR, arXiv 2402.07841) and Das, Zhang & Tramèr 2024 (arXiv 2406.16201): texts separable
without the model cannot show that the model does not leak. The guard is TF-IDF word 1–2-grams and character
1–4-grams with an L2 logistic regression (scikit-learn), fitted on a seeded, stratified calibration half and
measured on the other: its AUC with DeLong's interval (DeLong et al. 1988). ``biased`` when the lower bound is above
½ (a false alarm with probability about (1 − confidence)/2). ``member_ngrams``/``nonmember_ngrams`` show what
separates the sets. Why not K-fold, measured: ``docs/lm-leakage.md``, ``docs/internals-attacks-lm.md``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict

from privgate.stats.membership import MIN_GROUP, auc, calibration_mask

#: Fraction of the texts the classifier is fitted on (the rest measure it).
CALIBRATION = 0.5
#: Separating n-grams listed per side.
TOP_NGRAMS = 5


class ShiftReport(BaseModel):
    """The blind classifier's held-out AUC with its interval, and whether the audit texts are biased."""

    model_config = ConfigDict(frozen=True)

    auc: float
    lo: float
    hi: float
    confidence: float
    n_members: int
    n_nonmembers: int
    evaluation_members: int
    evaluation_nonmembers: int
    biased: bool
    resolvable: bool = True
    reason: str | None = None
    member_ngrams: list[str] = []
    nonmember_ngrams: list[str] = []


def _pipeline(seed: int) -> Any:
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline, make_union

    features = make_union(
        TfidfVectorizer(analyzer="word", ngram_range=(1, 2), sublinear_tf=True, lowercase=False),
        TfidfVectorizer(analyzer="char_wb", ngram_range=(1, 4), sublinear_tf=True, lowercase=False),
    )
    return make_pipeline(features, LogisticRegression(C=1.0, max_iter=2000, random_state=seed))


def _separating_ngrams(pipe: Any, top: int) -> tuple[list[str], list[str]]:
    """The n-grams with the largest positive (member) and negative (non-member) weights of a fitted pipeline."""
    names = [n.split("__", 1)[-1] for n in pipe[0].get_feature_names_out()]
    order = np.argsort(pipe[-1].coef_[0])
    return [names[i] for i in order[::-1][:top]], [names[i] for i in order[:top]]


def distribution_shift(
    members: Sequence[str],
    nonmembers: Sequence[str],
    *,
    seed: int = 0,
    confidence: float = 0.95,
    calibration: float = CALIBRATION,
) -> ShiftReport:
    """The blind guard's verdict on an audit's texts (module docstring).

    Args:
        members, nonmembers: the audit's texts.
        seed: which texts fit the classifier (and its solver's seed).
        confidence: two-sided confidence of the AUC's interval; ``biased`` when its lower bound is above ½.
        calibration: the fraction of each set the classifier is fitted on.
    """
    n1, n0 = len(members), len(nonmembers)
    y = np.r_[np.ones(n1, dtype=bool), np.zeros(n0, dtype=bool)]
    fit = calibration_mask(y, seed, calibration)
    e1, e0 = int(np.sum(y & ~fit)), int(np.sum(~y & ~fit))
    sizes = {"n_members": n1, "n_nonmembers": n0, "evaluation_members": e1, "evaluation_nonmembers": e0}
    if min(e1, e0, int(np.sum(y & fit)), int(np.sum(~y & fit))) < MIN_GROUP:
        nan = float("nan")
        reason = (
            f"too few texts for the shift guard ({n1} members, {n0} non-members; it fits on {calibration:.0%} and "
            f"measures on the rest, each part needing {MIN_GROUP} of each)"
        )
        return ShiftReport(
            auc=nan, lo=nan, hi=nan, confidence=confidence, biased=False, resolvable=False, reason=reason, **sizes
        )
    texts = np.asarray(list(members) + list(nonmembers), dtype=object)
    pipe = _pipeline(seed).fit(list(texts[fit]), y[fit].astype(int))
    scores = pipe.decision_function(list(texts[~fit]))
    est = auc(scores[y[~fit]], scores[~y[~fit]], confidence)
    for_members, for_nonmembers = _separating_ngrams(pipe, TOP_NGRAMS)
    return ShiftReport(
        auc=est.value,
        lo=est.lo,
        hi=est.hi,
        confidence=confidence,
        biased=bool(est.lo > 0.5),
        member_ngrams=for_members,
        nonmember_ngrams=for_nonmembers,
        **sizes,
    )


__all__ = ["ShiftReport", "distribution_shift"]
