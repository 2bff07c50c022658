"""What a report knows about the sampling error of each of its numbers, for ``privgate diff``.

Each compared number becomes an estimate with one-sided bounds at any level (:mod:`privgate.stats.difference`)
from the strongest evidence kept: DeLong's standard error for an AUC, the evaluation counts for balanced
accuracy, advantage and ε, else the reported interval itself (TPR at a fixed FPR, similarity, attribute
advantage). :class:`Side` is what a diff shows of one report's number.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from privgate.report.model import AttackSummary, CheckResult
from privgate.report.numbers import is_finite_number
from privgate.stats import difference as dstats


@dataclass(frozen=True)
class Side:
    """One report's number for a compared metric."""

    value: float | None
    ci: tuple[float | None, float | None] | None
    confidence: float | None
    attack: str | None = None
    status: str | None = None  # the check's status in that report
    lower_bound: float | None = None  # epsilon_lb: the check's proven lower bound (value is ε̂)
    n: tuple[int, int] | None = None  # evaluation members / non-members


def _counts(d: Mapping[str, Any]) -> tuple[int, int, int, int] | None:
    keys = ("tp", "evaluation_members", "fp", "evaluation_nonmembers")
    if (
        not all(isinstance(d.get(k), int) for k in keys)
        or d["evaluation_members"] <= 0
        or d["evaluation_nonmembers"] <= 0
    ):
        return None
    return d["tp"], d["evaluation_members"], d["fp"], d["evaluation_nonmembers"]


def from_interval(value: float, ci: Any, confidence: float | None) -> tuple[dstats.Bounded | None, str, str | None]:
    if not (ci and len(ci) == 2 and all(map(is_finite_number, (value, ci[0], ci[1], confidence)))):
        return None, "", "no interval"
    est = dstats.Interval(float(value), float(min(ci[0], value)), float(max(ci[1], value)), float(confidence))
    if est.degenerate:
        return None, "", "its interval has no width, so its sampling error is unknown"
    return est, "MOVER from the reported intervals", None


def check_estimate(c: CheckResult) -> tuple[dstats.Bounded | None, str, str | None]:
    """(estimate with bounds at any level, the method's name, why there is none) for one check."""
    if c.value is None or not is_finite_number(c.value):
        return None, "", "no value" + (f" ({c.reason})" if c.reason else "")
    d = c.details or {}
    if c.metric == "auc" and is_finite_number(d.get("se")) and d["se"] > 0 and 0 < c.value < 1:
        return dstats.Normal(float(c.value), float(d["se"])), "z-test of two DeLong AUCs", None
    counts = _counts(d)
    if c.metric in ("accuracy", "advantage") and counts:
        tp, n1, fp, n0 = counts
        coef, const = (0.5, 0.5) if c.metric == "accuracy" else (1.0, 0.0)
        return dstats.Rates(tp, n1, fp, n0, coef, const), "MOVER with Clopper-Pearson TPR/FPR bounds", None
    if c.metric == "exposure" and d.get("exact") is True and c.ci and c.ci[0] == c.ci[1] == c.value:
        return dstats.Normal(float(c.value), 0.0), "exact exposure (every candidate ranked: no sampling error)", None
    if c.metric == "epsilon_lb" and counts:
        tp, n1, fp, n0 = counts
        delta = d.get("delta", c.delta if c.delta is not None else 1e-5)
        return dstats.Epsilon(tp, n1, fp, n0, float(delta)), "MOVER on ε̂ from Wilson TPR/FPR bounds", None
    return from_interval(c.value, c.ci, c.confidence)


def _logit(p: float) -> float:
    return math.log(p / (1 - p))


def attack_auc_estimate(a: AttackSummary, confidence: float) -> tuple[dstats.Bounded | None, str, str | None]:
    """The AUC of an attack summary, its DeLong standard error recovered from its logit-scale interval.

    :func:`privgate.stats.auc` reports logit(Â) ± z·se/(Â(1 − Â)); so se = (logit(hi) − logit(lo))/(2z) · Â(1 − Â).
    At Â ∈ {0, 1} (or a collapsed variance) the interval is an exact binomial bound, used as it is.
    """
    if a.status != "ran" or a.auc is None or not a.auc_ci:
        return None, "", a.reason or f"the attack {a.status}"
    lo, hi = a.auc_ci
    if all(map(is_finite_number, (a.auc, lo, hi))) and 0 < lo < a.auc < hi < 1:
        z = dstats.z_of((1 - confidence) / 2)
        se = (_logit(hi) - _logit(lo)) / (2 * z) * a.auc * (1 - a.auc)
        return dstats.Normal(float(a.auc), se), "z-test of two DeLong AUCs", None
    return from_interval(a.auc, a.auc_ci, confidence)


def check_side(c: CheckResult, est: dstats.Bounded | None) -> Side:
    ci = (c.ci[0], c.ci[1]) if c.ci else None
    n = (c.n_members, c.n_nonmembers) if c.n_members or c.n_nonmembers else None
    if c.metric == "epsilon_lb" and isinstance(est, dstats.Epsilon):
        return Side(est.value, (c.value, est.value), c.confidence, c.chosen_attack or c.attack, c.status, c.value, n)
    return Side(c.value, ci, c.confidence, c.chosen_attack or c.attack, c.status, None, n)


def attack_side(a: AttackSummary, confidence: float) -> Side:
    ci = (a.auc_ci[0], a.auc_ci[1]) if a.auc_ci else None
    return Side(
        a.auc,
        ci,
        confidence if a.auc is not None else None,
        a.name,
        a.status,
        None,
        (a.n_members, a.n_nonmembers) if a.status == "ran" else None,
    )


__all__ = ["Side", "attack_auc_estimate", "attack_side", "check_estimate", "check_side", "from_interval"]
