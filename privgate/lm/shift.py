"""Distribution-shift guard: can a classifier that never queries the model tell members from non-members?

Duan et al. (2024), "Do Membership Inference Attacks Work on Large Language
Models?" (MIMIR), arXiv 2402.07841, show that many reported successes of
membership inference on language models measure a shift between the member
and non-member texts (e.g. non-members written after the training cut-off),
not memorisation; Das, Zhang & Tramèr (2024), arXiv 2406.16201, beat published
attacks with "blind" bag-of-words classifiers that never look at the model.
An audit whose texts can be told apart without the model cannot show that the
model does *not* leak: any attack could be reading the shift.

The guard is such a blind classifier: TF-IDF weighted word 1–2-grams and
character 1–4-grams (within word boundaries), then an L2-regularised logistic
regression (scikit-learn). It is **cross-fitted**: the texts are cut into
``folds`` folds stratified by membership, and each text is scored by a
pipeline (vocabulary, IDF weights and classifier) fitted on the other folds
only. The out-of-fold scores of all texts are pooled into one ROC AUC with
DeLong's interval (:func:`privgate.stats.membership.auc`; DeLong, DeLong &
Clarke-Pearson 1988).

``biased`` is True when the interval's lower bound is above ½ at
``confidence``: the texts are separable without the model. When members and
non-members share one distribution the pooled out-of-fold AUC is centred at
½ or slightly below — fold models learn noise that points the wrong way on
held-out texts (Airola et al. 2011, Comput. Stat. Data Anal. 55:1828, on pooled
cross-validated AUC) — so the
guard rarely raises a false alarm. DeLong's variance treats the scores as if
one fixed classifier made them; the K fold models add variance it does not
count, so read the interval as approximate.

``ngrams`` lists the n-grams that separate the two sets most, from one
pipeline fitted on all texts (for a reader, not for the decision).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict

from privgate.stats.membership import MIN_GROUP, auc

#: Cross-fitting folds by default.
FOLDS = 5
#: Separating n-grams listed per side.
TOP_NGRAMS = 5


class ShiftReport(BaseModel):
    """The blind classifier's cross-fitted AUC with its interval, and whether the audit texts are biased."""

    model_config = ConfigDict(frozen=True)

    auc: float
    lo: float
    hi: float
    confidence: float
    n_members: int
    n_nonmembers: int
    folds: int
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


def _separating_ngrams(texts: list[str], y: np.ndarray, seed: int, top: int) -> tuple[list[str], list[str]]:
    """The n-grams with the largest positive (member) and negative (non-member) weights of a fit on all texts."""
    pipe = _pipeline(seed).fit(texts, y)
    union, clf = pipe[0], pipe[-1]
    names = union.get_feature_names_out()
    w = clf.coef_[0]
    order = np.argsort(w)
    strip = [n.split("__", 1)[-1] for n in names]
    return [strip[i] for i in order[::-1][:top]], [strip[i] for i in order[:top]]


def distribution_shift(
    members: Sequence[str],
    nonmembers: Sequence[str],
    *,
    seed: int = 0,
    confidence: float = 0.95,
    folds: int = FOLDS,
) -> ShiftReport:
    """The blind guard's verdict on an audit's texts (module docstring).

    Args:
        members, nonmembers: the audit's texts.
        seed: the folds' shuffle (and the classifier's).
        confidence: two-sided confidence of the AUC's interval; ``biased`` when its lower bound is above ½.
        folds: cross-fitting folds (at least 2; fewer when a set is smaller).
    """
    from sklearn.model_selection import StratifiedKFold, cross_val_predict

    n1, n0 = len(members), len(nonmembers)
    k = min(folds, n1, n0)
    if n1 < MIN_GROUP or n0 < MIN_GROUP or k < 2:
        nan = float("nan")
        reason = f"too few texts for the shift guard ({n1} members, {n0} non-members; need {MIN_GROUP} each)"
        return ShiftReport(
            auc=nan,
            lo=nan,
            hi=nan,
            confidence=confidence,
            n_members=n1,
            n_nonmembers=n0,
            folds=k,
            biased=False,
            resolvable=False,
            reason=reason,
        )
    texts = list(members) + list(nonmembers)
    y = np.r_[np.ones(n1, dtype=int), np.zeros(n0, dtype=int)]
    cv = StratifiedKFold(n_splits=k, shuffle=True, random_state=seed)
    scores = cross_val_predict(_pipeline(seed), texts, y, cv=cv, method="decision_function")
    est = auc(scores[y == 1], scores[y == 0], confidence)
    for_members, for_nonmembers = _separating_ngrams(texts, y, seed, TOP_NGRAMS)
    return ShiftReport(
        auc=est.value,
        lo=est.lo,
        hi=est.hi,
        confidence=confidence,
        n_members=n1,
        n_nonmembers=n0,
        folds=k,
        biased=bool(est.lo > 0.5),
        member_ngrams=for_members,
        nonmember_ngrams=for_nonmembers,
    )


__all__ = ["ShiftReport", "distribution_shift"]
