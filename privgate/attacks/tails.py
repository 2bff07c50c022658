"""Threshold attacks both ways: which direction of a signal gives members away.

A metric attack's ``direction``: ``higher`` (default, member iff score ≥ t), ``lower``, or ``two_sided`` — far in
either tail of the calibration non-members' distribution, score' = −log(2·min(F(s), 1 − F(s))), per class with
``class_dependent: true`` (Song & Mittal 2021, arXiv 2003.10595). F is fitted on calibration non-members only,
cross-fitted (:mod:`privgate.attacks.crossfit`), and smoothed so a score beyond every reference keeps a finite
p-value. Details: ``docs/internals-attacks-lm.md``.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from privgate.attacks.crossfit import CalibrationLabels, cross_fit

DIRECTIONS = ("higher", "lower", "two_sided")
#: Cross-fitting folds of the two-sided transform.
FOLDS = 5
#: Fewest reference non-members of a class for its own distribution (else the pooled one).
MIN_CLASS_REFERENCE = 20


def smoothed_cdf(reference: np.ndarray, values: np.ndarray) -> np.ndarray:
    """F(v) = (#{r < v} + ½·#{r = v} + 1) / (m + 2) over the reference scores r."""
    r = np.sort(np.asarray(reference, dtype=np.float64))
    v = np.asarray(values, dtype=np.float64)
    below = np.searchsorted(r, v, side="left")
    upto = np.searchsorted(r, v, side="right")
    return (below + 0.5 * (upto - below) + 1.0) / (len(r) + 2.0)


def two_sided(reference: np.ndarray, values: np.ndarray) -> np.ndarray:
    """−log(2·min(F, 1 − F)): large when a value lies in either tail of the reference distribution."""
    f = smoothed_cdf(reference, values)
    return -np.log(2.0 * np.minimum(f, 1.0 - f))


def two_sided_scorer(
    score: np.ndarray, groups: np.ndarray | None, seed: int, folds: int = FOLDS
) -> Callable[[CalibrationLabels], np.ndarray]:
    """The fitted scorer of a two-sided threshold attack (module docstring).

    Args:
        score: ``[n]`` the metric attack's label-free scores (higher = more member-like).
        groups: ``[n]`` class labels for per-class distributions, or None for one.
        seed: drives the cross-fitting folds.
        folds: cross-fitting folds.
    """
    s = np.asarray(score, dtype=np.float64)
    g = None if groups is None else np.asarray(groups)

    def fit_score(train: np.ndarray, train_members: np.ndarray, rows: np.ndarray) -> np.ndarray:
        ref = train[~train_members]
        out = two_sided(s[ref], s[rows])
        if g is not None:
            for c in np.unique(g[rows]):
                mine = ref[g[ref] == c]
                if len(mine) >= MIN_CLASS_REFERENCE:
                    sel = g[rows] == c
                    out[sel] = two_sided(s[mine], s[rows[sel]])
        return out

    def scorer(labels: CalibrationLabels) -> np.ndarray:
        return cross_fit(labels, fit_score, folds, seed)

    return scorer


__all__ = ["DIRECTIONS", "FOLDS", "smoothed_cdf", "two_sided", "two_sided_scorer"]
