"""DP-SGD on the MLP kernel: Poisson batches, per-example clipping by ghost norms, Gaussian noise per model.

The mechanism of Abadi et al. 2016 (arXiv 1607.00133) as Opacus runs it
(Yousefpour et al. 2021, arXiv 2109.12298), for K stacked MLPs at once: the
reference models of a DP-SGD target are trained the way the target was.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from privgate.training.plan import poisson_schedule


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
    seed only; the draws are not Opacus' own, so a model is distributed like the
    one ``DPRecipe.train`` returns for that seed, not equal to it.
    """
    k = len(rows)
    noise_gens = [torch.Generator().manual_seed(int(s) + 0x5EED) for s in seeds]
    scale = torch.tensor([1.0 / max(1, dp.expected_batch(len(r))) for r in rows])
    sigma_c = float(dp.noise_multiplier) * float(dp.max_grad_norm)
    noise = [torch.empty_like(t) for t in p] if sigma_c > 0 else []
    capacity = [1]

    def schedule() -> tuple[torch.Tensor, torch.Tensor, np.ndarray]:
        idx, wts, active = poisson_schedule(gens, rows, dp, capacity[0])
        capacity[0] = idx.shape[2]
        engine.resize(capacity[0])
        return idx, wts, active

    def grad_fn(theta: list[torch.Tensor], b: torch.Tensor, wb: torch.Tensor) -> list[torch.Tensor]:
        g = engine.clipped_grads(theta, b, wb, float(dp.max_grad_norm), scale)
        for t, z in zip(g, noise):
            for m in range(k):
                torch.randn(z.shape[1:], generator=noise_gens[m], out=z[m])
            z.mul_((scale * sigma_c).view((k,) + (1,) * (z.dim() - 1)))
            t.add_(z)
        return g

    return grad_fn, schedule


__all__ = ["dp_step"]
