"""The report family: pydantic models whose JSON is privgate's versioned output contract.

:class:`BaseReport` is what every job returns: job, verdict and summary, decided checks, ``target``,
``policy`` (or the claim audited), warnings, ``environment`` and exit code. Each job extends it with typed
sections (:class:`Report` for check/harden; :mod:`privgate.report.jobs.claims`,
:mod:`privgate.report.jobs.federation`), so every writer of :mod:`privgate.report` serves every job.
``schema_version`` changes only when a field is removed or changes meaning; new optional fields keep it.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field, PrivateAttr, field_validator
from pydantic_core import PydanticSerializationError

from privgate.report.numbers import finite_or_none
from privgate.report.remediation_section import RemediationSection

SCHEMA_VERSION = 1

Status = Literal["pass", "fail", "inconclusive"]

#: The one verdict → exit-code map (docs/cli.md, "Exit codes"); ``None`` is a run that measured without deciding
#: a policy (``privgate fl simulate``), which exits 0.
EXIT_CODES: dict[str | None, int] = {"pass": 0, "fail": 1, "inconclusive": 3, None: 0}

#: The jobs, as the ``job`` field of their reports names them.
Job = Literal["check", "harden", "audit-ldp", "audit-dpsgd", "fl-audit", "fl-simulate"]


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
    needed: dict[str, int] | None = Field(
        default=None,
        description="An inconclusive check: the members and non-members (in all) that would decide it at the observed "
        "value and this confidence in 80 % of audits; null when no size does (the reason says why).",
    )

    _v = field_validator("value", mode="before")(finite_or_none)

    @field_validator("ci", mode="before")
    @classmethod
    def _ci(cls, v: Any) -> Any:
        return [finite_or_none(x) for x in v]


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
        return finite_or_none(v)

    @field_validator("auc_ci", "accuracy_ci", mode="before")
    @classmethod
    def _fci(cls, v: Any) -> Any:
        return None if v is None else [finite_or_none(x) for x in v]


class BaseReport(BaseModel):
    """What every job's report holds; the format writers read only this (and a job's own section when they know it).

    Attributes:
        job: which job produced it (:data:`Job`).
        verdict: ``pass``, ``fail``, ``inconclusive``; ``None`` when no policy was decided (a simulation).
        summary: the verdict line the console ends with.
        policy: what the target was held to: the policy (name, source, sensitivity …) or, for a claim audit,
            the claim (``{"name": "claimed ε = 4", "epsilon": 4, …}``).
        target: what was audited: a model, a randomiser, a trainer, a federation (``path``, ``format``, …).
        checks: the decided checks, one per policy check or claim.
        environment: provenance (:func:`privgate.report.provenance.environment`): seed, threads, device, versions.
    """

    schema_version: int = SCHEMA_VERSION
    job: Job = "check"
    privgate_version: str
    verdict: Status | None
    summary: str
    policy: dict[str, Any] = Field(default_factory=dict)
    target: dict[str, Any] = Field(default_factory=dict)
    checks: list[CheckResult] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)
    environment: dict[str, Any] = Field(default_factory=dict)
    started: str = ""
    duration_s: float = 0.0

    @field_validator("policy", "target", mode="before")
    @classmethod
    def _mapping(cls, v: Any) -> Any:
        return {} if v is None else v

    @property
    def exit_code(self) -> int:
        """0 pass (or nothing decided), 1 fail, 3 inconclusive (:data:`EXIT_CODES`)."""
        return EXIT_CODES[self.verdict]

    def to_json(self) -> str:
        try:
            return self.model_dump_json(indent=2)
        except PydanticSerializationError:  # a lone surrogate: a file name that is not UTF-8
            from privgate.report.safe import deep, no_surrogates

            fixed = type(self).model_validate(deep(self.model_dump(), no_surrogates))
            return fixed.model_dump_json(indent=2)

    @classmethod
    def from_json(cls, text: str) -> Any:
        return cls.model_validate_json(text)


class Report(BaseReport):
    """The whole outcome of ``privgate check`` (and ``privgate harden``: the same report with ``remediation``)."""

    job: Literal["check", "harden"] = "check"
    verdict: Status
    data: dict[str, Any]
    attacks: list[AttackSummary]
    remediation: RemediationSection | None = Field(
        default=None, description="The DP-SGD search, its two ε and the DP statement (privgate harden)."
    )
    exposed: dict[str, Any] | None = Field(
        default=None,
        description="The members the strongest attack singles out (privgate.stats.exposed_members): their row in the "
        "members file, label, split, and per attack their score, rank and (fpr, tpr) point; `image` is an artefact "
        "path for image data.",
    )
    records: dict[str, Any] | None = Field(
        default=None,
        description="The records file (--records; privgate.report.records): its path, rows, columns and the base of "
        "`row`; the per-row scores are in that file, never in the JSON.",
    )
    #: PNG files this run wrote, {artefact path: bytes}, for the HTML to embed (privgate.report.html.attach_images);
    #: never serialised, never read from JSON: rendering a report never opens a path it names.
    _images: dict[str, bytes] = PrivateAttr(default_factory=dict)
    #: every audited row's scores as columns (privgate.report.records.build); never serialised
    _records: dict[str, list[Any]] | None = PrivateAttr(default=None)

    def records_table(self) -> dict[str, list[Any]] | None:
        """Every audited row's membership scores as columns (``privgate.report.records``), or None (a report read
        back from JSON, or a kind without per-row records)."""
        return self._records

    @classmethod
    def from_json(cls, text: str) -> Report:
        return cls.model_validate_json(text)
