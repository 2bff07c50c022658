"""Sanity of the target before judging it: is the audit data what the model was trained on?

The rest (design, limits, derivations): docs/internals-inputs.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from privgate import stats
from privgate.inputs.data import AuditData, Dataset
from privgate.inputs.target import Target
from privgate.outputs import PROBE_ROWS
from privgate.recipe import Recipe
from privgate.stats.trivial import trivial_accuracy

#: Prefix of the warnings this module adds, so readers and tests can pick them out.
WARNING_PREFIX = "target sanity"


@dataclass(frozen=True)
class Accuracy:
    """``correct`` of ``n`` rows predicted right, with a Clopper-Pearson interval at ``confidence``."""

    correct: int
    n: int
    confidence: float

    @property
    def value(self) -> float:
        return self.correct / self.n if self.n else float("nan")

    @property
    def ci(self) -> tuple[float, float]:
        return stats.clopper_pearson(self.correct, self.n, self.confidence)

    def as_dict(self) -> dict[str, Any]:
        lo, hi = self.ci
        return {"value": self.value, "ci": [lo, hi], "n": self.n, "correct": self.correct}

    def label(self) -> str:
        lo, hi = self.ci
        return f"{self.value:.3f} [{lo:.3f}, {hi:.3f}], n = {self.n}"


def accuracy_on(target: Target, d: Dataset, confidence: float) -> Accuracy:
    """The target's accuracy on one audit set: argmax of its outputs against the labels."""
    pred = np.asarray(target.predict(d.x))
    return Accuracy(int(np.sum(pred == d.y)), len(d), confidence)


def baseline_accuracy(labels: np.ndarray, classes: int) -> float:
    """Accuracy of always guessing the most common label (at least 1/K)."""
    counts = np.bincount(np.asarray(labels, dtype=np.int64), minlength=max(classes, 1))
    return max(float(counts.max() / counts.sum()), 1.0 / max(classes, 1))


def _fisher_p(members: Accuracy, nonmembers: Accuracy, alternative: str) -> float:
    from scipy.stats import fisher_exact

    table = [[members.correct, members.n - members.correct], [nonmembers.correct, nonmembers.n - nonmembers.correct]]
    return float(fisher_exact(table, alternative=alternative)[1])


@dataclass(frozen=True)
class MembersFit:
    """The two tests of the warning rule (module docstring) and their outcome."""

    p_below: float  # one-sided Fisher p of "members' accuracy < non-members'"
    p_above: float  # one-sided Fisher p of "members' accuracy > non-members'"
    baseline: float
    level: float  # the trained-on level L = (1 + baseline) / 2
    members_upper: float  # members' one-sided 1 − α/2 upper bound
    warning: str | None


def members_fit(members: Accuracy, nonmembers: Accuracy, baseline: float) -> MembersFit:
    """Apply the warning rule of the module docstring to the two accuracies (at ``members.confidence``)."""
    half_alpha = (1.0 - members.confidence) / 2
    p_below = _fisher_p(members, nonmembers, "less")
    p_above = _fisher_p(members, nonmembers, "greater")
    level = (1.0 + baseline) / 2
    upper = members.ci[1]
    sets = (
        f"its members ({members.label()}) than on its non-members ({nonmembers.label()}; "
        f"{members.confidence * 100:.4g}% Clopper-Pearson intervals"
    )
    causes = (
        "the members may not be the data the model was trained on, or are preprocessed differently "
        "(scaling, feature order, label encoding)"
    )
    warning = None
    if p_below < half_alpha:
        warning = (
            f"{WARNING_PREFIX}: the model is less accurate on {sets}; one-sided Fisher exact p = {p_below:.2g}); "
            f"models are almost never worse on their own training data, so {causes}, and the membership "
            "results do not measure its leakage"
        )
    elif p_above >= half_alpha and upper < level:
        warning = (
            f"{WARNING_PREFIX}: the model is no more accurate on {sets}; one-sided Fisher exact p = {p_above:.2g}) "
            f"and far below what models get on their training data (upper bound {upper:.3f} < {level:.3f}, halfway "
            f"between guessing the most common label, {baseline:.3f}, and perfect): {causes}, so a pass means "
            "little; if the model is this weak by design, ignore this"
        )
    return MembersFit(p_below, p_above, baseline, level, upper, warning)


