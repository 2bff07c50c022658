"""A model privgate can only query: rows in, one output row per input row out.

The rest (design, limits, derivations): docs/internals-inputs.md.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import numpy as np

from privgate import outputs as _outputs
from privgate.errors import TargetError

#: Rows a black box is asked about at once (a request to an endpoint may be smaller: its own batch size).
BATCH = 4096


class BlackBox(ABC):
    """Raw outputs of a queried model, read as class probabilities.

    Subclasses implement :meth:`raw` and set :attr:`source` and :attr:`fmt`;
    :attr:`kind` is set when the format says how its outputs read, else fixed
    by :meth:`detect_outputs`.
    """

    source: str = "<black box>"
    fmt: str = "black-box"
    kind: _outputs.Kind | None = None
    #: The kind of target it makes (:attr:`privgate.inputs.target.Target.kind`; a scikit-learn model's: ``sklearn``).
    target_kind: str = "tabular"

    @abstractmethod
    def raw(self, x: np.ndarray) -> np.ndarray:
        """The model's raw outputs on the rows ``x`` (float64, one row or one value per input row)."""

    def describe(self) -> dict[str, Any]:
        """What the report's target section records of this model besides path, format and hash."""
        return {"outputs_read_as": self.kind}

    # ------------------------------------------------------------------ what Target calls

    def _read(self, x: np.ndarray) -> np.ndarray:
        parts = []
        for start in range(0, len(x), BATCH):
            raw = np.asarray(self.raw(np.asarray(x[start : start + BATCH])), dtype=np.float64)
            kind = self._kind(raw)
            parts.append(_outputs.log_proba(raw, kind))
        return np.concatenate(parts) if parts else np.zeros((0, 0))

    def _kind(self, raw: np.ndarray) -> _outputs.Kind:
        kind = _outputs.kind_of(raw)
        if kind is None:
            raise TargetError(
                f"{self.source}: the model returned shape {tuple(raw.shape)}, expected [batch, classes] logits or "
                "probabilities, or one logit per row."
            )
        if self.kind is None:
            return kind
        if (self.kind == _outputs.BINARY) != (kind == _outputs.BINARY):
            raise TargetError(
                f"{self.source}: the model returned shape {tuple(raw.shape)}, unlike its earlier {self.kind} outputs."
            )
        return self.kind

    def predict_log_proba(self, x: np.ndarray) -> np.ndarray:
        """``[n, K]`` float64 log class probabilities, unsaturated (:func:`privgate.outputs.log_proba`)."""
        return self._read(x)

    def predict_proba(self, x: np.ndarray) -> np.ndarray:
        """``[n, K]`` class probabilities."""
        return np.exp(self._read(x))

    def detect_outputs(self, x: np.ndarray) -> tuple[str | None, str | None]:
        """Fix how the raw outputs are read from a probe of the audit rows, as :meth:`Target.detect_outputs` does.

        Returns the report's note on the reading and a warning when a single
        output looks like a sigmoid's probability.
        """
        if self.kind is not None:  # the format said it (a tree's objective): the report's target section records it
            return None, None
        raw = np.asarray(self.raw(np.asarray(x)), dtype=np.float64)
        self.kind = self._kind(raw)
        return _outputs.note(self.kind, len(raw)), _outputs.sigmoid_hint(raw, self.kind)


__all__ = ["BATCH", "BlackBox"]
