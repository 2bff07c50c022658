"""White-box canaries for privgate's own DP-SGD: Dirac gradient canaries inside Opacus' optimiser step.

Steinke, Nasr & Jagielski 2023 (arXiv 2305.08846, §6, white-box): canary i is the gradient C·e_{jᵢ} (already
clipped), which joins each step's Poisson batch at the run's rate q when included, before the Gaussian noise;
it is hooked into Opacus' ``DPOptimizer.add_noise``, so σ, q and the steps audited are exactly the run's. The
auditor knows the other records and subtracts their clipped sum, so a score is C·(steps that sampled it) plus
N(0, Tσ²C²): a bug in σ, its calibration or the noise shows; clipping of real examples is not exercised. The
derivation: ``docs/internals-dp-audits.md``.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from privgate.dpsgd.records import DPSettings, DPTraining
from privgate.dpsgd.train import make_private_module, train_dp
from privgate.errors import RecipeError
from privgate.recipe import Recipe


@dataclass
class GradientCanaries:
    """m Dirac canaries: flat coordinates, who is included, and the scores accumulated over the run."""

    coords: np.ndarray  # [m] flat indices into the trainable parameters, in the optimiser's order
    included: np.ndarray  # [m] bool
    clip: float
    generator: torch.Generator  # the canaries' own Poisson sampling
    scores: torch.Tensor | None = None  # [m] float64
    steps: int = 0
    sampled: int = 0  # canary-steps in all (included canaries that joined a batch)

    @property
    def m(self) -> int:
        return len(self.coords)


def choose_coordinates(d: int, m: int, seed: int) -> np.ndarray:
    """m distinct random coordinates among d trainable parameters (fixed before training, independent of S)."""
    if d < m:
        raise RecipeError(
            f"the model has {d} trainable parameters, fewer than the {m} gradient canaries (one coordinate each); "
            "lower --canaries or use a larger model."
        )
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0xCA4A]))
    return np.sort(rng.choice(d, size=m, replace=False))


def install(optimizer: Any, canaries: GradientCanaries, sample_rate: float) -> None:
    """Wrap ``optimizer.add_noise`` (an Opacus DPOptimizer) to add the sampled canaries and record their scores."""
    params = list(optimizer.params)
    sizes = [p.numel() for p in params]
    if int(canaries.coords.max()) >= sum(sizes):  # pragma: no cover - coordinates come from the same model
        raise RuntimeError("gradient canary coordinates beyond the optimiser's parameters")
    offsets = np.cumsum([0, *sizes])
    owner = np.searchsorted(offsets, canaries.coords, side="right") - 1
    groups = []
    for k, p in enumerate(params):
        ids = np.flatnonzero(owner == k)
        if len(ids):
            groups.append((p, torch.as_tensor(canaries.coords[ids] - offsets[k]), torch.as_tensor(ids)))
    included = torch.as_tensor(canaries.included)
    canaries.scores = torch.zeros(canaries.m, dtype=torch.float64)
    original = optimizer.add_noise

    def add_noise_with_canaries() -> None:
        joined = included & (torch.rand(canaries.m, generator=canaries.generator) < sample_rate)  # drawn on the CPU
        data_part = []
        for p, local, ids in groups:
            summed = p.summed_grad
            here = local.to(summed.device)  # the gradients' device: the canaries meet them there
            data_part.append(summed.reshape(-1)[here].double().cpu())
            push = torch.zeros(summed.numel(), dtype=summed.dtype, device=summed.device)
            push.index_add_(0, here, (joined[ids].to(summed.dtype) * canaries.clip).to(summed.device))
            p.summed_grad = summed + push.view_as(summed)
        original()
        for (p, local, ids), before in zip(groups, data_part):
            canaries.scores[ids] += p.grad.reshape(-1)[local.to(p.grad.device)].double().cpu() - before
        canaries.steps += 1
        canaries.sampled += int(joined.sum())

    optimizer.add_noise = add_noise_with_canaries


def train_with_canaries(
    recipe: Recipe,
    x: np.ndarray,
    y: np.ndarray,
    seed: int,
    settings: DPSettings,
    target_epsilon: float,
    m: int,
) -> tuple[nn.Module, DPTraining, GradientCanaries]:
    """One DP-SGD run of ``recipe`` at ``target_epsilon`` (:func:`privgate.dpsgd.train.train_dp`), m gradient canaries.

    Returns the trained model, the run's :class:`DPTraining` record (σ, q, steps
    and the accountant's ε) and the canaries with their scores.
    """
    private, _ = make_private_module(recipe.build(seed=seed), recipe.name)  # the architecture DP-SGD trains
    coords = choose_coordinates(sum(p.numel() for p in private.parameters() if p.requires_grad), m, seed)
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0x51]))
    canaries = GradientCanaries(
        coords, rng.random(m) < 0.5, settings.max_grad_norm, torch.Generator().manual_seed(seed + 0xCA)
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model, record = train_dp(
            recipe,
            x,
            y,
            seed,
            settings=settings,
            target_epsilon=target_epsilon,
            instrument=lambda optimizer, rate: install(optimizer, canaries, rate),
        )
    return model, record, canaries


__all__ = ["GradientCanaries", "choose_coordinates", "install", "train_with_canaries"]
