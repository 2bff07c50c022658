"""White-box canaries for privgate's own DP-SGD: Dirac gradient canaries inside Opacus' optimiser step.

Steinke, Nasr & Jagielski 2023 (arXiv 2305.08846, §6, white-box): canary i is a
*gradient*, C·e_{jᵢ}, zero everywhere but one coordinate jᵢ of the model's
parameters (distinct coordinates for distinct canaries), with norm exactly the
clipping norm C, so clipping leaves it unchanged. It is a training record like
any other: when included (probability 1/2, once, before training) it joins each
step's Poisson batch independently with the run's sampling rate q, and its
clipped gradient is added to the sum of clipped gradients before the Gaussian
noise N(0, σ²C²·I). This is hooked into Opacus' ``DPOptimizer.add_noise`` —
the step every privgate DP-SGD run (``privgate harden``, remediation) takes — so
the audited noise, σ (from ``make_private_with_epsilon``), q and the number of
steps are exactly those of the run.

The auditor observes every step's noisy gradient sum g̃_t (the output whose
privacy the accountant composes) and knows the other training records — the
adversary of the DP definition does — so it subtracts their clipped sum d_t:

    score_i = Σ_t (g̃_t − d_t)[jᵢ] = C · #{steps that sampled canary i} + N(0, T σ² C²)   (included)
                                  = N(0, T σ² C²)                                        (excluded).

What remains is exactly the privacy mechanism: a bug in σ, in its calibration
to ε, or noise that is never added shows up in these scores; clipping of real
examples is not exercised (the canaries are born clipped).
"""

from __future__ import annotations

import math
import time
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from privgate.dp.train import DPSettings, DPTraining, _fresh, _make_private, _run_epochs, _spent_epsilon
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


def choose_coordinates(model: nn.Module, m: int, seed: int) -> np.ndarray:
    """m distinct random coordinates of the trainable parameters (fixed before training, independent of S)."""
    d = sum(p.numel() for p in model.parameters() if p.requires_grad)
    if d < m:
        raise RecipeError(f"the model has {d} trainable parameters, fewer than the {m} gradient canaries (one coordinate each); lower --canaries or use a larger model.")
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0xCA4A]))
    return np.sort(rng.choice(d, size=m, replace=False))


def install(optimizer: Any, canaries: GradientCanaries, sample_rate: float) -> None:
    """Wrap ``optimizer.add_noise`` (an Opacus DPOptimizer) to add the sampled canaries and record their scores."""
    params = list(optimizer.params)
    sizes = [p.numel() for p in params]
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
        joined = included & (torch.rand(canaries.m, generator=canaries.generator) < sample_rate)
        data_part = []
        for p, local, ids in groups:
            summed = p.summed_grad
            data_part.append(summed.reshape(-1)[local].double())
            push = torch.zeros(summed.numel(), dtype=summed.dtype, device=summed.device)
            push.index_add_(0, local, joined[ids].to(summed.dtype) * canaries.clip)
            p.summed_grad = summed + push.view_as(summed)
        original()
        for (p, local, ids), before in zip(groups, data_part):
            canaries.scores[ids] += p.grad.reshape(-1)[local].double() - before
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
    """One DP-SGD run of ``recipe`` at ``target_epsilon`` (as :func:`privgate.dp.train.train_dp`) with m gradient canaries.

    Returns the trained model, the run's :class:`DPTraining` record (σ, q, steps
    and the accountant's ε) and the canaries with their scores.
    """
    xt = torch.as_tensor(np.ascontiguousarray(x), dtype=torch.float32)
    yt = torch.as_tensor(np.asarray(y), dtype=torch.long)
    n = len(yt)
    batch = min(settings.batch_size, n)
    model, changes = _fresh(recipe, seed)
    coords = choose_coordinates(model, m, seed)
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0x51]))
    canaries = GradientCanaries(coords, rng.random(m) < 0.5, settings.max_grad_norm, torch.Generator().manual_seed(seed + 0xCA))
    optimizer = recipe.make_optimizer(model.parameters())
    data_gen = torch.Generator().manual_seed(int(seed))
    noise_gen = torch.Generator().manual_seed(int(seed) + 0x5EED)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(xt, yt), batch_size=batch, generator=data_gen)
    t0 = time.perf_counter()
    engine, module, dp_opt, criterion, dp_loader, note = _make_private(model, optimizer, loader, settings, noise_gen, target_epsilon, None)
    calibration = time.perf_counter() - t0
    install(dp_opt, canaries, float(dp_loader.sample_rate))
    t1 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _run_epochs(module, dp_opt, criterion, dp_loader, settings.epochs, settings.max_physical_batch_size)
    seconds = time.perf_counter() - t1
    history = list(engine.accountant.history)
    sigma = float(dp_opt.noise_multiplier)
    eps, used, spent_note = (math.inf, "none (σ = 0)", None) if sigma <= 0 else _spent_epsilon(engine.accountant, settings.delta, history)
    record = DPTraining(
        target_epsilon=float(target_epsilon), epsilon=eps, delta=settings.delta, noise_multiplier=sigma,
        max_grad_norm=settings.max_grad_norm, sample_rate=float(dp_loader.sample_rate), steps=int(sum(h[2] for h in history)),
        epochs=settings.epochs, batch_size=batch, accountant=used, n_train=n, seconds=seconds, calibration_seconds=calibration,
        accountant_note="; ".join(s for s in (note, spent_note) if s) or None, architecture_changes=changes,
        grad_sample_mode=settings.grad_sample_mode,
    )
    return model, record, canaries


__all__ = ["GradientCanaries", "choose_coordinates", "install", "train_with_canaries"]
