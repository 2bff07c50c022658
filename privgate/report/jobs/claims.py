"""Audit reports: pydantic models whose JSON is a versioned output contract, like :mod:`privgate.report.model`.

``schema_version`` changes only when a field is removed or changes meaning. Non-finite numbers are ``null``:
an ``epsilon_empirical`` of ``null`` means ∞. Verdicts: ``fail`` (exit 1) when a lower bound at the
report's confidence exceeds the claimed ε; ``inconclusive`` (exit 3) when the audit could never exceed it
(``max_provable_epsilon`` ≤ the claim); ``pass`` (exit 0) otherwise — no violation found, not a proof.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field, field_validator

from privgate.report.model import SCHEMA_VERSION, BaseReport, CheckResult, Status
from privgate.report.numbers import finite_or_none


def claim_check(
    check_id: str,
    attack: str | None,
    epsilon_lb: float,
    claimed: float,
    status: Status,
    reason: str,
    confidence: float,
    sizes: tuple[int, int] = (0, 0),
) -> CheckResult:
    """A claim decided as a check of the report family: metric ``epsilon_lb``, threshold the claimed ε.

    The interval is one-sided, ``[lower bound, None]``: an audit bounds ε from below only. ``sizes``
    are the two sample sizes behind it (trials from each hypothesis; canaries in and out).
    """
    return CheckResult(
        id=check_id,
        attack=attack or "all",
        metric="epsilon_lb",
        value=epsilon_lb,
        ci=[epsilon_lb, None],
        threshold=claimed,
        status=status,
        reason=reason,
        confidence=confidence,
        n_members=sizes[0],
        n_nonmembers=sizes[1],
    )


class LdpResult(BaseModel):
    """One cell: an adversary and a distinguisher against one claimed ε, K trials."""

    claimed_epsilon: float
    adversary: str
    distinguisher: Literal["black_box", "white_box"]
    rule: str = Field(description="The distinguisher's decision rule (Matsumoto et al. 2022, Eq. 4-7).")
    trials: int
    trials_g1: int = Field(description="Trials whose report came from g₁ (H₀ true); FP is counted over these.")
    trials_g2: int = Field(description="Trials whose report came from g₂; FN is counted over these.")
    fp_count: int
    fn_count: int
    fp: float = Field(description="FP rate: guessed g₂ when the source was g₁.")
    fn: float = Field(description="FN rate: guessed g₁ when the source was g₂.")
    fp_upper: float = Field(description="Clopper-Pearson upper bound of FP at the cell's α/2.")
    fn_upper: float = Field(description="Clopper-Pearson upper bound of FN at the cell's α/2.")
    epsilon_empirical: float | None = Field(
        description="Matsumoto et al. 2022, Eq. 3, from the observed rates (null: ∞). Never decides."
    )
    epsilon_lb: float = Field(
        description="Lower bound on ε, valid at the report's confidence jointly with every other cell."
    )
    status: Status

    _f = field_validator("epsilon_empirical", mode="before")(finite_or_none)


class LdpClaim(BaseModel):
    """The decision for one claimed ε over its cells."""

    claimed_epsilon: float
    max_epsilon_lb: float
    strongest: str | None = Field(description="adversary/distinguisher of the largest lower bound.")
    max_provable_epsilon: float = Field(
        description="The largest lower bound any distinguisher could reach with these trials."
    )
    status: Status
    reason: str


class LdpAuditReport(BaseReport):
    """``privgate audit ldp``: the adversary × distinguisher grid of Matsumoto et al. (2022, "Measuring lower bounds
    of local differential privacy via adversary instantiations in federated learning", arXiv 2206.09122) against
    a randomiser's claimed ε; ``checks`` holds one check per claimed ε."""

    job: Literal["audit-ldp"] = "audit-ldp"
    kind: Literal["ldp"] = "ldp"
    verdict: Status
    claimed_epsilon: float | list[float] = Field(description="The claimed ε; a list for a sweep (--epsilon 0.5,1,2,4).")
    confidence: float = Field(description="Probability that every lower bound in the report holds at once.")
    cells: int = Field(
        description="Cells (claims × adversaries × distinguishers) sharing the error budget (Bonferroni)."
    )
    cell_confidence: float = Field(description="1 − (1 − confidence)/cells: the level of each cell's bound.")
    max_epsilon_lb: float
    max_provable_epsilon: float
    clip: float
    trials: int = Field(description="K, trials per cell.")
    mechanism: dict[str, Any]
    source: dict[str, Any]
    adversaries: list[str]
    distinguishers: list[str]
    claims: list[LdpClaim]
    results: list[LdpResult]
    game_seconds: float = Field(description="Seconds spent playing the trials (after the gradients were prepared).")
    trials_per_second: float | None = Field(
        default=None,
        description="Cell trials (cells × K) per second of game_seconds; one randomised report serves both "
        "distinguishers of an adversary.",
    )

    @classmethod
    def from_json(cls, text: str) -> LdpAuditReport:
        return cls.model_validate_json(text)


class GuessAttempt(BaseModel):
    """One number of guesses of the pre-declared grid, with its outcome."""

    guesses: int
    correct: int
    epsilon_lb: float


class DpsgdAuditReport(BaseReport):
    """``privgate audit dpsgd``: one training run with m canaries (Steinke, Nasr & Jagielski 2023, arXiv 2305.08846);
    ``checks`` holds the claim as one check."""

    job: Literal["audit-dpsgd"] = "audit-dpsgd"
    kind: Literal["dpsgd"] = "dpsgd"
    verdict: Status
    claimed_epsilon: float
    delta: float
    confidence: float
    mode: Literal["white_box", "black_box"] = Field(
        description="white_box: gradient canaries in privgate's DP-SGD; black_box: mislabelled input canaries in the "
        "user's trainer."
    )
    canaries: int = Field(description="m, each included independently with probability 1/2.")
    included: int
    guesses: int = Field(
        description="r of the attempt with the largest bound: the top r/2 scores guessed in, the bottom r/2 out."
    )
    correct: int
    epsilon_lb: float = Field(
        description="Lower bound on ε at δ, valid at `confidence` (Bonferroni over the guess grid)."
    )
    max_provable_epsilon: float
    attempts: list[GuessAttempt]
    bound: dict[str, Any]
    trainer: dict[str, Any]
    data: dict[str, Any]
    training_seconds: float

    @classmethod
    def from_json(cls, text: str) -> DpsgdAuditReport:
        return cls.model_validate_json(text)


__all__ = [
    "SCHEMA_VERSION",
    "claim_check",
    "DpsgdAuditReport",
    "GuessAttempt",
    "LdpAuditReport",
    "LdpClaim",
    "LdpResult",
    "Status",
]
