"""DP-SGD on the MLP kernel: Poisson batches, per-example clipping by ghost norms, Gaussian noise per model.

The mechanism of Abadi et al. 2016 (arXiv 1607.00133) as Opacus runs it
(Yousefpour et al. 2021, arXiv 2109.12298), for K stacked MLPs at once: the
reference models of a DP-SGD target are trained the way the target was.
DP-SGD training applies the recipe's optimiser, learning rate, epochs and batch
size, not its schedule, label smoothing, clipping, precision or augmentation
(:data:`DP_IGNORED`, :func:`dp_view`), on the kernel as in ``train_dp``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from privgate.training.plan import poisson_schedule

if TYPE_CHECKING:
    from privgate.recipe import Recipe


def dp_step(
    engine: Any,
    dp: Any,
    rows: list[torch.Tensor],
    gens: list[torch.Generator],
    seeds: Sequence[int],
    p: list[torch.Tensor],
) -> tuple[Any, Any]:
    """(grad_fn, schedule) of DP-SGD on the MLP kernel: Poisson batches, clipped sums, Gaussian noise.

    Per model k, like Opacus' ``DPOptimizer`` with ``loss_reduction="mean"``:
    gradient = (Σ clipped per-row gradients + N(0, (σC)²)) / int(n_k · q_k).
    Model k draws its batches from a generator seeded with its seed and its
    noise from one seeded with seed + 0x5EED, so its result depends on its own
    seed only (the generators are on the CPU, so the draws do not depend on
    the device); the draws are not Opacus' own, so a model is distributed like the
    one ``DPRecipe.train`` returns for that seed, not equal to it.
    """
    k = len(rows)
    noise_gens = [torch.Generator().manual_seed(int(s) + 0x5EED) for s in seeds]
    scale = torch.tensor([1.0 / max(1, dp.expected_batch(len(r))) for r in rows])
    sigma_c = float(dp.noise_multiplier) * float(dp.max_grad_norm)
    noise = [torch.empty_like(t) for t in p] if sigma_c > 0 else []
    drawn = [torch.empty(t.shape[1:]) for t in p] if sigma_c > 0 else []  # CPU: the draws do not depend on the device
    noise_scale = (scale * sigma_c).to(p[0].device)
    capacity = [1]

    def schedule() -> tuple[torch.Tensor, torch.Tensor, np.ndarray]:
        idx, wts, active = poisson_schedule(gens, rows, dp, capacity[0])
        capacity[0] = idx.shape[2]
        engine.resize(capacity[0])
        return idx, wts, active

    def grad_fn(theta: list[torch.Tensor], b: torch.Tensor, wb: torch.Tensor) -> list[torch.Tensor]:
        g = engine.clipped_grads(theta, b, wb, float(dp.max_grad_norm), scale)
        for t, z, cpu in zip(g, noise, drawn):
            for m in range(k):
                torch.randn(cpu.shape, generator=noise_gens[m], out=cpu)
                z[m].copy_(cpu, non_blocking=False)
            z.mul_(noise_scale.view((k,) + (1,) * (z.dim() - 1)))
            t.add_(z)
        return g

    return grad_fn, schedule


#: The recipe settings DP-SGD training (:func:`privgate.dpsgd.train.train_dp`, and the engine's DP-SGD kernel with it)
#: does not apply: it trains with the recipe's optimiser, learning rate, epochs and batch size only; its gradient
#: clipping is DP-SGD's own, per example.
DP_IGNORED = (
    "schedule", "warmup_steps", "warmup_fraction", "lr_step_epochs", "lr_gamma", "min_lr", "label_smoothing",
    "clip_grad_norm", "precision", "augment",
)  # fmt: skip


def dp_view(recipe: Recipe) -> Recipe:
    """A DP-SGD recipe as DP-SGD trains it: the settings of :data:`DP_IGNORED` at their defaults (same class)."""
    import dataclasses

    from privgate.recipe import TRAINING_DEFAULTS

    changed = {k: TRAINING_DEFAULTS[k] for k in DP_IGNORED if getattr(recipe, k) != TRAINING_DEFAULTS[k]}
    return dataclasses.replace(recipe, **changed) if changed else recipe


def dp_note(recipe: Recipe) -> str | None:
    """The sentence a report carries when a DP-SGD recipe sets what DP-SGD training does not apply."""
    if recipe.dp_sgd is None:
        return None
    ignored = [k for k in DP_IGNORED if k in recipe.settings_in_use()]
    if not ignored:
        return None
    return (
        f"recipe '{recipe.name}' trains with DP-SGD, which applies its optimiser, learning rate, epochs and batch "
        f"size but not its {', '.join(ignored)} (gradients are clipped per example by DP-SGD itself)"
    )


__all__ = ["DP_IGNORED", "dp_note", "dp_step", "dp_view"]
