"""What a language-model attack may use: the pooled records and one model's token-level scores of them.

A language-model attack sees what any attack sees (:class:`privgate.attacks.base.AttackContext`:
the pooled audit records, membership hidden) plus the target's per-token
log-probabilities of every record (:mod:`privgate.lm.scoring`), computed once
for all attacks, and the reference model's when one is given.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from privgate.attacks.base import AttackContext, AttackSkipped
from privgate.lm.scoring import TokenScores


@dataclass
class LMContext(AttackContext):
    """:class:`AttackContext` of a causal language model.

    Attributes:
        texts: the pooled records (``x`` holds the same records as an object array).
        scores: the target's :class:`TokenScores` of ``texts``.
        reference: the reference model's :class:`TokenScores` of ``texts`` (``--reference-model``), or ``None``.
        lm: the loaded target (:class:`privgate.inputs.targets.hf.LoadedLM`).
        fine_tuned: the :class:`privgate.lm.references.ReferenceFactory` of LiRA and RMIA (``None``: none).
        policy: the policy as it runs on a language model (:func:`privgate.lm.family.lm_policy`).
        members, nonmembers: the records of each side, in file order: for the measurements and the
            distribution-shift guard, which see membership (:mod:`privgate.lm.attacks.measures`); an attack never does.
        canaries, max_canaries: the canaries file and the most canaries it may hold (``canary_exposure``).
        batch_size: records per forward pass.
    """

    texts: list[str] = field(default_factory=list)
    scores: TokenScores | None = None
    reference: TokenScores | None = None
    lm: Any = None
    fine_tuned: Any = None
    policy: Any = None
    members: list[str] = field(default_factory=list)
    nonmembers: list[str] = field(default_factory=list)
    canaries: str | None = None
    max_canaries: int | None = None
    batch_size: int = 32


def lm_context(ctx: AttackContext, attack: str) -> LMContext:
    """``ctx`` as an :class:`LMContext`; an attack on a model that is not a causal language model is skipped."""
    if not isinstance(ctx, LMContext) or ctx.scores is None:
        raise AttackSkipped(f"'{attack}' attacks causal language models; the target is not one")
    return ctx


__all__ = ["LMContext", "lm_context"]
