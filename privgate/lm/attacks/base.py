"""The shape every language-model membership attack shares: one score per record from token-level numbers."""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from privgate.attacks.base import Attack, AttackContext, AttackResult
from privgate.lm.attacks.context import LMContext, lm_context


class RecordAttack(Attack):
    """A membership score per record computed from :class:`~privgate.lm.attacks.context.LMContext` alone."""

    threat_model = "black-box"

    def score(self, ctx: LMContext) -> np.ndarray:
        """One score per pooled record (higher = more likely a member)."""
        raise NotImplementedError

    def notes(self, ctx: LMContext) -> list[str]:
        return []

    def run(self, ctx: AttackContext) -> AttackResult:
        start = time.perf_counter()
        lm = lm_context(ctx, self.name)
        scores = np.asarray(self.score(lm), dtype=np.float64)
        return AttackResult(
            attack=self.name,
            threat_model=self.threat_model,
            scores=scores,
            seconds=time.perf_counter() - start,
            options=dict(self.options),
            notes=self.notes(lm),
        )


def fraction_option(name: str, value: Any) -> float:
    """A fraction option in (0, 1]."""
    from privgate.errors import shown

    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < float(value) <= 1:
        raise ValueError(f"option {name} must be a number in (0, 1], got {shown(value)}")
    return float(value)


__all__ = ["RecordAttack", "fraction_option"]
