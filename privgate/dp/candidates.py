"""The candidates of the ε search and the rules that walk the schedule (ladder, bisect).

A candidate is one DP-SGD retraining on the members at a target ε and what
the re-audit found. It is *accepted* when no check fails, no check is undecided
(point estimate within the threshold but the upper bound over it) and utility
is at or above the floor; checks the audit data cannot resolve at all stay
``inconclusive`` and do not block (no amount of noise resolves them).

Both strategies assume leakage falls and utility falls as ε falls:

* ``ladder`` walks the schedule from the largest ε down and stops at the first
  accepted ε, or as soon as utility falls below the floor (every smaller ε
  would be worse);
* ``bisect`` binary-searches the schedule for the largest ε whose checks pass:
  ⌈log₂(n+1)⌉ trainings instead of up to n; it stops early when a probe fails
  both the checks and the floor.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from torch import nn

from privgate.dp.recipe import DPRecipe
from privgate.dp.train import DPTraining
from privgate.report.model import CheckResult, Report
from privgate.report.remediation_section import CheckCell, DPRun, SearchRow


def privacy_status(checks: list[CheckResult]) -> str:
    """``fail`` if a check fails; ``undecided`` if one is inconclusive with a measured value
    (more noise can resolve it); else ``pass`` — checks the data cannot resolve at all
    (no value) do not block, and keep the verdict ``inconclusive``."""
    if any(c.status == "fail" for c in checks):
        return "fail"
    if any(c.status == "inconclusive" and c.value is not None for c in checks):
        return "undecided"
    return "pass"


def unresolvable(checks: list[CheckResult]) -> list[CheckResult]:
    """Checks no retraining can decide: inconclusive without a value (too little data, attack unavailable)."""
    return [c for c in checks if c.status == "inconclusive" and c.value is None]


@dataclass
class Candidate:
    """One DP-SGD retraining and what the re-audit found."""

    epsilon: float
    model: nn.Module
    recipe: DPRecipe
    training: DPTraining
    report: Report
    utility: float
    utility_ci: list[float]
    floor: float | None
    trial: int | None = None

    #: How the search's reasons name the schedule, its strong end and what lies beyond a candidate.
    none_pass = "no ε in the schedule passes the checks"
    strongest = "the smallest"
    beyond = "every smaller ε would lose more utility"

    @property
    def where(self) -> str:
        """The candidate in a reason: ``ε = 5``."""
        return f"ε = {self.epsilon:g}"

    @property
    def utility_ok(self) -> bool:
        return self.floor is None or self.utility >= self.floor

    @property
    def privacy(self) -> str:
        return privacy_status(self.report.checks)

    @property
    def accepted(self) -> bool:
        return self.privacy == "pass" and self.utility_ok

    @property
    def score(self) -> float:
        """Utility as "higher is better" (a language model's perplexity is lower-is-better: it overrides this)."""
        return self.utility

    def outcome(self, in_search: bool) -> dict[str, Any]:
        """What every kind of candidate's row says: its utility, its checks and the re-audit's verdict."""
        return {
            "utility": round(self.utility, 6),
            "utility_ci": [round(v, 6) for v in self.utility_ci],
            "utility_ok": self.utility_ok,
            "checks": [CheckCell(id=c.id, value=c.value, ci=c.ci, status=c.status) for c in self.report.checks],
            "privacy": self.privacy,
            "verdict": self.report.verdict,
            "accepted": self.accepted,
            "audit_seconds": self.report.duration_s,
            "in_search": in_search,
        }

    def row(self, in_search: bool = True, released_epsilon: float | None = None) -> SearchRow:
        return SearchRow(
            epsilon=self.epsilon,
            training=DPRun.model_validate(self.training.to_dict()),
            trial=self.trial,
            released_epsilon=None if released_epsilon is None else round(released_epsilon, 6),
            **self.outcome(in_search),
        )


def best_of(candidates: list[Candidate]) -> Candidate | None:
    """The best candidate: accepted first, then passing checks, then the highest utility, then the largest ε."""
    if not candidates:
        return None
    return max(candidates, key=lambda c: (c.accepted, c.privacy == "pass", c.score, c.epsilon))


def _first_problem(c: Candidate) -> CheckResult | None:
    return next((x for x in c.report.checks if x.status == "fail"), None) or next(
        (x for x in c.report.checks if x.status == "inconclusive" and x.value is not None), None
    )


def _describe_check(c: CheckResult) -> str:
    value = "n/a" if c.value is None else f"{c.value:.3g}"
    return f"check '{c.id}' is {c.status} ({c.metric} {value}, max {c.threshold:g})"


def search_schedule(
    evaluate: Callable[[int], Candidate], n: int, strategy: str
) -> tuple[Candidate | None, str | None, str | None]:
    """(accepted candidate, what broke first — 'utility' | 'privacy', reason) for a schedule of n ε."""
    tried: dict[int, Candidate] = {}

    def at(i: int) -> Candidate:
        if i not in tried:
            tried[i] = evaluate(i)
        return tried[i]

    if strategy == "ladder":
        for i in range(n):
            c = at(i)
            if c.accepted:
                return c, None, None
            if not c.utility_ok:
                return None, "utility", utility_reason(c)
        return None, "privacy", privacy_reason(at(n - 1))
    lo, hi = 0, n  # smallest index whose checks pass lies in [lo, hi]; n = none
    while lo < hi:
        mid = (lo + hi) // 2
        c = at(mid)
        if c.privacy == "pass":
            hi = mid
        else:
            if not c.utility_ok:  # the answer lies at a smaller ε, whose utility is lower still
                return None, "utility", utility_reason(c)
            lo = mid + 1
    if lo == n:
        return None, "privacy", privacy_reason(at(n - 1))
    c = at(lo)
    if c.accepted:
        return c, None, None
    return None, "utility", utility_reason(c)


def utility_reason(c: Candidate) -> str:
    problem = _first_problem(c)
    tail = f", while {_describe_check(problem)}" if problem else f" (its checks pass, but {c.beyond})"
    return (
        f"the utility floor broke first: at {c.where} utility is {c.utility:.4f}, below the floor {c.floor:.4f}{tail}"
    )


def privacy_reason(c: Candidate) -> str:
    problem = _first_problem(c)
    what = _describe_check(problem) if problem else "a check does not pass"
    return f"{c.none_pass}: even at {c.strongest}, {c.where}, {what}"


__all__ = [
    "Candidate",
    "best_of",
    "privacy_reason",
    "privacy_status",
    "search_schedule",
    "unresolvable",
    "utility_reason",
]
