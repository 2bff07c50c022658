"""Statistics: pure functions over attack scores and counts, no I/O (jax_privacy's auditing style).

:mod:`~privgate.stats.binomial` (Clopper-Pearson bounds, Bonferroni), :mod:`~privgate.stats.membership` (membership
metrics with intervals on a calibration/evaluation split), :mod:`~privgate.stats.epsilon` (ε ↔ accuracy, empirical ε
lower bounds), :mod:`~privgate.stats.leakage` (reconstruction similarity, attribute-inference advantage),
:mod:`~privgate.stats.precision` (precision at equal priors, recall, F1), :mod:`~privgate.stats.difference` (is a
metric worse in one report than in another, ``privgate diff``). Every function's docstring gives its formula and the
paper behind it.
"""

from __future__ import annotations

from privgate.stats.binomial import bonferroni, clopper_pearson, cp_lower, cp_upper
from privgate.stats.epsilon import (
    Bonferroni,
    Split,
    accuracy_bound,
    epsilon_from_rates,
    epsilon_lower_bound,
    max_provable_epsilon,
)
from privgate.stats.membership import (
    MIN_GROUP,
    Estimate,
    SplitScores,
    advantage,
    attainable_fprs,
    auc,
    balanced_accuracy,
    calibration_mask,
    classwise_normalise,
    empirical_tpr_at_fpr,
    measurable_at,
    roc,
    tpr_at_fpr,
)
from privgate.stats.precision import precision_recall_f1

__all__ = [
    "MIN_GROUP",
    "Bonferroni",
    "Estimate",
    "Split",
    "SplitScores",
    "accuracy_bound",
    "advantage",
    "attainable_fprs",
    "auc",
    "balanced_accuracy",
    "bonferroni",
    "calibration_mask",
    "classwise_normalise",
    "clopper_pearson",
    "cp_lower",
    "cp_upper",
    "empirical_tpr_at_fpr",
    "epsilon_from_rates",
    "epsilon_lower_bound",
    "max_provable_epsilon",
    "measurable_at",
    "precision_recall_f1",
    "roc",
    "tpr_at_fpr",
]
