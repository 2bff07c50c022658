"""Decision rules: turn one check's estimates into pass / fail / inconclusive.

A policy's ``confidence`` c is the probability that every decision in its report is right: its checks and
their candidate attacks share α = 1 − c (Bonferroni 1936; Dunn 1961). ``decision: upper_bound`` (default)
passes only on an upper bound within ``max`` and fails only on a lower bound above it, else inconclusive;
``decision: point`` compares the point estimate (no error control). ``epsilon_lb`` is itself a lower bound.
``best`` of m fails when any candidate fails; a candidate not measurable at the check's FPR leaves the list;
a pass with attacks left out for want of time becomes inconclusive (:func:`over_budget`). The rules in full:
docs/policies.md, docs/statistics.md and docs/internals-core.md.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from privgate import stats
from privgate.planning import for_estimate, inconclusive_reason
from privgate.policy import Check, Decision, Metric, Policy
from privgate.policy.schema import MEASURED_BY
from privgate.report.model import CheckResult
from privgate.report.numbers import finite_or_none, sig

DEFAULT_DELTA = 1e-5

#: Status of a candidate that cannot be placed at the check's operating point.
EXCLUDED = "not measurable"


class Scored(Protocol):
    """What the gate keeps of an attack that ran (see ``privgate.gate``)."""

    result: Any
    split: stats.SplitScores
    membership: np.ndarray | None


@dataclass(frozen=True)
class Level:
    """The checks of one policy in an ``extends`` chain, and what they may use.

    Attributes:
        policy: the policy that declares the checks.
        alpha: its own error budget (:attr:`Policy.own_alpha`).
        attacks: the attacks its ``best`` checks choose from (its ``attacks_to_run``).
        prefix: prepended to inherited check ids (``internal:``); empty for the audited policy.
    """

    policy: Policy
    alpha: float
    attacks: frozenset[str]
    prefix: str = ""

    @classmethod
    def of(cls, policy: Policy, audited: Policy) -> Level:
        prefix = "" if policy is audited else f"{policy.name}:"
        return cls(policy, policy.own_alpha, frozenset(policy.attacks_to_run()), prefix)


def estimate(check: Check, ran: Scored, confidence: float) -> stats.Estimate:
    """The check's metric for one attack's scores at the given confidence."""
    sp = ran.split
    metric = check.metric
    if metric is Metric.auc:
        return stats.auc(sp.eval_in, sp.eval_out, confidence)
    if metric is Metric.accuracy:
        return stats.balanced_accuracy(sp, confidence)
    if metric is Metric.advantage:
        return stats.advantage(sp, confidence)
    if metric is Metric.tpr_at_fpr:
        return stats.tpr_at_fpr(sp, float(check.fpr), confidence)
    if metric is Metric.epsilon_lb:
        delta = DEFAULT_DELTA if check.delta is None else check.delta
        return stats.epsilon_lower_bound(sp, delta, confidence, check_max=check.max)
    # metrics that are not membership scores (similarity, attribute_advantage): the attack
    # provides an Estimate, or a privgate.stats.leakage.Measure that needs the hidden membership
    provided = ran.result.extras.get("estimates", {}).get(metric.value)
    if provided is not None:
        if isinstance(provided, stats.Estimate):
            return provided
        if ran.membership is None:
            return stats.Estimate.unresolved(
                metric.value, "the audit's membership was not recorded for this attack", confidence
            )
        return provided.estimate(ran.membership, confidence)
    return stats.Estimate.unresolved(
        metric.value, f"attack '{ran.result.attack}' does not produce the metric '{metric.value}'", confidence
    )


def _pct(confidence: float) -> str:
    """99.5 % stays 99.5 %, not a rounded 100 %."""
    return f"{confidence * 100:.4g}%"


def decide(est: stats.Estimate, check: Check, decision: Decision) -> tuple[str, str]:
    """Status (``pass``, ``fail``, ``inconclusive`` or :data:`EXCLUDED`) and a one-sentence reason."""
    mx = check.max
    name = est.metric
    if not est.measurable:
        if decision is Decision.upper_bound and est.lo is not None and est.lo > mx:
            return "fail", (
                f"{est.reason}; but even at a threshold whose FPR is at most {check.fpr:g} its TPR is at least "
                f"{sig(est.lo)}, above {mx:g} (a proven violation)"
            )
        return EXCLUDED, est.reason or "not measurable at this operating point"
    if not est.resolvable:
        return "inconclusive", est.reason or "the data cannot resolve this check"
    ci = f"[{sig(est.lo)}, {sig(est.hi)}]"
    if check.metric is Metric.epsilon_lb:
        if est.value > mx:
            return (
                "fail",
                f"the attack proves ε ≥ {est.value:.3g} at {_pct(est.confidence)} confidence, above the allowed {mx:g}",
            )
        return (
            "pass",
            f"the attack proves no more than ε ≥ {est.value:.3g} "
            f"(δ={est.details.get('delta', DEFAULT_DELTA):g}), within {mx:g}",
        )
    if decision is Decision.point:
        if est.value > mx:
            return "fail", f"{name} {sig(est.value)} {ci} exceeds {mx:g} (decided on the point estimate)"
        return "pass", f"{name} {sig(est.value)} {ci} is within {mx:g} (decided on the point estimate)"
    if est.hi <= mx:
        return (
            "pass",
            f"{name} {sig(est.value)}, upper bound {sig(est.hi)} ≤ {mx:g} at {_pct(est.confidence)} confidence",
        )
    if est.lo > mx:
        return (
            "fail",
            f"{name} {sig(est.value)} {ci}: even the lower bound is above {mx:g} at {_pct(est.confidence)} confidence",
        )
    if est.value > mx:
        return "inconclusive", (
            f"{name} {sig(est.value)} is above {mx:g} but its lower bound {sig(est.lo)} is not: the audit data "
            "cannot prove a violation, nor rule one out (add audit data)"
        )
    return "inconclusive", (
        f"{name} {sig(est.value)} is within {mx:g} but its upper bound {sig(est.hi)} is not: "
        "the audit data cannot rule out a violation (add audit data)"
    )


def strongest(decided: Sequence[tuple[str, stats.Estimate]]) -> int | None:
    """Index of the candidate that decides a ``best`` check: the rule of the module docstring.

    ``decided`` holds (status, estimate) per candidate (an attack, or an attack on one
    pair and round of a federation). The deciding status is ``fail`` if any candidate
    fails, else ``inconclusive`` if any is, else ``pass``; among the candidates with it,
    the highest point estimate wins. Candidates marked :data:`EXCLUDED` never decide;
    ``None`` when every candidate is excluded.
    """
    for status in ("fail", "inconclusive", "pass"):
        hits = [i for i, (st, _) in enumerate(decided) if st == status]
        if hits:
            return max(hits, key=lambda i: _point(decided[i][1]))
    return None


def status_counts(statuses: Iterable[str]) -> dict[str, int]:
    """How many of each status, ``{"fail": …, "inconclusive": …, "pass": …}``."""
    listed = list(statuses)
    return {s: listed.count(s) for s in ("fail", "inconclusive", "pass")}


def _candidates(check: Check, level: Level, ran: dict[str, Scored], diagnostic: set[str]) -> list[str]:
    if check.attack != "best":
        return [check.attack] if check.attack in ran else []
    measured = check.metric.value in MEASURED_BY  # measurements may be diagnostic: they decide only their metric
    names = sorted(n for n in ran if n in level.attacks and (measured or n not in diagnostic))
    if measured:  # only attacks that measure it compete
        names = [n for n in names if check.metric.value in ran[n].result.extras.get("estimates", {})]
    return names


def _point(est: stats.Estimate) -> float:
    return -math.inf if est.value is None or not math.isfinite(est.value) else float(est.value)


def check_fields(check: Check, level: Level) -> dict[str, Any]:
    """The fields of a :class:`CheckResult` that come from the check itself and the policy that owns it."""
    return {
        "id": level.prefix + check.id,
        "attack": check.attack,
        "metric": check.metric.value,
        "threshold": check.max,
        "fpr": check.fpr,
        "delta": check.delta,
        "policy": level.policy.name,
    }


def decide_check(
    check: Check, level: Level, ran: dict[str, Scored], missing: dict[str, str], diagnostic: set[str]
) -> CheckResult:
    """Decide one check of ``level`` on the attacks that ran (see the module docstring)."""
    k = max(1, len(level.policy.checks))
    base = check_fields(check, level)
    if check.federated is not None:  # decided over attacker × victim pairs by privgate.audits.federated.decide
        reason = (
            "a federated check: it is decided on a federation's checkpoints by `privgate fl audit`, not on one model"
        )
        return _unmeasured(base, reason, 1.0 - level.alpha / k)
    names = _candidates(check, level, ran, diagnostic)
    if not names:
        return _unmeasured(base, _not_run(check, missing), 1.0 - level.alpha / k)
    m = len(names)
    conf = 1.0 - level.alpha / (k * m)
    estimates = {n: estimate(check, ran[n], conf) for n in names}
    decided = {n: decide(e, check, level.policy.decision) for n, e in estimates.items()}
    deciding = [n for n in names if decided[n][0] != EXCLUDED]
    excluded = {n: decided[n][1] for n in names if decided[n][0] == EXCLUDED}
    bonferroni = {"alpha": level.alpha, "checks": k, "attacks": m}
    if not deciding:
        reasons = "; ".join(f"{n}: {why}" for n, why in excluded.items())
        reason = f"no attack can be measured at FPR {check.fpr:g} ({reasons})"
        return _unmeasured(base, reason, conf, {"excluded": excluded, "bonferroni": bonferroni})
    chosen = deciding[strongest([(decided[n][0], estimates[n]) for n in deciding])]  # type: ignore[index]
    est = estimates[chosen]
    status, reason = decided[chosen]
    if check.attack == "best" and m > 1:
        reason = f"{chosen}: {reason} (best of {len(deciding)} attacks"
        reason += f"; {len(excluded)} not measurable at FPR {check.fpr:g}" if excluded else ""
        reason += f", each at {_pct(conf)} for {k} check(s) × {m} attacks at {_pct(1 - level.alpha)} jointly)"
    needed = None
    if status == "inconclusive":  # how much audit data would decide it (privgate.planning)
        found = for_estimate(check, est)
        reason, needed = inconclusive_reason(reason, found), found.as_dict()
    details: dict[str, Any] = dict(est.details)
    details["bonferroni"] = bonferroni
    if check.attack == "best":
        details["candidates"] = [_candidate(n, estimates[n], decided[n][0]) for n in names]
    if excluded:
        details["excluded"] = excluded
    return CheckResult(
        **base,
        value=est.value,
        ci=[est.lo, est.hi],
        status=status,
        reason=reason,
        confidence=conf,
        n_members=est.n_members,
        n_nonmembers=est.n_nonmembers,
        chosen_attack=chosen if check.attack == "best" else None,
        details=details,
        needed=needed,
    )


def _unmeasured(
    base: dict[str, Any], reason: str, confidence: float, details: dict[str, Any] | None = None
) -> CheckResult:
    """An inconclusive check with no value: no attack measured it, for ``reason``."""
    extra = {} if details is None else {"details": details}
    return CheckResult(
        **base, value=None, ci=[None, None], status="inconclusive", reason=reason, confidence=confidence, **extra
    )


def _not_run(check: Check, missing: dict[str, str]) -> str:
    """Why no attack of ``check`` ran (``missing``: each attack's reason)."""
    if check.attack == "best":
        why = "; ".join(sorted(set(missing.values())))
        return "no attack ran, so the strongest attack is unknown" + (f" ({why})" if why else "")
    return f"attack '{check.attack}' did not run: {missing.get(check.attack, 'it did not run')}"


def _candidate(name: str, est: stats.Estimate, status: str) -> dict[str, Any]:
    """One attack's line among a ``best`` check's candidates."""
    return {
        "attack": name,
        "value": finite_or_none(est.value),
        "ci": [finite_or_none(est.lo), finite_or_none(est.hi)],
        "status": status,
    }


def over_budget(result: CheckResult, check: Check, level: Level, over: Mapping[str, float]) -> CheckResult:
    """A ``best`` check some of whose attacks did not run for want of time: never passed on the others.

    A pass becomes ``inconclusive`` (the attacks left out might have failed it); a fail stands (an attack that
    ran proves it); either way the reason names the attacks left out (:mod:`privgate.attacks.budget`).
    """
    left_out = sorted(n for n in over if n in level.attacks) if check.attack == "best" else []
    if not left_out or result.value is None:  # no attack ran: the check already says why, naming them
        return result
    names = ", ".join(f"{n} (≈ {over[n]:.2g} s)" for n in left_out)
    if result.status == "pass":
        reason = (
            f"{result.reason}; but {len(left_out)} of its attacks did not run within the time budget: {names}, so "
            "it is not passed on the others (raise budget_s, or name the attacks to run)"
        )
        return result.model_copy(update={"status": "inconclusive", "reason": reason})
    return result.model_copy(update={"reason": f"{result.reason}; not run within the time budget: {names}"})


def decide_policy(
    policy: Policy,
    ran: dict[str, Scored],
    missing: dict[str, str],
    diagnostic: set[str],
    over: Mapping[str, float] | None = None,
) -> list[CheckResult]:
    """Every check of ``policy`` and of the policies it extends: its own first, then inherited ones.

    ``over``: attacks left out for want of time, with their estimated seconds (:func:`over_budget`).
    """
    out: list[CheckResult] = []
    for p in reversed(policy.chain()):
        level = Level.of(p, policy)
        out += [over_budget(decide_check(c, level, ran, missing, diagnostic), c, level, over or {}) for c in p.checks]
    return out


def verdict_of(checks: list[CheckResult]) -> str:
    """``fail`` if any check fails, else ``inconclusive`` if any is, else ``pass``."""
    statuses = {c.status for c in checks}
    return "fail" if "fail" in statuses else "inconclusive" if "inconclusive" in statuses else "pass"


__all__ = [
    "DEFAULT_DELTA",
    "EXCLUDED",
    "Level",
    "check_fields",
    "decide",
    "decide_check",
    "decide_policy",
    "estimate",
    "over_budget",
    "status_counts",
    "strongest",
    "verdict_of",
]
