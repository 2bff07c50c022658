"""The capacity ladder of a scikit-learn model: its own regularisation settings, from the fitted value upwards.

DP-SGD cannot retrain a random forest; what a leaking scikit-learn model can be given instead is less capacity
to memorise single rows (Yeom et al. 2018, arXiv 1709.01604; for trees, Preen & Smith 2025, arXiv 2502.09396):
larger leaves, a stronger penalty, more neighbours. :func:`ladder` lists ``set_params`` steps, least to most
regularised, each beyond the model's own setting, by the final estimator's family; a policy may name its own
(``remediation.capacity``, checked by :mod:`privgate.policy.capacity_rules`). A walk estimated above
:data:`MAX_LADDER_SECONDS` is refused (:func:`cost_problem`). The ladders per family: ``docs/sklearn.md``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from privgate.errors import PolicyError
from privgate.inputs.suggest import did_you_mean
from privgate.policy.capacity_rules import SETTINGS
from privgate.report.numbers import duration
from privgate.report.remediation_section import setting_text

#: Leaf sizes (rows) of the tree ladders; steps above a quarter of the training rows are dropped.
LEAVES = (2, 4, 8, 16, 32, 64, 128, 256, 512)
#: Steps of the multiplicative ladders (C down, alpha up): five decades.
DECADES = 5
#: The longest a ladder's walk may be estimated to take: a GitHub-hosted runner ends a job after six hours.
MAX_LADDER_SECONDS = 6 * 3600.0


@dataclass(frozen=True)
class Ladder:
    """The steps to try (``set_params`` dicts, least regularised first), and where they came from."""

    steps: list[dict[str, Any]]
    source: str
    estimator: str  # the final estimator's class name
    fitted: dict[str, Any]  # the model's own values of the parameters the ladder varies


def final_step(estimator: Any) -> tuple[Any, str]:
    """The estimator that predicts (a Pipeline's last step, recursively) and its ``set_params`` prefix."""
    prefix = ""
    while isinstance(getattr(estimator, "steps", None), list) and estimator.steps:
        name, last = estimator.steps[-1]
        prefix, estimator = f"{prefix}{name}__", last
    return estimator, prefix


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _leaves(params: dict[str, Any], key: str, default: int, cap: int) -> list[dict[str, Any]]:
    """Leaf sizes above the model's own (a fraction is a size of its own kind: the ladder starts past 1)."""
    own = _int(params.get(key)) or default
    return [{key: n} for n in LEAVES if own < n <= cap]


def _decades(params: dict[str, Any], key: str, default: float, up: bool) -> list[dict[str, Any]]:
    own = params.get(key)
    own = float(own) if isinstance(own, (int, float)) and not isinstance(own, bool) and own > 0 else default
    return [{key: float(f"{own * (10.0**k if up else 10.0**-k):.6g}")} for k in range(1, DECADES + 1)]


def family_ladder(final: Any, n_train: int) -> list[dict[str, Any]] | None:
    """The default steps for ``final`` (unprefixed ``set_params`` keys), or ``None`` for an unknown family."""
    name = type(final).__name__
    params = final.get_params(deep=False)
    cap = max(2, n_train // 4)
    if name in ("DecisionTreeClassifier", "RandomForestClassifier", "ExtraTreesClassifier", "ExtraTreeClassifier"):
        return _leaves(params, "min_samples_leaf", 1, cap)
    if name == "GradientBoostingClassifier":
        return _leaves(params, "min_samples_leaf", 1, cap)
    if name == "HistGradientBoostingClassifier":
        leaf, nodes = _int(params.get("min_samples_leaf")) or 20, _int(params.get("max_leaf_nodes")) or 31
        steps: list[dict[str, Any]] = []
        for k in range(1, 5):  # leaves larger (up to the cap) and fewer together
            step = {"min_samples_leaf": min(leaf * 2**k, max(cap, leaf)), "max_leaf_nodes": max(2, nodes // 2**k)}
            if not steps or step != steps[-1]:
                steps.append(step)
        return steps
    if name == "XGBClassifier":
        own = params.get("min_child_weight")
        own = float(own) if isinstance(own, (int, float)) and own else 1.0
        return [{"min_child_weight": float(n)} for n in LEAVES if own < n <= cap]
    if name == "LGBMClassifier":
        return _leaves(params, "min_child_samples", 20, cap)
    if name in ("LogisticRegression", "LinearSVC", "SVC", "NuSVC") and "C" in params:
        return _decades(params, "C", 1.0, up=False)
    if name in ("SGDClassifier", "RidgeClassifier", "MLPClassifier", "Perceptron") and "alpha" in params:
        return _decades(params, "alpha", 1e-4, up=True)
    if name == "KNeighborsClassifier":
        own = _int(params.get("n_neighbors")) or 5
        steps, k = [], own * 2
        while k <= cap and len(steps) < 6:
            steps.append({"n_neighbors": k})
            k *= 2
        return steps
    return None


def ladder(estimator: Any, n_train: int, given: list[dict[str, Any]] | None, policy_name: str) -> Ladder:
    """The steps the search walks: the policy's (``remediation.capacity``), else the family's default.

    Raises:
        PolicyError: a step of the policy's names a parameter the model does not have (with the closest name).
    """
    final, prefix = final_step(estimator)
    own = estimator.get_params(deep=True)
    name = type(final).__name__
    if given:
        for i, step in enumerate(given):
            for key, value in step.items():
                if key not in own:
                    raise PolicyError(
                        f"policy '{policy_name}': remediation.capacity[{i}]: {key!r} is not a parameter of the "
                        f"model ({name}){did_you_mean(key, [str(k) for k in own])}; name them as set_params does "
                        f"(a Pipeline's step, two underscores, the parameter: {prefix or 'step__'}min_samples_leaf)."
                    )
                rule, mine = SETTINGS.get(key.rsplit("__", 1)[-1]), _int(own[key])
                if rule is not None and rule.costs and mine is not None and value > mine:
                    raise PolicyError(
                        f"policy '{policy_name}': remediation.capacity[{i}] (step {i + 1}): {key}={value:,} is "
                        f"above the model's own {mine:,}; a capacity ladder may lower {rule.meaning}, never raise "
                        f"them (each of the step's fits would cost {value / mine:,.3g} times the model's own)."
                    )
        steps = [dict(s) for s in given]
        source = f"the policy (remediation.capacity, {len(steps)} step(s))"
    else:
        found = family_ladder(final, n_train)
        if found is None:
            raise PolicyError(
                f"policy '{policy_name}': privgate knows no capacity ladder for a {name}; name the settings to "
                f"try in the policy (remediation.capacity: a list of set_params steps, e.g. "
                f"[{{{prefix}max_depth: 8}}, {{{prefix}max_depth: 4}}])."
            )
        steps = [{f"{prefix}{k}": v for k, v in s.items()} for s in found]
        source = f"privgate's ladder for {name}"
    keys = list(dict.fromkeys(k for s in steps for k in s))
    return Ladder(steps, source, name, {k: own.get(k) for k in keys})


def walked(steps: int, strategy: str) -> int:
    """The most candidates a search over ``steps`` steps fits and audits (``bisect``: one per halving, and one)."""
    return steps if strategy == "ladder" else min(steps, math.ceil(math.log2(steps + 1)) + 1)


def cost_problem(steps: int, strategy: str, audit_seconds: float, limit: float = MAX_LADDER_SECONDS) -> str | None:
    """Why walking ``steps`` steps is refused (a sentence with its estimated time), or None.

    Each candidate is one fit and one audit like the original model's (its settings may not cost more than the
    model's own), so ``audit_seconds`` — what the original's audit took — times the candidates is the estimate.
    """
    n = walked(steps, strategy)
    estimate = n * max(audit_seconds, 0.0)
    if estimate <= limit:
        return None
    other = "" if strategy == "bisect" else f", or strategy: bisect ({walked(steps, 'bisect')} candidates)"
    return (
        f"remediation.capacity: the ladder's {steps} step(s) are up to {n} fit(s) and audit(s) like the original "
        f"model's, which took {duration(audit_seconds)}: about {duration(estimate)}; privgate walks a ladder "
        f"estimated at up to {duration(limit)}: name fewer steps in the policy{other}."
    )


__all__ = [
    "DECADES",
    "LEAVES",
    "MAX_LADDER_SECONDS",
    "Ladder",
    "cost_problem",
    "family_ladder",
    "final_step",
    "ladder",
    "setting_text",
    "walked",
]
