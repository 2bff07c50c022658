"""The candidates of the ε search and the rules that walk the schedule (ladder, bisect).

A candidate is one DP-SGD retraining at a target ε and what the re-audit found; it is *accepted* when no
check fails, none is undecided and utility is at or above the floor (checks the data cannot resolve stay
``inconclusive`` and do not block). ``ladder`` walks from the largest ε down; ``bisect`` binary-searches the
schedule in ⌈log₂(n+1)⌉ trainings; both assume leakage and utility fall as ε falls. A search no candidate could
win at this audit size (:func:`undecidable`) trains none; every row says why it was not taken
(:meth:`Candidate.why_not`). See ``docs/remediation.md`` ("Strategies").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from privgate.dpsgd.records import DPTraining
from privgate.policy import Policy
from privgate.report.model import CheckResult, Report
from privgate.report.remediation_section import CheckCell, DPRun, SearchRow

if TYPE_CHECKING:
    from torch import nn

    from privgate.dp.recipe import DPRecipe


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
    #: Which accepted candidate a ladder or bisect search takes.
    taken = "it takes the largest accepted ε"

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
            "checks": [CheckCell.of(c) for c in self.report.checks],
            "privacy": self.privacy,
            "verdict": self.report.verdict,
            "accepted": self.accepted,
            "audit_seconds": self.report.duration_s,
            "in_search": in_search,
            "reason": self.why_not(),
        }

    def why_not(self) -> str | None:
        """Why the search cannot take this candidate (None when it is accepted): its first failing or undecided
        check with its interval, and its utility against the floor."""
        problem = _first_problem(self)
        parts = [_describe_check(problem)] if problem is not None else []
        if not self.utility_ok:
            parts.append(f"utility {self.utility:.4f} is below the floor {self.floor:.4f}")
        return "; ".join(parts) or None

    def is_row(self, row: SearchRow) -> bool:
        """Whether ``row`` is this candidate's row in the search."""
        return row.in_search and row.epsilon == self.epsilon and row.trial == self.trial

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
    """``check 'mia-auc' is fail (auc 0.761 [0.712, 0.804], max 0.7)``, and an undecided check's needed audit size."""
    value = "n/a" if c.value is None else f"{c.value:.3g}"
    lo, hi = (list(c.ci) + [None, None])[:2]
    ci = f" [{lo:.3g}, {hi:.3g}]" if lo is not None and hi is not None else ""
    tail = ""
    if c.status == "inconclusive" and c.needed:
        tail = f"; about {c.needed['members']:,} members and {c.needed['nonmembers']:,} non-members would decide it"
    elif c.status == "inconclusive" and c.value is not None:
        tail = "; no audit size decides it at this value"
    return f"check '{c.id}' is {c.status} ({c.metric} {value}{ci}, max {c.threshold:g}{tail})"


def _sizes(report: Report) -> tuple[int, int]:
    """The audit's members and non-members (the report's data facts; else twice the evaluation split)."""
    data = report.data or {}
    n = [(data.get(role) or {}).get("n") for role in ("members", "nonmembers")]
    if all(isinstance(v, int) for v in n):
        return int(n[0]), int(n[1])
    first = next(iter(report.checks), None)
    return (2 * first.n_members, 2 * first.n_nonmembers) if first is not None else (0, 0)


def undecidable(original: Report, policy: Policy, audit_policy: Policy) -> str | None:
    """Why no candidate can be accepted at this audit size, before any is trained (None when one can).

    A candidate is audited at ``audit_policy``'s confidence (a capacity search's is stricter: Bonferroni over its
    steps), so each of the original's checks is sized at its own confidence with the error budget scaled the same
    way, for a model that leaks nothing (:func:`privgate.planning` — the best any candidate can be). A check no
    candidate can measure at this size, or whose attack did not run, is left out: it has no value for any
    candidate, so it does not block one (module docstring).
    """
    from privgate.stats.power import SIZED, needed, null_value, resolvable

    if policy.decision.value == "point":  # decided on the point estimate: any audit that measures a check decides it
        return None
    members, nonmembers = _sizes(original)
    scale = (1.0 - audit_policy.confidence) / (1.0 - policy.confidence)
    ratio = members / nonmembers if members > 0 and nonmembers > 0 else 1.0
    blocked: list[str] = []
    for c in original.checks:
        null = null_value(c.metric, c.fpr) if c.metric in SIZED else None
        if null is None or not resolvable(c.metric, members, nonmembers, c.fpr):
            continue  # no value for any candidate: it does not block one (module docstring)
        if c.value is None and not c.details.get("excluded"):
            continue  # its attack did not run: no candidate's will (an attack not measurable here may be)
        conf = 1.0 - (1.0 - c.confidence) * scale
        found = needed(c.metric, null, c.threshold, conf, ratio=ratio, fpr=c.fpr, delta=c.delta or 1e-5)
        if not found.covers(members, nonmembers):
            size = f"{found.members:,} members and {found.nonmembers:,} non-members" if found.decidable else "no size"
            at = f" at FPR {c.fpr:g}" if c.fpr is not None else ""
            blocked.append(f"'{c.id}' ({c.metric}{at} ≤ {c.threshold:g}: {size}, at {conf * 100:.4g}% confidence)")
    if not blocked:
        return None
    split = "" if scale == 1.0 else ", each candidate's interval at the search's stricter confidence (Bonferroni)"
    return (
        f"no candidate can pass check {', '.join(blocked)} on this audit data: even a model that leaks nothing "
        f"needs about that many rows to pass{split}, and the audit has {members:,} members and {nonmembers:,} "
        "non-members; nothing was trained: add audit data (privgate plan says how much), or bound this metric in a "
        "policy the data can decide"
    )


def mark_not_taken(rows: list[SearchRow], chosen: Candidate, rule: str) -> None:
    """Give every accepted row the search did not take its reason: ``chosen`` was taken, by ``rule``."""
    for row in rows:
        if row.accepted and not chosen.is_row(row) and row.reason is None:
            row.reason = f"accepted, but the search took {chosen.where} ({rule})"


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
    "mark_not_taken",
    "privacy_reason",
    "privacy_status",
    "search_schedule",
    "undecidable",
    "unresolvable",
    "utility_reason",
]
