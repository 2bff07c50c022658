"""A policy's federated checks, decided over attacker × victim pairs with privgate's rules.

A check with a ``federated:`` block (:class:`privgate.policy.Federated`) bounds the **largest** value of its
metric over a set of pairs, rounds and attacks, each interval two-sided at 1 − α/(k · m · |P| · |rounds|)
(Bonferroni), with the rules of :mod:`privgate.decision`: **fail** when some lower bound is above ``max``,
**pass** when every upper bound is within it, else **inconclusive**, naming the deciding pair, round and
attack. A check without ``federated:`` is reported inconclusive here ("decided by privgate check"): a policy
is never silently half-decided. See ``docs/policies.md`` ("Federated checks").
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from privgate import stats
from privgate.audits.federated.run import Audited
from privgate.decision import EXCLUDED, Level, check_fields, decide, estimate, status_counts, strongest
from privgate.policy import Check, Policy
from privgate.report.jobs.federation import FederationReport
from privgate.report.model import CheckResult
from privgate.report.numbers import sig


@dataclass
class _Pair:
    """What :func:`privgate.decision.estimate` reads of an attack that ran: its split scores."""

    split: stats.SplitScores
    result: Any = None
    membership: np.ndarray | None = None


def pairs(kind: str, attackers: list[int], hops: np.ndarray) -> list[tuple[int, int]]:
    """The (attacker, victim) pairs a check ranges over."""
    n = len(hops)
    keep = {
        "others": lambda a, v: a != v,
        "self": lambda a, v: a == v,
        "all": lambda a, v: True,
        "neighbours": lambda a, v: hops[a, v] == 1,
        "non_neighbours": lambda a, v: a != v and hops[a, v] != 1,
    }[kind]
    return [(a, v) for a in attackers for v in range(n) if keep(a, v)]


def _inconclusive(check: Check, level: Level, k: int, reason: str) -> CheckResult:
    return CheckResult(
        **check_fields(check, level),
        value=None,
        ci=[None, None],
        status="inconclusive",
        reason=reason,
        confidence=1.0 - level.alpha / k,
    )


@dataclass(frozen=True)
class _Scope:
    """What a federated check ranges over: candidate attacks, rounds (0-based) and (attacker, victim) pairs."""

    attacks: list[str]
    rounds: list[int]
    pairs: list[tuple[int, int]]


#: (status, reason, estimate, (round, attacker, victim, attack)) of one pair, round and attack.
_Decided = tuple[str, str, stats.Estimate, tuple[int, int, int, str]]


def _scope(check: Check, fed: Audited) -> _Scope | str:
    """The attacks, rounds and pairs ``check`` ranges over on ``fed``, or why it cannot range over any."""
    scope = check.federated
    assert scope is not None
    ev, names = fed.evaluation, list(fed.topology.labels)
    ran = list(ev.attacks)
    if check.attack == "best":  # every attack that ran on the federation competes (--attacks and those named)
        cands = ran
    elif check.attack not in ran:
        return f"attack '{check.attack}' did not run on the federation"
    else:
        cands = [check.attack]
    if not cands:
        return "no attack ran, so the strongest attack is unknown"
    rounds_total = len(ev.scores)
    if scope.round == "final":
        rounds = [rounds_total - 1]
    elif scope.round == "all":
        rounds = list(range(rounds_total))
    elif scope.round > rounds_total:
        return f"round {scope.round} asked for; the federation has {rounds_total}"
    else:
        rounds = [int(scope.round) - 1]
    if scope.attackers is None:
        attackers = list(range(len(names)))
    else:
        unknown = [a for a in scope.attackers if a not in names]
        if unknown:
            return f"attacker {unknown[0]!r} is not a node of the federation ({names})"
        attackers = [names.index(a) for a in scope.attackers]
    chosen_pairs = pairs(scope.pairs, attackers, fed.topology.hops())
    if not chosen_pairs:
        return f"the federation has no pair of kind '{scope.pairs}'"
    return _Scope(cands, rounds, chosen_pairs)


def _decide_each(check: Check, level: Level, fed: Audited, scope: _Scope, conf: float) -> list[_Decided]:
    """Every (round, pair, attack) decided alone at confidence ``conf``."""
    ev = fed.evaluation
    decided: list[_Decided] = []
    for r in scope.rounds:
        for a, v in scope.pairs:
            for name in scope.attacks:
                split = fed.victims.split(ev.scores[r][name][a], v)
                est = estimate(check, _Pair(split), conf)
                status, reason = decide(est, check, level.policy.decision)
                decided.append((status, reason, est, (r, a, v, name)))
    return decided


def _worst(deciding: list[_Decided], names: list[str]) -> list[dict[str, Any]]:
    """The five pairs with the highest point estimates, for the report."""
    worst = sorted(deciding, key=lambda d: -d[2].value if math.isfinite(d[2].value) else math.inf)[:5]
    return [
        {
            "attacker": names[d[3][1]],
            "victim": names[d[3][2]],
            "round": d[3][0] + 1,
            "attack": d[3][3],
            "value": sig(d[2].value),
            "ci": [d[2].lo, d[2].hi],
            "status": d[0],
        }
        for d in worst
    ]


def decide_federated_check(check: Check, level: Level, fed: Audited) -> CheckResult:
    """Decide one federated check on one audited federation (module docstring)."""
    k = max(1, len(level.policy.checks))
    if check.federated is None:
        return _inconclusive(check, level, k, "a check of one model: decided by `privgate check`, not on a federation")
    scope = _scope(check, fed)
    if isinstance(scope, str):
        return _inconclusive(check, level, k, scope)
    names = list(fed.topology.labels)
    m, n_pairs = len(scope.attacks), len(scope.pairs) * len(scope.rounds)
    conf = 1.0 - level.alpha / (k * m * n_pairs)
    deciding = [d for d in _decide_each(check, level, fed, scope, conf) if d[0] != EXCLUDED]
    bonferroni = {
        "alpha": level.alpha,
        "checks": k,
        "attacks": m,
        "pairs": len(scope.pairs),
        "rounds": len(scope.rounds),
    }
    if not deciding:
        return _inconclusive(check, level, k, f"no attack can be measured at FPR {check.fpr:g} on these pairs")
    status, reason, est, (r, a, v, name) = deciding[strongest([(d[0], d[2]) for d in deciding])]  # type: ignore[index]
    counts = status_counts(d[0] for d in deciding)
    where = f"{names[a]} → {names[v]}, round {r + 1}"
    text = (
        f"max over {len(scope.pairs)} pair(s) ({check.federated.pairs}) × {len(scope.rounds)} round(s)"
        + (f" × {m} attacks" if m > 1 else "")
        + f", each at {conf:.6g} confidence: {name} on {where}: {reason}; "
        + f"{counts['fail']} fail, {counts['inconclusive']} inconclusive, {counts['pass']} pass"
    )
    return CheckResult(
        **check_fields(check, level),
        value=est.value,
        ci=[est.lo, est.hi],
        status=status,  # type: ignore[arg-type]
        reason=text,
        confidence=conf,
        n_members=est.n_members,
        n_nonmembers=est.n_nonmembers,
        chosen_attack=name if check.attack == "best" else None,
        details={
            "pair": {"attacker": names[a], "victim": names[v], "round": r + 1},
            "bonferroni": bonferroni,
            "counts": counts,
            "worst": _worst(deciding, names),
        },
    )


def decide_federation(policy: Policy, fed: Audited) -> list[CheckResult]:
    """Every check of the policy and of those it extends (own first), decided on the federation."""
    out: list[CheckResult] = []
    for p in reversed(policy.chain()):
        level = Level.of(p, policy)
        out += [decide_federated_check(c, level, fed) for c in p.checks]
    return out


def decide_report(report: FederationReport, policy: Policy, fed: Audited) -> FederationReport:
    """The federated audit's report with the policy decided on ``fed``: checks, verdict, policy facts, summary."""
    from privgate.decision import verdict_of
    from privgate.report.provenance import policy_facts, summary_line

    checks = decide_federation(policy, fed)
    verdict = verdict_of(checks)
    return report.model_copy(
        update={
            "checks": checks,
            "verdict": verdict,
            "policy": policy_facts(policy),
            "summary": f"{summary_line(verdict, checks)} · {report.summary}",
        }
    )


def has_federated_checks(policy: Policy) -> bool:
    return any(c.federated is not None for p in policy.chain() for c in p.checks)


def attacks_named(policy: Policy) -> list[str]:
    """Attacks a policy's federated checks name explicitly (they must run)."""
    return sorted(
        {c.attack for p in policy.chain() for c in p.checks if c.federated is not None and c.attack != "best"}
    )


__all__ = [
    "attacks_named",
    "decide_federated_check",
    "decide_federation",
    "decide_report",
    "has_federated_checks",
    "pairs",
]
