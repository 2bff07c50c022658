"""Scores fitted on the calibration split's membership, cross-fitted so no score is tuned on itself.

The only way an attack may learn from known membership: the gate hands it a :class:`CalibrationLabels` (the
calibration rows' membership only; the evaluation split's never leaves the gate). Calibration rows are scored
out of fold over K folds stratified by membership (Chernozhukov et al. 2018, arXiv 1608.00060); each evaluation row
is scored by one fold's model, assigned at random, so calibration and evaluation scores come from the same mixture
and a threshold at FPR f on calibration non-members has FPR f on evaluation non-members in expectation. Why the K
models are not averaged: ``docs/attacks.md``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

#: Fewest calibration members and non-members per training fold.
MIN_PER_CLASS = 5


@dataclass(frozen=True)
class CalibrationLabels:
    """What a fitted scorer may learn from: which rows calibrate, and their membership.

    Attributes:
        mask: ``[n]`` bool, True for the calibration rows of the pooled audit examples.
        members: ``[mask.sum()]`` bool, the membership of the calibration rows, in row order.
    """

    mask: np.ndarray
    members: np.ndarray

    def __post_init__(self) -> None:
        mask = np.asarray(self.mask, dtype=bool)
        members = np.asarray(self.members, dtype=bool)
        if mask.ndim != 1 or members.shape != (int(mask.sum()),):
            raise ValueError(f"membership of {members.shape} for {int(mask.sum())} calibration rows")
        object.__setattr__(self, "mask", mask)
        object.__setattr__(self, "members", members)

    @classmethod
    def of(cls, calibration: np.ndarray, membership: np.ndarray) -> CalibrationLabels:
        """The calibration rows' membership cut out of the full membership (the gate's one call)."""
        calibration = np.asarray(calibration, dtype=bool)
        return cls(calibration, np.asarray(membership, dtype=bool)[calibration])

    @property
    def rows(self) -> np.ndarray:
        """Indices of the calibration rows."""
        return np.flatnonzero(self.mask)


class FittedScorer(Protocol):
    """Scores of every audit row, fitted on the calibration labels (never on the evaluation split's)."""

    def __call__(self, labels: CalibrationLabels) -> np.ndarray: ...


#: ``fit_score(train_rows, train_members, score_rows) -> scores of score_rows``, all as row indices.
FitScore = Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]


def fold_of(labels: CalibrationLabels, folds: int, seed: int) -> np.ndarray:
    """``[n]`` fold of every row: calibration rows stratified by membership, the others balanced at random.

    The evaluation rows' folds depend on the seed and their count only, never on
    their membership.
    """
    n = len(labels.mask)
    out = np.empty(n, dtype=np.int64)
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0xF01D]))
    cal = labels.rows
    for group in (cal[labels.members], cal[~labels.members]):
        out[rng.permutation(group)] = np.arange(len(group)) % folds
    rest = np.flatnonzero(~labels.mask)
    out[rng.permutation(rest)] = np.arange(len(rest)) % folds
    return out


def cross_fit(labels: CalibrationLabels, fit_score: FitScore, folds: int, seed: int) -> np.ndarray:
    """Scores of every row from the fold model that did not train on it (module docstring).

    Args:
        labels: the calibration rows and their membership.
        fit_score: fits on ``(train_rows, train_members)`` and returns the scores of ``score_rows``.
        folds: K ≥ 2.
        seed: drives the fold assignment.

    Raises:
        AttackSkipped: a training fold would hold fewer than :data:`MIN_PER_CLASS` members or non-members
            (the gate reports the attack as skipped, with this reason).
    """
    from privgate.attacks.base import AttackSkipped

    n_in, n_out = int(labels.members.sum()), int((~labels.members).sum())
    if min(n_in, n_out) * (folds - 1) / folds < MIN_PER_CLASS:
        raise AttackSkipped(
            f"cross-fitting over {folds} folds needs at least {MIN_PER_CLASS} calibration members and non-members per "
            f"training fold; the calibration split has {n_in} members and {n_out} non-members"
        )
    fold = fold_of(labels, folds, seed)
    member = np.zeros(len(labels.mask), dtype=bool)
    member[labels.mask] = labels.members
    scores = np.empty(len(labels.mask), dtype=np.float64)
    for k in range(folds):
        train = np.flatnonzero(labels.mask & (fold != k))
        score = np.flatnonzero(fold == k)
        scores[score] = np.asarray(fit_score(train, member[train], score), dtype=np.float64)
    return scores


__all__ = ["CalibrationLabels", "FitScore", "FittedScorer", "MIN_PER_CLASS", "cross_fit", "fold_of"]
