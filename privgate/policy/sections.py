"""The sections of a policy besides its checks: the metrics a check may bound, the utility floor, the
tolerances of ``privgate diff`` (``regression:``) and DP-SGD remediation (``remediation:``, with the accounted
ε search: Liu & Talwar 2019, arXiv 1811.07971; Papernot & Steinke 2022, arXiv 2110.03620).

:mod:`privgate.policy.schema` assembles them into :class:`~privgate.policy.schema.Policy`.
"""

from __future__ import annotations

import math
from enum import Enum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from privgate.policy.capacity_rules import ladder_problem


class Strict(BaseModel):
    """A policy section: unknown keys are errors."""

    model_config = ConfigDict(extra="forbid")


class Metric(str, Enum):
    accuracy = "accuracy"
    auc = "auc"
    advantage = "advantage"
    tpr_at_fpr = "tpr_at_fpr"
    epsilon_lb = "epsilon_lb"
    similarity = "similarity"
    attribute_advantage = "attribute_advantage"
    exposure = "exposure"  # canary exposure in bits (language models, Carlini et al. 2019)
    extraction_rate = "extraction_rate"  # verbatim extraction, members in excess of non-members (language models)
    isolated_fraction = "isolated_fraction"  # members a released tree model isolates in small leaves (structural)


class Utility(Strict):
    """The utility floor that remediation must respect (used by DP retraining).

    Utility is the model's accuracy on held-out data (the audit's population,
    else its non-members). With both ``min`` and ``max_drop`` the stricter
    floor applies; with neither there is no floor.
    """

    metric: Literal["accuracy"] = "accuracy"
    min: float | None = Field(default=None, ge=0, le=1, description="Absolute floor on held-out accuracy.")
    max_drop: float | None = Field(
        default=None, ge=0, le=1, description="Largest acceptable drop from the original model."
    )
    relative: bool = Field(default=False, description="Read max_drop relative to the original accuracy.")


#: Tolerances of ``privgate diff`` when a policy does not set them: ``tolerance`` for every metric on a
#: 0–1 scale, twice that for the advantage (= 2·accuracy − 1), 0.5 for ε.
DEFAULT_TOLERANCE = 0.02
DEFAULT_METRIC_TOLERANCES = {"advantage": 0.04, "epsilon_lb": 0.5}


class Regression(Strict):
    """How much worse a metric may get between two reports before ``privgate diff`` calls it a regression.

    Tolerances are absolute, in the metric's units. A change counts only when the
    data prove it larger than its tolerance (the lower end of the change's
    interval is above it), see :mod:`privgate.report.diff`. ``metrics`` sets
    single metrics; advantage (0.04) and epsilon_lb (0.5) keep their own defaults
    unless listed there.
    """

    tolerance: float = Field(
        default=DEFAULT_TOLERANCE, ge=0, description="Tolerance of every metric not listed under 'metrics'."
    )
    metrics: dict[Metric, float] = Field(default_factory=dict, description="Tolerance of single metrics.")

    @field_validator("metrics")
    @classmethod
    def _non_negative(cls, v: dict[Metric, float]) -> dict[Metric, float]:
        bad = [m.value for m, t in v.items() if not (math.isfinite(t) and t >= 0)]
        if bad:
            raise ValueError(f"tolerances must be numbers >= 0 ({', '.join(bad)})")
        return v

    def resolved(self) -> dict[str, Any]:
        """``{"tolerance": t, "metrics": {metric: t_m}}`` with the per-metric defaults filled in (for the report)."""
        metrics = {**DEFAULT_METRIC_TOLERANCES, **{m.value: float(t) for m, t in self.metrics.items()}}
        return {"tolerance": float(self.tolerance), "metrics": metrics}


class RandomTrials(Strict):
    """The random number of trials of a random-stopping search (Papernot & Steinke 2022, arXiv 2110.03620)."""

    distribution: Literal["geometric", "logarithmic", "negative_binomial", "poisson"] = Field(
        default="geometric", description="Distribution of the number of trials (geometric: Liu & Talwar 2019)."
    )
    mean: float = Field(default=3.0, ge=1, le=1000, description="Expected number of trials.")
    shape: float = Field(default=0.5, gt=0, le=100, description="η of the truncated negative binomial.")

    @field_validator("mean")
    @classmethod
    def _finite_mean(cls, v: float) -> float:
        if not math.isfinite(v):
            raise ValueError("the mean number of trials must be a finite number >= 1")
        return v


