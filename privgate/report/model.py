"""The report: pydantic models whose JSON is privgate's versioned output contract.

``schema_version`` changes only when a field is removed or changes meaning;
new optional fields keep the version.
"""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import BaseModel, Field, PrivateAttr, field_validator
from pydantic_core import PydanticSerializationError

SCHEMA_VERSION = 1

Status = Literal["pass", "fail", "inconclusive"]


def _finite(v: Any) -> Any:
    """NaN / inf become ``None`` so the JSON stays standard."""
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


class CheckResult(BaseModel):
    """One policy check, decided."""

    id: str
    attack: str
    metric: str
    value: float | None
    ci: list[float | None] = Field(
        description="[lo, hi] at `confidence`: the policy's, Bonferroni-adjusted over its checks and candidate attacks."
    )
    threshold: float
    status: Status
    reason: str
    confidence: float
    n_members: int = 0
    n_nonmembers: int = 0
    fpr: float | None = None
    delta: float | None = None
    chosen_attack: str | None = Field(default=None, description="For attack 'best': the attack that decided.")
    policy: str | None = Field(
        default=None, description="The policy that declared the check (an extended one for inherited checks)."
    )
    details: dict[str, Any] = Field(default_factory=dict)

    _v = field_validator("value", mode="before")(_finite)

    @field_validator("ci", mode="before")
    @classmethod
    def _ci(cls, v: Any) -> Any:
        return [_finite(x) for x in v]


class RatePoint(BaseModel):
    """TPR at a fixed FPR, measured on the evaluation split, with the FPR its threshold achieved there."""

    fpr: float
    tpr: float | None
    ci: list[float | None]
    resolvable: bool
    reason: str | None = None
    measurable: bool = True
    fpr_achieved: float | None = Field(
        default=None, description="FPR of the calibrated threshold on the evaluation split."
    )
    fpr_ci: list[float | None] | None = Field(default=None, description="Clopper-Pearson interval of fpr_achieved.")


class AttackSummary(BaseModel):
    """What one attack achieved, independent of any check."""

    name: str
    threat_model: str
    status: Literal["ran", "unavailable", "skipped", "error"]
    reason: str | None = None
    options: dict[str, Any] = Field(default_factory=dict)
    auc: float | None = None
    auc_ci: list[float | None] | None = None
    accuracy: float | None = None
    accuracy_ci: list[float | None] | None = None
    tpr_at_fpr: list[RatePoint] = Field(default_factory=list)
    n_members: int = 0
    n_nonmembers: int = 0
    seconds: float = 0.0
    models_trained: int = 0
    roc: dict[str, list[float]] | None = Field(default=None, description="Evaluation-split ROC curve, down-sampled.")
    notes: list[str] = Field(default_factory=list)
    extras: dict[str, Any] = Field(default_factory=dict)

    @field_validator("auc", "accuracy", mode="before")
    @classmethod
    def _f(cls, v: Any) -> Any:
        return _finite(v)

    @field_validator("auc_ci", "accuracy_ci", mode="before")
    @classmethod
    def _fci(cls, v: Any) -> Any:
        return None if v is None else [_finite(x) for x in v]


class Report(BaseModel):
    """The whole outcome of ``privgate check``."""

    schema_version: int = SCHEMA_VERSION
    privgate_version: str
    verdict: Status
    summary: str
    policy: dict[str, Any]
    target: dict[str, Any]
    data: dict[str, Any]
    checks: list[CheckResult]
    attacks: list[AttackSummary]
    remediation: dict[str, Any] | None = None
    exposed: dict[str, Any] | None = Field(
        default=None,
        description="The members the strongest attack singles out (privgate.stats.exposure): their row in the members "
        "file, label, split, and per attack their score, rank and (fpr, tpr) point; `image` is an artefact path "
        "for image data.",
    )
    warnings: list[str] = Field(default_factory=list)
    environment: dict[str, Any]
    started: str
    duration_s: float
    #: PNG files this run wrote, {artefact path: bytes}, for the HTML to embed (privgate.report.html.attach_images);
    #: never serialised, never read from JSON: rendering a report never opens a path it names.
    _images: dict[str, bytes] = PrivateAttr(default_factory=dict)

    @property
    def exit_code(self) -> int:
        return {"pass": 0, "fail": 1, "inconclusive": 3}[self.verdict]

    def to_json(self) -> str:
        try:
            return self.model_dump_json(indent=2)
        except PydanticSerializationError:  # a lone surrogate: a file name that is not UTF-8
            from privgate.report.safe import deep, no_surrogates

            fixed = type(self).model_validate(deep(self.model_dump(), no_surrogates))
            return fixed.model_dump_json(indent=2)

    @classmethod
    def from_json(cls, text: str) -> Report:
        return cls.model_validate_json(text)
