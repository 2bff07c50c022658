"""What a policy's capacity ladder (``remediation.capacity``) may set: an allow-list of regularisation settings.

A policy is data, and ``set_params`` is a door into the model: a Pipeline's ``memory`` points joblib's cache
(pickles, loaded back) at a folder of the policy's choosing, ``n_estimators: 10**12`` never ends. So a step
may set only the settings named here, by the last ``__`` segment of its key, each to a number in its range;
booleans, strings, paths, ``None``, NaN and ±inf are refused, and so are more steps than :data:`MAX_STEPS`.
The table and its reasons: docs/sklearn.md (Hardening: the pipeline's own capacity).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from privgate.inputs.suggest import close_match

#: The most steps a policy's ladder may have: each candidate is audited at confidence 1 − (1 − c)/L (Bonferroni),
#: so a long ladder weakens every audit as it multiplies the work; privgate's own ladders have at most 9 steps.
MAX_STEPS = 32
BIG = 10**7  # the largest row count, leaf size or node count a step may name


@dataclass(frozen=True)
class Setting:
    """The numbers one setting accepts: whole numbers in ``ints``, and/or real numbers in ``reals``."""

    meaning: str
    ints: tuple[int, int] | None = None  # inclusive
    reals: tuple[float, float, bool] | None = None  # low (exclusive when the flag is False), high (inclusive)
    costs: bool = False  # more of it costs more: a step may lower it from the model's own value, never raise it

    def accepts(self) -> str:
        """What it accepts, as words."""
        parts = [f"a whole number from {self.ints[0]:,} to {self.ints[1]:,}"] if self.ints else []
        if self.reals:
            lo, hi, closed = self.reals
            parts.append(f"a number {'from' if closed else 'above'} {lo:g} up to {hi:g}")
        return " or ".join(parts)


_FRACTION = (0.0, 1.0, False)
_NON_NEGATIVE = (0.0, 1e12, True)
_POSITIVE = (0.0, 1e12, False)

#: Settings by the last ``__`` segment of their key: scikit-learn's trees, forests, boosting, linear models, SVMs,
#: neighbours and MLPs, XGBoost's and LightGBM's classifiers.
SETTINGS: dict[str, Setting] = {
    "min_samples_leaf": Setting("rows in every leaf, or their fraction", (1, BIG), (0.0, 0.5, False)),
    "min_samples_split": Setting("rows a node needs to split, or their fraction", (2, BIG), _FRACTION),
    "min_weight_fraction_leaf": Setting("weight fraction in every leaf", None, (0.0, 0.5, True)),
    "max_depth": Setting("depth of a tree", (1, 10_000)),
    "max_leaf_nodes": Setting("leaves of a tree", (2, BIG)),
    "min_impurity_decrease": Setting("impurity a split must remove", None, _NON_NEGATIVE),
    "ccp_alpha": Setting("cost-complexity pruning", None, _NON_NEGATIVE),
    "max_features": Setting("features per split, or their fraction", (1, BIG), _FRACTION),
    "max_samples": Setting("rows per tree's bootstrap, or their fraction", (1, BIG), _FRACTION),
    "n_estimators": Setting("trees or boosting rounds", (1, 10_000), costs=True),
    "max_iter": Setting("iterations or boosting rounds", (1, 100_000), costs=True),
    "learning_rate": Setting("boosting's shrinkage", None, (0.0, 1.0, False)),
    "l2_regularization": Setting("HistGradientBoosting's L2 penalty", None, _NON_NEGATIVE),
    "C": Setting("inverse penalty strength", None, _POSITIVE),
    "alpha": Setting("penalty strength", None, _NON_NEGATIVE),
    "l1_ratio": Setting("the penalty's L1 share", None, (0.0, 1.0, True)),
    "n_neighbors": Setting("neighbours that vote", (1, BIG)),
    "min_child_weight": Setting("XGBoost's hessian weight per leaf", None, _NON_NEGATIVE),
    "min_child_samples": Setting("LightGBM's rows per leaf", (1, BIG)),
    "num_leaves": Setting("LightGBM's leaves per tree", (2, 131_072)),
    "reg_alpha": Setting("XGBoost's / LightGBM's L1 penalty", None, _NON_NEGATIVE),
    "reg_lambda": Setting("XGBoost's / LightGBM's L2 penalty", None, _NON_NEGATIVE),
    "gamma": Setting("XGBoost's loss reduction a split must reach", None, _NON_NEGATIVE),
    "min_split_gain": Setting("LightGBM's gain a split must reach", None, _NON_NEGATIVE),
    "subsample": Setting("fraction of rows per boosting round", None, (0.0, 1.0, False)),
    "colsample_bytree": Setting("fraction of features per tree", None, (0.0, 1.0, False)),
}


def value_problem(key: str, value: Any) -> str | None:
    """Why ``value`` cannot be a step's ``key`` (a sentence's tail), or None when it may."""
    prefix, _, name = key.rpartition("__")
    rule = SETTINGS.get(name)
    if rule is None:
        close = close_match(name, SETTINGS)
        hint = f" (did you mean '{prefix + '__' if prefix else ''}{close}'?)" if close else ""
        return (
            f"{key!r} is not a setting a capacity ladder may vary{hint}: a step sets only regularisation settings of "
            "known "
            f"meaning ({', '.join(sorted(SETTINGS, key=str.lower))}), never a Pipeline's memory or steps, callables, "
            "paths, random_state, n_jobs, verbose or warm_start"
        )
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
        return f"{key!r} must be a number ({rule.accepts()}), got {shown} ({type(value).__name__})"
    if isinstance(value, int) and rule.ints and rule.ints[0] <= value <= rule.ints[1]:
        return None
    real = float(value) if isinstance(value, float) or abs(value) < 2**53 else math.inf
    if rule.reals and math.isfinite(real):
        lo, hi, closed = rule.reals
        if (lo <= real if closed else lo < real) and real <= hi:
            return None
    shown = repr(value) if isinstance(value, float) else (f"{value:,}" if abs(value) < 10**30 else "a huge number")
    return f"{key!r} ({rule.meaning}) must be {rule.accepts()}, got {shown}"


def ladder_problem(steps: Any) -> str | None:
    """Why ``steps`` cannot be a policy's capacity ladder (the field's sentence), or None."""
    if not isinstance(steps, list):
        return "capacity must be a list of steps, each a mapping of settings to numbers"
    if not steps:
        return "capacity needs at least one step, and every step at least one setting"
    if len(steps) > MAX_STEPS:
        return (
            f"capacity has {len(steps):,} steps; privgate walks at most {MAX_STEPS} (each step is one fit and one "
            "audit like the original model's, and each audit's confidence is divided among the steps)"
        )
    for i, step in enumerate(steps):
        if not isinstance(step, dict) or not step:
            return f"capacity[{i}] must be a mapping of at least one setting to a number"
        for key, value in step.items():
            if not isinstance(key, str):
                return f"capacity[{i}]: the setting {key!r} must be a name (a set_params key)"
            problem = value_problem(key, value)
            if problem:
                return f"capacity[{i}] (step {i + 1}): {problem}"
    return None


__all__ = ["MAX_STEPS", "SETTINGS", "Setting", "ladder_problem", "value_problem"]
