"""How much audit data decides a policy's checks: per inconclusive check (the gate), and before an audit (plan).

The arithmetic is :func:`privgate.stats.power.needed`; this module feeds it a
check as the gate decides it — the metric, ``max``, the interval's confidence
with the policy's Bonferroni split over its checks and its ``best`` candidates
(:mod:`privgate.decision`), the audit's ratio of members to non-members — and
either an observed estimate (:func:`for_estimate`) or an assumed value
(:func:`plan`: by default a model that leaks nothing, the best case a model
can be; ``share`` moves it towards the threshold).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from privgate.stats.power import POWER, SIZED, Needed, Rates, assumed_value, measurable_sizes, needed, null_value

DEFAULT_DELTA = 1e-5  # privgate.decision's, without importing the gate's numpy stack


def _rates(details: Any) -> Rates | None:
    t, f = details.get("tpr"), details.get("fpr")
    if isinstance(t, (int, float)) and isinstance(f, (int, float)) and math.isfinite(t) and math.isfinite(f):
        return Rates(float(t), float(f))
    return None


def for_estimate(check: Any, est: Any) -> Needed:
    """The members and non-members that would decide ``check`` on an attack like the one behind ``est``.

    ``est`` is the deciding :class:`~privgate.stats.Estimate` at its Bonferroni-split confidence. A value
    the data could not measure is sized as a model that leaks nothing would be (the fewest rows any model
    needs); an attack whose scores cannot be placed at the check's FPR gets no size (more rows do not help).
    """
    metric = check.metric.value
    if metric not in SIZED:  # nothing measured: the reason already says what would decide it (e.g. longer records)
        found = needed(metric, math.nan, check.max, est.confidence)
        measured = est.value is not None and math.isfinite(est.value)
        return found if measured else Needed(None, None, "")
    if not est.measurable:
        return Needed(None, None, f"no audit size helps: {est.reason}")
    n1, n0 = int(est.n_members or 0), int(est.n_nonmembers or 0)
    ratio = n1 / n0 if n1 > 0 and n0 > 0 else 1.0
    observed = est.resolvable and est.value is not None and math.isfinite(est.value)
    value = float(est.value) if observed else null_value(metric, check.fpr)
    details = dict(est.details or {})
    auc_var = None
    se = details.get("se")
    if metric == "auc" and observed and isinstance(se, float) and se > 0 and n0 > 0:
        auc_var = lambda m, n: se * se * n0 / n  # noqa: E731 - the observed DeLong variance, scaled by the size
    found = needed(
        metric,
        value,
        check.max,
        est.confidence,
        ratio=ratio,
        fpr=check.fpr,
        delta=DEFAULT_DELTA if check.delta is None else check.delta,
        rates=_rates(details) if observed else None,
        auc_var=auc_var,
    )
    if not observed and found.decidable:
        return Needed(found.members, found.nonmembers, f"{found.sentence} (a model that leaks nothing: the fewest "
                                                       "rows any model needs)")  # fmt: skip
    null = null_value(metric, check.fpr)
    if metric != "epsilon_lb" and null is not None and null < check.max and value != null:
        best = needed(metric, null, check.max, est.confidence, ratio=ratio, fpr=check.fpr)
        if best.decidable:  # what the data would need to pass the best model there can be
            tail = f"; a model that leaks nothing would need about {best.members:,} and {best.nonmembers:,}"
            return Needed(found.members, found.nonmembers, found.sentence + tail)
    return found


def inconclusive_reason(reason: str, found: Needed) -> str:
    """An inconclusive check's reason with the audit size that would decide it in place of "add audit data"."""
    base = reason.replace(" (add audit data)", "").replace("; add audit data", "")
    return f"{base}; {found.sentence}" if found.sentence else base


# --------------------------------------------------------------------------- before an audit


