"""The served surface: what an attacker of an API-released model sees of its outputs, and nothing more.

The rest (design, limits, derivations): docs/internals-inputs.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

Output = Literal["logits", "probabilities", "label"]

#: Floor of a probability without rounding (as :data:`privgate.outputs.TINY`).
TINY = 1e-300

#: The reason a black-box attack is not run against an API that serves labels only.
LABELS_ONLY = "not applicable: the API serves labels only"
#: The reason a white-box attack is not run against an API release.
NO_WEIGHTS = "not applicable: the model is released as an API (release: api), which serves no weights"


@dataclass
class QueryLog:
    """How many rows the audit sent to the served model (one query per row), shared by a target's copies."""

    rows: int = 0

    def add(self, n: int) -> None:
        self.rows += int(n)


@dataclass(frozen=True)
class Surface:
    """What the API returns for one query: ``output``, ``top_k`` classes, rounded to ``decimals``.

    Args:
        output: ``logits``, ``probabilities`` or ``label``.
        top_k: only the k highest classes are returned (``None``: all).
        decimals: returned values are rounded to this many decimals (``None``: full precision).
    """

    output: Output = "probabilities"
    top_k: int | None = None
    decimals: int | None = None

    @classmethod
    def of(cls, serves: Any) -> Surface:
        """The surface of a policy's :class:`~privgate.policy.serves.Serves` block."""
        return cls(serves.output, serves.top_k, serves.decimals)

    @property
    def labels_only(self) -> bool:
        return self.output == "label"

    @property
    def full(self) -> bool:
        """Every class at full precision: the transform changes nothing."""
        return not self.labels_only and self.top_k is None and self.decimals is None

    @property
    def floor(self) -> float:
        """The value of a probability that the API rounded to 0 (half the rounding unit), or :data:`TINY`.

        Rounded logits (log-probabilities) never round to a probability of 0, so theirs is :data:`TINY`.
        """
        return 0.5 * 10.0 ** (-self.decimals) if self.decimals is not None and self.output != "logits" else TINY

    def not_applicable(self, threat_model: str) -> str | None:
        """Why an attack with this threat model cannot run against the API, or ``None`` when it can."""
        if threat_model == "white-box":
            return NO_WEIGHTS
        if threat_model == "black-box" and self.labels_only:
            return LABELS_ONLY
        return None

    def log_proba(self, log_proba: np.ndarray) -> np.ndarray:
        """The log-probabilities an attacker reconstructs from the API's answer to these rows (module docstring).

        Args:
            log_proba: ``[..., K]`` full class log-probabilities of the model.

        Returns:
            ``[..., K]`` float64 log-probabilities, every row summing to 1.
        """
        lp = np.asarray(log_proba, dtype=np.float64)
        if self.full or lp.size == 0:
            return lp
        shape = lp.shape
        lp = lp.reshape(-1, shape[-1])
        n_classes = shape[-1]
        rows = np.arange(len(lp))
        if self.labels_only:
            out = np.full(lp.shape, np.log(TINY))
            out[rows, lp.argmax(axis=1)] = 0.0
            return out.reshape(shape)
        values = lp if self.output == "logits" else np.exp(lp)
        if self.decimals is not None:
            values = np.round(values, self.decimals)
        p = np.exp(values) if self.output == "logits" else np.maximum(values, self.floor)
        k = n_classes if self.top_k is None else min(self.top_k, n_classes)
        if k < n_classes:
            order = np.argsort(-lp, axis=1, kind="stable")
            returned = np.zeros(lp.shape, dtype=bool)
            returned[rows[:, None], order[:, :k]] = True
            served = np.where(returned, p, 0.0)
            rest = np.maximum(1.0 - served.sum(axis=1), 0.0) / (n_classes - k)
            lowest = np.where(returned, p, np.inf).min(axis=1)
            fill = np.maximum(np.minimum(rest, lowest), self.floor)
            p = np.where(returned, p, fill[:, None])
        out = np.log(p) - np.log(p.sum(axis=1, keepdims=True))
        return out.reshape(shape)

    def describe(self) -> dict[str, Any]:
        """The report's ``served`` facts: output, top_k, decimals, one phrase and how the answers were read."""
        return {
            "output": self.output,
            "top_k": self.top_k,
            "decimals": self.decimals,
            "description": self.phrase(),
            "reading": self.reading(),
        }

    def reading(self) -> str | None:
        """How a partial answer is read as log-probabilities (module docstring), for the report; None when whole."""
        parts = []
        if self.decimals is not None and self.output == "probabilities":
            parts.append(f"a value rounded to 0 reads as {self.floor:g}, half the rounding unit, never log 0")
        if self.top_k is not None:
            parts.append(
                f"the mass outside the top {self.top_k} is spread uniformly over the unseen classes "
                "but none above the smallest returned value"
            )
        if self.labels_only:
            parts.append("black-box attacks do not apply; the label-only attacks decide")
        return "; ".join(parts) or None

    def phrase(self) -> str:
        """``top-1 probabilities rounded to 2 decimals``, ``labels only``, ``probabilities of every class``."""
        if self.labels_only:
            return "labels only"
        what = f"top-{self.top_k} {self.output}" if self.top_k else f"{self.output} of every class"
        return what + (f" rounded to {self.decimals} decimals" if self.decimals is not None else "")


def surface_of(policy: Any) -> Surface | None:
    """The surface a policy's release serves: ``None`` for ``release: model`` (whoever holds the weights sees all)."""
    release = getattr(policy.release, "value", policy.release)
    return Surface.of(policy.served()) if release == "api" else None


__all__ = ["LABELS_ONLY", "NO_WEIGHTS", "QueryLog", "Surface", "surface_of"]
