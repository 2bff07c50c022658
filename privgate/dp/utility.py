"""Utility, the floor DP remediation must respect: the model's accuracy on held-out data, with its interval.

Utility is measured on the audit's **population** when it has one (rows
neither the target nor any DP candidate trains on, and that no attack
calibrates a threshold on), else on its **non-members** (never trained on; the
attacks only read them). Accuracy comes with a Clopper-Pearson interval
(Clopper & Pearson 1934); the floor is decided on the point estimate, and is
never below one row more than always predicting the most common label gets right.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from privgate import stats
from privgate.inputs.data import AuditData
from privgate.inputs.target import Target
from privgate.policy import Utility
from privgate.stats.trivial import Trivial


@dataclass(frozen=True)
class UtilityData:
    """The held-out rows utility is measured on, and where they come from."""

    x: np.ndarray
    y: np.ndarray
    source: str


def utility_data(data: AuditData) -> UtilityData:
    """The population when there is one, else the non-members (see the module docstring)."""
    if data.population is not None:
        return UtilityData(
            data.population.x, data.population.y, f"population ({len(data.population)} rows, {data.population.source})"
        )
    return UtilityData(
        data.nonmembers.x,
        data.nonmembers.y,
        f"non-members ({len(data.nonmembers)} rows, {data.nonmembers.source}; no population given)",
    )


def measure_utility(model: Any, held_out: UtilityData, confidence: float) -> tuple[float, list[float]]:
    """Accuracy on the held-out rows with its Clopper-Pearson interval (Clopper & Pearson 1934)."""
    target = model if isinstance(model, Target) else Target(model, fmt="module")
    correct = int(np.sum(target.predict(held_out.x) == held_out.y))
    n = len(held_out.y)
    lo, hi = stats.clopper_pearson(correct, n, confidence)
    return correct / n, [lo, hi]


def utility_floor(
    policy: Utility | None, original: float, trivial: Trivial | None = None, label: str = ""
) -> tuple[float | None, str]:
    """The floor utility must stay at or above, and the rule that set it.

    With ``trivial`` (the held-out rows' baselines, :mod:`privgate.stats.trivial`), the floor is at least one row
    more than always predicting the training labels' most common value (``label``, as the user knows it) gets
    right: a model no better than a constant one is never handed out, whatever the policy's floor.
    """
    floors: list[tuple[float, str]] = []
    if policy is not None and policy.min is not None:
        floors.append((policy.min, f"min {policy.min:g}"))
    if policy is not None and policy.max_drop is not None:
        if policy.relative:
            floors.append(
                (
                    original * (1 - policy.max_drop),
                    f"at most {policy.max_drop:.0%} below the original {original:.4f} (relative)",
                )
            )
        else:
            floors.append(
                (original - policy.max_drop, f"at most {policy.max_drop:g} below the original {original:.4f}")
            )
    if trivial is not None and trivial.n:
        floors.append(
            (
                trivial.better_floor,
                f"better than always predicting the most common label{f' {label!r}' if label else ''} "
                f"({trivial.majority:.4f} on these rows)",
            )
        )
    if not floors:
        return None, "no utility floor in the policy"
    value, rule = max(floors)
    return max(0.0, value), rule + (
        " (the stricter of " + " and ".join(r for _, r in floors) + ")" if len(floors) > 1 else ""
    )


__all__ = ["UtilityData", "measure_utility", "utility_data", "utility_floor"]
