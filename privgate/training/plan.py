"""Who trains on what: reference models' seeds and training masks, and each epoch's batches.

The balanced design of Carlini et al. 2022 (arXiv 2112.03570, §IV): models 2p
and 2p+1 train on complementary random halves, so every audit row is IN for
exactly half of an even number of models. Batches replicate
:func:`privgate.training.loop.train_model` (``randperm`` per epoch from the model's own
generator) or, for DP-SGD, Opacus' Poisson sampling.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # the batch schedules are torch's; the seeds and masks (every kind of reference model) are not
    import torch


def model_seeds(seed: int, k: int) -> list[int]:
    """Seed of reference model ``i`` for ``i < k``; model i's seed does not depend on k."""
    return [int(np.random.SeedSequence([int(seed), 0x5EED, i]).generate_state(1)[0]) for i in range(k)]


def dropout_seed(seed: int) -> int:
    """The seed of a model's dropout generator (:mod:`privgate.training.dropout`), derived from its training seed.

    Distinct from the batch-order generator's seed (``seed`` itself), so
    masks and batch order are independent streams.
    """
    return int(np.random.SeedSequence([int(seed), 0xD809]).generate_state(1)[0])


def paired_masks(n: int, k: int, seed: int) -> np.ndarray:
    """``[k, n]`` training masks: models 2p and 2p+1 train on complementary random halves.

    Every row is then IN for exactly half of an even number of models (the
    balanced design of Carlini et al. 2022, arXiv 2112.03570, §IV), and the
    masks for ``k`` models are the first rows of those for any larger ``k`` —
    so an attack asking for 4 models reuses, from the cache, 4 of the 16 another
    attack trained.
    """
    masks = np.zeros((k, n), dtype=bool)
    for p in range((k + 1) // 2):
        perm = np.random.default_rng(np.random.SeedSequence([int(seed), 0x3A5C, p])).permutation(n)
        half = np.zeros(n, dtype=bool)
        half[perm[: n // 2]] = True
        masks[2 * p] = half
        if 2 * p + 1 < k:
            masks[2 * p + 1] = ~half
    return masks


def epoch_schedule(
    gens: list[torch.Generator], rows: list[torch.Tensor], batch: int
) -> tuple[torch.Tensor, torch.Tensor, np.ndarray]:
    """One epoch of every model: row indices ``[S, K, B]``, loss weights ``[S, K, B]``, active ``[S, K]``.

    Model k draws ``randperm(n_k, generator=gens[k])`` exactly as ``train_model``
    does; a short last batch is padded with weight-0 rows and weighted 1/len so
    the weighted sum equals the batch mean; models with fewer batches than
    others are inactive (``active`` is a numpy array: it steers Python control
    flow, one lookup per step) for the remaining steps.
    """
    import torch

    k = len(rows)
    sizes = [len(r) for r in rows]
    steps = [math.ceil(n / batch) for n in sizes]
    s_max = max(steps)
    idx = torch.zeros((k, s_max * batch), dtype=torch.long)
    w = torch.zeros((k, s_max * batch), dtype=torch.float32)
    active = np.zeros((s_max, k), dtype=bool)
    for m, (gen, r, n) in enumerate(zip(gens, rows, sizes)):
        idx[m, :n] = r[torch.randperm(n, generator=gen)]
        full = (n // batch) * batch
        w[m, :full] = 1.0 / batch
        if n > full:
            w[m, full:n] = 1.0 / (n - full)
        active[: steps[m], m] = True
    return (
        idx.view(k, s_max, batch).transpose(0, 1).contiguous(),
        w.view(k, s_max, batch).transpose(0, 1).contiguous(),
        active,
    )


def poisson_schedule(
    gens: list[torch.Generator], rows: list[torch.Tensor], dp: Any, capacity: int
) -> tuple[torch.Tensor, torch.Tensor, np.ndarray]:
    """One DP-SGD epoch of every model, as :func:`epoch_schedule` but with Poisson sampling.

    Model k takes ``dp.steps(n_k)`` steps; at each, every one of its rows is
    drawn independently with probability q = 1/steps (Opacus'
    ``UniformWithReplacementSampler``). Batches vary in size: they are padded
    with weight-0 rows to ``capacity`` or to the largest batch of the epoch,
    whichever is larger. Weights are 1 for drawn rows (DP-SGD sums clipped
    gradients and divides by the expected batch size, not the drawn one).
    """
    import torch

    k = len(rows)
    steps = [dp.steps(len(r)) for r in rows]
    draws = [
        [r[torch.rand(len(r), generator=gen) < 1.0 / st] for _ in range(st)] for gen, r, st in zip(gens, rows, steps)
    ]
    width = max([capacity] + [len(d) for ds in draws for d in ds])
    s_max = max(steps)
    idx = torch.zeros((s_max, k, width), dtype=torch.long)
    w = torch.zeros((s_max, k, width), dtype=torch.float32)
    active = np.zeros((s_max, k), dtype=bool)
    for m, ds in enumerate(draws):
        for s, d in enumerate(ds):
            idx[s, m, : len(d)] = d
            w[s, m, : len(d)] = 1.0
        active[: steps[m], m] = True
    return idx, w, active


__all__ = ["dropout_seed", "epoch_schedule", "model_seeds", "paired_masks", "poisson_schedule"]