@dataclass(frozen=True)
class PlanRow:
    """One check of a plan: what it bounds, at which confidence, and the audit that decides it."""

    id: str
    metric: str
    threshold: float
    fpr: float | None
    confidence: float
    attacks: int
    assumed: float | None
    needed: Needed
    members: int
    nonmembers: int

    @property
    def can_decide(self) -> bool | None:
        """Whether the audit's rows decide the check; None when privgate does not size it (its metric, a
        federated check)."""
        if not self.needed.decidable and (self.assumed is None or self.metric not in SIZED):
            return None
        return self.needed.covers(self.members, self.nonmembers)

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "metric": self.metric,
            "threshold": self.threshold,
            "fpr": self.fpr,
            "confidence": self.confidence,
            "attacks": self.attacks,
            "assumed_value": self.assumed,
            "needed": self.needed.as_dict(),
            "available": {"members": self.members, "nonmembers": self.nonmembers},
            "can_decide": self.can_decide,
            "reason": self.needed.sentence,
        }


def _candidates(check: Any, attacks: frozenset[str]) -> int:
    """How many attacks a ``best`` check splits its share over: the level's, less those that only look at data."""
    from privgate.attacks.catalogue import CATALOGUE

    if check.attack != "best":
        return 1
    entries = [CATALOGUE.get(n) for n in attacks]
    return max(1, sum(1 for e in entries if e is None or not e.diagnostic))


def plan(policy: Any, members: int, nonmembers: int, *, share: float = 0.0) -> list[PlanRow]:
    """Per check of ``policy`` (its extended policies' first, as the report lists them): the audit that decides it.

    Args:
        policy: the loaded policy.
        members, nonmembers: the rows the audit has.
        share: the assumed value, as a share of the way from leaking nothing (0) to the threshold (1).
    """
    rows: list[PlanRow] = []
    for p in reversed(policy.chain()):
        prefix = "" if p is policy else f"{p.name}:"
        k = max(1, len(p.checks))
        attacks = frozenset(p.attacks_to_run())
        for c in p.checks:
            m = _candidates(c, attacks)
            conf = 1.0 - p.own_alpha / (k * m)
            value = assumed_value(c.metric.value, c.max, share, c.fpr)
            if p.decision.value == "point" and value is not None:  # no interval to clear: measured is decided
                found = measurable_sizes(c.metric.value, c.fpr)
            elif c.federated is not None:
                value, found = None, Needed(None, None, "a federated check: privgate fl audit decides it")
            elif value is None:
                found = needed(c.metric.value, math.nan, c.max, conf)
            else:
                delta = DEFAULT_DELTA if c.delta is None else c.delta
                ratio = members / nonmembers if members > 0 and nonmembers > 0 else 1.0
                found = needed(c.metric.value, value, c.max, conf, ratio=ratio, fpr=c.fpr, delta=delta)
            row = PlanRow(prefix + c.id, c.metric.value, c.max, c.fpr, conf, m, value, found, members, nonmembers)
            rows.append(row)
    return rows


@dataclass(frozen=True)
class Planned:
    """A plan: the rows of every check and the audit it was made for; exit 3 when the data cannot decide one."""

    policy: str
    members: int
    nonmembers: int
    share: float
    rows: list[PlanRow]

    @property
    def exit_code(self) -> int:
        return 3 if any(r.can_decide is False for r in self.rows) else 0

    @property
    def assumption(self) -> str:
        if self.share == 0:
            return "a model that leaks nothing (accuracy 0.5, AUC 0.5, TPR = FPR, ε 0): the fewest rows any model needs"
        return f"each metric {self.share:g} of the way from leaking nothing to its threshold"

    @property
    def summary(self) -> str:
        short = [r.id for r in self.rows if r.can_decide is False]
        head = f"{self.members:,} members and {self.nonmembers:,} non-members"
        if not short:
            return f"{head} can decide every sized check of policy '{self.policy}'"
        return f"{head} cannot decide {len(short)} check(s) of policy '{self.policy}': {', '.join(short)}"

    def as_dict(self) -> dict[str, Any]:
        return {
            "policy": self.policy,
            "available": {"members": self.members, "nonmembers": self.nonmembers},
            "assumption": self.assumption,
            "power": POWER,
            "checks": [r.as_dict() for r in self.rows],
            "summary": self.summary,
            "exit_code": self.exit_code,
        }


__all__ = ["PlanRow", "Planned", "for_estimate", "inconclusive_reason", "plan"]
