"""The distinguishing game of Matsumoto et al. 2022 (arXiv 2206.09122) (Algorithms 3 and 4), K trials at once.

A trial submits the randomised report of g₁ or g₂ (alternating, so each gets about K/2) and a distinguisher —
white-box (Eq. 5, cosine) or black-box after the server step (Eqs. 4, 6, 7; the rule per adversary is
:data:`privgate.audits.ldp_names.BLACK_BOX_RULE`) — guesses which; FP = P[guess g₂ | g₁], FN = P[guess
g₁ | g₂]. Trials run in chunks of whole tensors that bound memory; both distinguishers of an adversary read the
same reports. Eq. 7 is oriented against the server's step (the paper prints "≥ 0"): see
``docs/internals-dp-audits.md``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from privgate.audits.ldp_adversaries import Crafted
from privgate.audits.ldp_gradients import FunctionalModel, rows_per_chunk
from privgate.audits.ldp_mechanism import call_mechanism, server_update

#: Elements per chunk of trials (trials × d): 4 Mi, 32 MiB for the float64 server step.
TRIAL_CHUNK_ELEMENTS = 1 << 22


@dataclass
class Counts:
    """Outcome of one cell: trials per hypothesis and the errors of each kind."""

    trials_g1: int = 0
    trials_g2: int = 0
    fp: int = 0  # guessed g₂ when the source was g₁
    fn: int = 0  # guessed g₁ when the source was g₂

    @property
    def trials(self) -> int:
        return self.trials_g1 + self.trials_g2

    def add(self, source_g2: torch.Tensor, guess_g2: torch.Tensor) -> None:
        self.trials_g2 += int(source_g2.sum())
        self.trials_g1 += int((~source_g2).sum())
        self.fp += int((guess_g2 & ~source_g2).sum())
        self.fn += int((~guess_g2 & source_g2).sum())


def white_box_guess(reports: torch.Tensor, g1: torch.Tensor, g2: torch.Tensor, flipped: bool) -> torch.Tensor:
    """True where Eq. 5 guesses g₂: cos(ĝ, g₁) < cos(ĝ, g₂) (‖ĝ‖ is common to both sides; 0 against a zero vector).

    With g₂ = −g₁ (``flipped``) this is ⟨ĝ, g₁⟩ < 0.
    """
    tiny = torch.finfo(reports.dtype).tiny
    c1 = torch.linalg.vecdot(reports, g1) / g1.norm(dim=1).clamp_min(tiny)
    if flipped:
        return c1 < 0
    return c1 < torch.linalg.vecdot(reports, g2) / g2.norm(dim=1).clamp_min(tiny)


def black_box_guess(
    adv: Crafted,
    model: FunctionalModel,
    reports: torch.Tensor,
    i: torch.Tensor,
    j: torch.Tensor,
    epsilon: float,
    clip: float,
) -> torch.Tensor:
    """True where the black-box distinguisher guesses g₂, from θ_t and θ_{t+1} only (float64)."""
    theta = adv.theta.double()
    after = server_update(theta, reports.double(), epsilon, clip, adv.radius)
    if adv.rule == "eq7":
        return torch.sign(after - theta.unsqueeze(0)).sum(dim=1) > 0
    loss1 = model.losses_at(after, adv.x[i], adv.y[i])
    if adv.rule == "eq4":
        return loss1 > adv.base_loss[i]
    loss2 = model.losses_at(after, adv.x[j], adv.y[j])
    return (loss1 - adv.base_loss[i]).abs() < (loss2 - adv.base_loss[j]).abs()


def play(
    adv: Crafted,
    model: FunctionalModel,
    randomise: Callable[..., torch.Tensor],
    mechanism_name: str,
    epsilon: float,
    clip: float,
    trials: int,
    distinguishers: tuple[str, ...],
    generator: torch.Generator,
    progress: Callable[[int], None] | None = None,
    chunk: int | None = None,
) -> dict[str, Counts]:
    """Play ``trials`` games of adversary ``adv`` against ``randomise`` at ε; one :class:`Counts` per distinguisher.

    Args:
        adv: the crafter's precomputed pool.
        model: reads θ for the black-box distinguisher.
        randomise: the client randomiser (Algorithm 1, or the user's).
        mechanism_name: for error messages.
        epsilon: the claimed ε, passed to the randomiser and the server step.
        clip: L.
        trials: K.
        distinguishers: ``"black_box"`` and/or ``"white_box"``.
        generator: the only source of randomness.
        progress: called with the number of trials just finished.
        chunk: trials per batch (default: :data:`TRIAL_CHUNK_ELEMENTS` / d).
    """
    out = {name: Counts() for name in distinguishers}
    step = chunk or rows_per_chunk(model.d, TRIAL_CHUNK_ELEMENTS)
    for start in range(0, trials, step):
        n = min(step, trials - start)
        source_g2 = torch.arange(start, start + n) % 2 == 1
        i, j = adv.draw(n, generator)
        g1, g2 = adv.pairs(i, j)
        if adv.g2 is None:  # g₂ = −g₁: the submitted gradient is ±g₁
            submitted = g1 * torch.where(source_g2, -1.0, 1.0).to(g1.dtype).unsqueeze(1)
        else:
            submitted = torch.where(source_g2.unsqueeze(1), g2, g1)
        reports = call_mechanism(randomise, mechanism_name, submitted, epsilon, clip, generator)
        if "white_box" in out:
            out["white_box"].add(source_g2, white_box_guess(reports, g1, g2, adv.g2 is None))
        if "black_box" in out:
            out["black_box"].add(source_g2, black_box_guess(adv, model, reports, i, j, epsilon, clip))
        if progress is not None:
            progress(n)
    return out


__all__ = ["Counts", "TRIAL_CHUNK_ELEMENTS", "black_box_guess", "play", "white_box_guess"]