class Remediation(Strict):
    """How privgate may retrain a failing model with DP-SGD (see ``privgate.dp.remediate``)."""

    enabled: bool = Field(
        default=False, description="Allow `--remediate` / `privgate harden` to retrain a failing model."
    )
    epsilons: list[float] = Field(
        default_factory=lambda: [50.0, 20.0, 10.0, 5.0, 2.0, 1.0], description="ε schedule, strictly decreasing."
    )
    strategy: Literal["ladder", "bisect"] = Field(
        default="ladder", description="ladder: walk down until pass; bisect: binary search, fewest trainings."
    )
    delta: float | Literal["auto"] = Field(
        default="auto", description="δ of the guarantee; auto = 1/(10·N) for N training rows."
    )
    accountant: Literal["prv", "rdp"] = Field(
        default="prv", description="Privacy accountant; prv falls back to rdp when it fails."
    )
    max_grad_norm: float | Literal["auto"] = Field(
        default=1.0, description="Per-example clipping norm, or auto (noise-free search over 10^k)."
    )
    epochs: int | None = Field(default=None, ge=1, description="DP-SGD epochs (default: the recipe's).")
    batch_size: int | None = Field(
        default=None,
        ge=1,
        description="Expected logical batch size (default: the recipe's); DP-SGD prefers larger batches.",
    )
    max_physical_batch_size: int = Field(
        default=256, ge=1, description="Most examples per forward/backward pass (memory only)."
    )
    audit: bool = Field(
        default=False,
        description="Audit the chosen ε: one more DP-SGD run with the hardened model's settings and gradient "
        "canaries (privgate audit dpsgd); the report shows the claim next to the measured lower bound.",
    )
    audit_canaries: int = Field(
        default=1000, ge=2, description="Canaries of that audit (at most the model's parameters)."
    )
    search: Literal["compose", "random_stopping"] = Field(
        default="compose",
        description="How the released ε counts the search: compose every candidate trained (the ladder or bisect "
        "strategy), or random_stopping (Papernot & Steinke 2022: a random number of trials, each at an ε drawn "
        "from the schedule; the best accepted one is released).",
    )
    trials: RandomTrials = Field(
        default_factory=lambda: RandomTrials(), description="random_stopping: the number of trials' distribution."
    )
    max_total_epsilon: float | None = Field(
        default=None,
        gt=0,
        allow_inf_nan=False,
        description="Largest released ε (the search included); a search that would exceed it stops, hands out no "
        "model and exits 1.",
    )
    capacity: list[dict[str, Any]] | None = Field(
        default=None,
        description="scikit-learn models (no DP-SGD): the settings to try, least to most regularised, each a "
        "set_params dict of regularisation settings to numbers (e.g. [{classifier__min_samples_leaf: 8}, "
        "{classifier__min_samples_leaf: 32}]), at most 32 steps, only the settings privgate.policy.capacity_rules "
        "allows; default: privgate's ladder for the estimator (docs/remediation.md).",
    )
    max_perplexity: float | None = Field(
        default=None,
        gt=1,
        allow_inf_nan=False,
        description="Language models: the utility floor as a ceiling on held-out perplexity (absolute).",
    )
    max_perplexity_ratio: float | None = Field(
        default=None,
        ge=1,
        allow_inf_nan=False,
        description="Language models: the ceiling as a multiple of the audited model's held-out perplexity "
        "(with max_perplexity too, the stricter applies).",
    )

    @field_validator("delta")
    @classmethod
    def _delta(cls, v: float | str) -> float | str:
        if v != "auto" and not 0 < float(v) < 1:
            raise ValueError("δ must be 'auto' or a number between 0 and 1 (well below 1/N for N training rows)")
        return v

    @field_validator("max_grad_norm")
    @classmethod
    def _clip(cls, v: float | str) -> float | str:
        if v != "auto" and not (math.isfinite(float(v)) and float(v) > 0):
            raise ValueError("max_grad_norm must be 'auto' or a positive number")
        return v

    @field_validator("capacity", mode="before")
    @classmethod
    def _capacity(cls, v: Any) -> Any:
        problem = None if v is None else ladder_problem(v)
        if problem:
            raise ValueError(problem)
        return v

    @field_validator("epsilons")
    @classmethod
    def _decreasing(cls, v: list[float]) -> list[float]:
        if not v:
            raise ValueError("needs at least one ε")
        if any(e <= 0 or not math.isfinite(e) for e in v):
            raise ValueError("every ε must be a positive finite number")
        if any(b >= a for a, b in zip(v, v[1:])):
            raise ValueError("ε values must be strictly decreasing (the search walks from weak to strong privacy)")
        return v
