"""The federated audit's report: versioned pydantic models, the JSON contract of ``privgate fl``.

One :class:`TopologyResult` per topology (several run side by side for
comparison). Matrices are indexed ``[round][attacker][victim]`` (rounds and
nodes 0-based; node names in ``node_names``); intervals are ``[lo, hi]``.
``mia`` is the headline matrix: by default the strongest attack's AUC per pair
(``attack: best``; its interval is the chosen attack's at 1 − α/m for m
attacks). ``schema_version`` changes only when a field is removed or changes
meaning.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, Field

from privgate.report.model import SCHEMA_VERSION, BaseReport, Status

FL_SCHEMA_VERSION = SCHEMA_VERSION

Cube = list[list[list[float | None]]]


def _f(v: Any) -> float | None:
    v = float(v)
    return v if math.isfinite(v) else None


def cube(values: np.ndarray) -> Cube:
    """``[R, N, N]`` numbers → nested lists, NaN → None."""
    return [[[_f(v) for v in row] for row in plane] for plane in values]


def cube_ci(values: np.ndarray) -> list[list[list[list[float | None]]]]:
    """``[R, N, N, 3]`` (value, lo, hi) → the ``[lo, hi]`` intervals as nested lists."""
    return [[[[_f(c[1]), _f(c[2])] for c in row] for row in plane] for plane in values]


class Matrix(BaseModel):
    """One metric per round, attacker and victim, with pointwise intervals at the report's confidence."""

    values: Cube
    ci: list[list[list[list[float | None]]]]

    @classmethod
    def of(cls, triples: np.ndarray) -> Matrix:
        return cls(values=cube(triples[..., 0]), ci=cube_ci(triples))

    def final(self) -> np.ndarray:
        """The final round's ``[N, N]`` values (NaN where missing)."""
        return np.array([[np.nan if v is None else v for v in row] for row in self.values[-1]], dtype=float)


class AttackMatrices(BaseModel):
    """Everything one attack achieved: AUC, TPR at the report's FPR (and the FPR achieved), precision, recall, F1."""

    name: str
    auc: Matrix
    tpr_at_fpr: Matrix
    fpr_achieved: Matrix
    precision: Matrix = Field(description="At equal priors: TPR / (TPR + FPR) at the calibrated threshold.")
    recall: Matrix
    f1: Matrix


class MIA(BaseModel):
    """The headline matrix ``values[round][attacker][victim]``."""

    metric: Literal["auc"] = "auc"
    attack: str = Field(description="'best' (the strongest attack per pair) or an attack's name.")
    confidence: float = Field(description="Confidence of each interval (Bonferroni over the attacks for 'best').")
    values: Cube
    ci: list[list[list[list[float | None]]]]
    chosen: list[list[list[str]]] | None = Field(default=None, description="For 'best': the attack of each pair.")


class Accuracy(BaseModel):
    """Held-out accuracy ``values[round][node]`` of every node's model, with Clopper-Pearson intervals."""

    values: list[list[float]]
    ci: list[list[list[float]]]
    n: int
    confidence: float


class TopologyResult(BaseModel):
    """One federation (simulated or audited) under one topology."""

    topology: dict[str, Any]
    nodes: int
    rounds: int
    distribution: str
    node_names: list[str]
    shard_sizes: list[int]
    label_counts: list[list[int]]
    victims: list[dict[str, int]] = Field(description="Per victim: members, matched non-members, evaluation halves.")
    accuracy: Accuracy
    mia: MIA
    attacks: list[AttackMatrices]
    edges: list[list[int]]
    summary: dict[str, Any] = Field(description="Final-round mean of the headline metric by hop distance, etc.")
    training: dict[str, Any] = Field(default_factory=dict)
    seconds: dict[str, float] = Field(default_factory=dict)
    notes: list[str] = Field(default_factory=list)


class FederationReport(BaseReport):
    """The outcome of ``privgate fl simulate`` (``job: fl-simulate``) or ``privgate fl audit`` (``job: fl-audit``).

    ``verdict`` is the policy's with ``--policy`` (its checks in ``checks``), else ``None``: measured, not decided.
    """

    job: Literal["fl-simulate", "fl-audit"] = "fl-simulate"
    kind: Literal["simulation", "audit"]
    source: dict[str, Any] = Field(description="Recipe and data (simulation) or the manifest (audit).")
    attacks: list[str]
    fpr: float
    confidence: float
    topologies: list[TopologyResult]
    verdict: Status | None = Field(default=None, description="With --policy: the policy's verdict.")
    summary: str = ""

    @classmethod
    def from_json(cls, text: str) -> FederationReport:
        return cls.model_validate_json(text)


def hop_summary(values: np.ndarray, hops: np.ndarray) -> dict[str, Any]:
    """Final-round means of an ``[N, N]`` matrix: the diagonal (self), by hop distance, and unreachable pairs."""
    out: dict[str, Any] = {"self": _f(np.nanmean(np.diag(values))) if len(values) else None}
    off = ~np.eye(len(values), dtype=bool)
    out["others"] = _f(np.nanmean(values[off])) if off.any() else None
    by_hop = {}
    for h in sorted(set(hops[off].tolist())):
        sel = off & (hops == h)
        by_hop["unreachable" if h < 0 else str(h)] = _f(np.nanmean(values[sel]))
    out["by_hop"] = by_hop
    return out


__all__ = [
    "FL_SCHEMA_VERSION",
    "MIA",
    "Accuracy",
    "AttackMatrices",
    "FederationReport",
    "Matrix",
    "TopologyResult",
    "cube",
    "cube_ci",
    "hop_summary",
]
