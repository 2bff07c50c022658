"""Audit reports: pydantic models whose JSON is a versioned output contract, like :mod:`privgate.report.model`.

``schema_version`` changes only when a field is removed or changes meaning;
new optional fields keep the version. Infinite or NaN numbers are written as
``null`` (standard JSON has neither): an ``epsilon_empirical`` of ``null``
means ∞ — a distinguisher with no error of one kind.

Verdicts follow privgate's semantics: ``fail`` (exit 1) when a lower bound,
valid at the report's confidence, exceeds the claimed ε — the data prove the
claim false; ``inconclusive`` (exit 3) when the audit could never exceed the
claim (too few trials or canaries: ``max_provable_epsilon`` ≤ the claim), so a
pass would say nothing; ``pass`` (exit 0) otherwise — no violation found, which
is not a proof that the claim holds.
"""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import BaseModel, Field, field_validator

SCHEMA_VERSION = 1

Status = Literal["pass", "fail", "inconclusive"]

EXIT_CODES: dict[str, int] = {"pass": 0, "fail": 1, "inconclusive": 3}


def _finite(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


class _Report(BaseModel):
    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.verdict]  # type: ignore[attr-defined]

    def to_json(self) -> str:
        return self.model_dump_json(indent=2)


class LdpResult(BaseModel):
    """One cell: an adversary and a distinguisher against one claimed ε, K trials."""

    claimed_epsilon: float
    adversary: str
    distinguisher: Literal["black_box", "white_box"]
    rule: str = Field(description="The distinguisher's decision rule (seed 001, Eq. 4-7).")
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
        description="Seed 001, Eq. 3, from the observed rates (null: ∞). Never decides."
    )
    epsilon_lb: float = Field(
        description="Lower bound on ε, valid at the report's confidence jointly with every other cell."
    )
    status: Status

    _f = field_validator("epsilon_empirical", mode="before")(_finite)


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


class LdpAuditReport(_Report):
    """``privgate audit ldp``: seed 001's adversary × distinguisher grid against a randomiser's claimed ε."""

    schema_version: int = SCHEMA_VERSION
    kind: Literal["ldp"] = "ldp"
    privgate_version: str
    verdict: Status
    summary: str
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
    environment: dict[str, Any]
    started: str
    duration_s: float
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


class DpsgdAuditReport(_Report):
    """``privgate audit dpsgd``: one training run with m canaries (Steinke, Nasr & Jagielski 2023, arXiv 2305.08846)."""

    schema_version: int = SCHEMA_VERSION
    kind: Literal["dpsgd"] = "dpsgd"
    privgate_version: str
    verdict: Status
    summary: str
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
    environment: dict[str, Any]
    started: str
    duration_s: float

    @classmethod
    def from_json(cls, text: str) -> DpsgdAuditReport:
        return cls.model_validate_json(text)


__all__ = [
    "EXIT_CODES",
    "SCHEMA_VERSION",
    "DpsgdAuditReport",
    "GuessAttempt",
    "LdpAuditReport",
    "LdpClaim",
    "LdpResult",
    "Status",
]