def recipe_warning(target: Target, recipe: Recipe | None) -> str | None:
    """A warning when a non-torch target (scikit-learn) is given a recipe, which always trains torch models."""
    if recipe is None or (target.module is not None and type(recipe).__name__ != "SklearnRecipe"):
        return None
    from privgate.inputs.targets.boosted import BoostedModel
    from privgate.inputs.targets.onnxfile import OnnxModel
    from privgate.inputs.targets.sklearn import SklearnModel
    from privgate.sklearn_recipe import SklearnRecipe
    from privgate.tree_recipe import TreeRecipe

    if isinstance(recipe, SklearnRecipe):  # a scikit-learn estimator trains like a scikit-learn target only
        if isinstance(target.model, SklearnModel):
            return None
        return (
            f"recipe mismatch: recipe '{recipe.name}' fits scikit-learn estimators but the target is {target.fmt}, so "
            "reference models are not trained like the target and their results may over- or under-state its leakage"
        )

    if isinstance(target.model, OnnxModel) and not isinstance(recipe, TreeRecipe):
        return None  # an ONNX graph is typically a torch export: its recipe trains the same network
    if isinstance(recipe, TreeRecipe):
        if isinstance(target.model, BoostedModel):
            return None  # privgate.training.trees.check_matches refuses a recipe of another library or objective
        return (
            f"recipe mismatch: tree recipe '{recipe.name}' trains {recipe.library} models but the target is "
            f"{target.fmt}, so reference models are not trained like the target and their results may over- or "
            "under-state its leakage"
        )
    return (
        f"recipe mismatch: the target is a {type(target.model).__name__} (not a torch model) but recipe "
        f"'{recipe.name}' "
        "trains torch models, so reference models (shadow, lira, rmia) are not trained like the target and their "
        "results compare it with a different kind of model: they may over- or under-state its leakage"
    )


@dataclass
class Sanity:
    """What :func:`inspect_target` found; :meth:`describe` goes into the report's ``target``."""

    members: Accuracy
    nonmembers: Accuracy
    classes: int
    fit: MembersFit
    outputs: str | None
    probe_rows: int
    outputs_note: str | None = None
    warnings: list[str] = field(default_factory=list)
    trivial: dict[str, Any] | None = None  # the non-members' majority and prior baselines (privgate.stats.trivial)

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "accuracy": {
                "members": self.members.as_dict(),
                "nonmembers": self.nonmembers.as_dict(),
                "confidence": self.members.confidence,
                "interval": "Clopper-Pearson",
                "classes": self.classes,
                "baseline": self.fit.baseline,
                "trained_level": self.fit.level,
                "p_members_below": self.fit.p_below,
                "p_members_above": self.fit.p_above,
                **({"trivial": self.trivial} if self.trivial else {}),
            }
        }
        if self.outputs is not None:
            out["outputs"] = {"kind": self.outputs, "probe_rows": self.probe_rows, "note": self.outputs_note}
        return out


def probe(data: AuditData, rows: int = PROBE_ROWS) -> np.ndarray:
    """The rows the output kind is decided on: the first ``rows / 2`` members and non-members."""
    half = max(1, rows // 2)
    return np.concatenate([data.members.x[:half], data.nonmembers.x[:half]])


def inspect_target(target: Target, data: AuditData, recipe: Recipe | None, confidence: float) -> Sanity:
    """Fix how the target's outputs are read, measure its accuracy on both audit sets, and warn.

    Must run before any attack: it settles :attr:`Target.outputs`.
    """
    x = probe(data)
    note, hint = target.detect_outputs(x)
    members = accuracy_on(target, data.members, confidence)
    nonmembers = accuracy_on(target, data.nonmembers, confidence)
    classes = int(target.predict_proba(data.members.x[:1]).shape[1])
    fit = members_fit(
        members, nonmembers, baseline_accuracy(np.concatenate([data.members.y, data.nonmembers.y]), classes)
    )
    # a model privgate trained itself on these members (DP-SGD remediation records "dp") needs no doubt about them
    doubt = None if "dp" in target.extra else fit.warning
    trivial = trivial_accuracy(data.members.y, data.nonmembers.y)
    shown = trivial.as_dict(target.class_names)
    constant = None
    if not trivial.beaten_by(nonmembers.correct):
        constant = (
            f"{WARNING_PREFIX}: the model is no more accurate on its non-members ({nonmembers.label()}) than always "
            f"predicting the members' most common label {str(shown['label'])!r} ({trivial.majority:.3f} on the same "
            f"rows; guessing at the members' label frequencies scores {trivial.prior:.3f}): a constant model would "
            "serve as well, and leak nothing"
        )
    warnings = [w for w in (doubt, constant, hint and f"{WARNING_PREFIX}: {hint}", recipe_warning(target, recipe)) if w]
    kind = target.outputs if target.module is not None else None
    return Sanity(members, nonmembers, classes, fit, kind, len(x), note, warnings, shown)


__all__ = [
    "Accuracy",
    "MembersFit",
    "Sanity",
    "WARNING_PREFIX",
    "accuracy_on",
    "baseline_accuracy",
    "inspect_target",
    "members_fit",
    "probe",
    "recipe_warning",
]
