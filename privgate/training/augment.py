"""Data augmentation of a recipe, drawn per model from the model's own generators: the same both ways.

Random crops with padding and horizontal flips (Krizhevsky et al. 2012; He et al. 2016, arXiv 1512.03385) and a
user transform, as :class:`privgate.recipe.Augment` describes; reference models trained without the target's
augmentation understate its leak (Carlini et al. 2022, arXiv 2112.03570, §VI). Every draw comes from the model's CPU
generators, seeded from its training seed (:func:`crop_seed`, :func:`transform_seed`), in the same order in
``train_model`` and the engine, so a model trained K at a time equals the one trained alone up to float rounding.
The draw order: ``docs/internals-training-stats.md``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from privgate.errors import RecipeError
from privgate.recipe.rng import seeded

#: Most bytes of float32 image rows augmented or scored at once (views and forward passes of reference models).
SLAB_BYTES = 64 << 20


def crop_seed(seed: int) -> int:
    """The seed of a model's crop-and-flip generator, derived from its training seed (its own stream)."""
    return int(np.random.SeedSequence([int(seed), 0xA06]).generate_state(1)[0])


def transform_seed(seed: int) -> int:
    """The seed of the generator a model's ``augment.transform`` draws from."""
    return int(np.random.SeedSequence([int(seed), 0x7F0]).generate_state(1)[0])


def check_padding(augment: Any, name: str, row_shape: Sequence[int] | None = None) -> int:
    """``augment.crop_padding`` as a whole number of pixels ≥ 0, smaller than the images (one sentence if not).

    Checked where the padding is used (training, the attacks' views): a recipe can be changed after it was
    made, and a padding larger than the images would pad every batch to a size of its own choosing.
    """
    p = augment.crop_padding
    if not isinstance(p, int) or isinstance(p, bool) or p < 0:
        raise RecipeError(f"recipe '{name}': augment.crop_padding must be a whole number of pixels >= 0, got {p!r}.")
    if p and row_shape is not None and len(row_shape) == 3 and p >= min(int(row_shape[1]), int(row_shape[2])):
        raise RecipeError(
            f"recipe '{name}': augment.crop_padding {p} must be smaller than the images' height and width "
            f"{tuple(int(s) for s in row_shape[1:])}."
        )
    return p


def check_rows(augment: Any, row_shape: Sequence[int], name: str) -> None:
    """Refuse crop or flip on rows that are not images ``[C, H, W]``, and a padding they cannot take (one sentence)."""
    check_padding(augment, name)
    if not (augment.crop_padding or augment.flip):
        return
    if len(row_shape) != 3:
        raise RecipeError(
            f"recipe '{name}': augment's crop and flip need image rows [channels, height, width]; the training "
            f"rows have shape {tuple(int(s) for s in row_shape)}."
        )
    check_padding(augment, name, row_shape)


def slab_rows(row_shape: Sequence[int], padding: int = 0, budget: int = SLAB_BYTES, most: int | None = None) -> int:
    """How many float32 rows of ``row_shape``, each padded by ``padding`` on every side, fit in ``budget`` bytes.

    At least one, at most ``most``: views and forward passes of large images go a few rows at a time
    (3×512×512 images: 21 rows in 64 MiB), small ones as many as ``most`` asks.
    """
    shape = [int(s) for s in row_shape]
    if len(shape) == 3 and padding:
        shape = [shape[0], shape[1] + 2 * int(padding), shape[2] + 2 * int(padding)]
    rows = max(1, int(budget) // (4 * max(1, int(np.prod(shape)))))
    return rows if most is None else max(1, min(rows, int(most)))


def draw(augment: Any, gen: torch.Generator, rows: int) -> torch.Tensor | None:
    """One batch's crop offsets and flips ``[rows, 3]`` (dy, dx, flip) from ``gen``, or None when neither is on."""
    if not (augment.crop_padding or augment.flip):
        return None
    out = torch.zeros((rows, 3), dtype=torch.long)
    if augment.crop_padding:
        out[:, :2] = torch.randint(0, 2 * int(augment.crop_padding) + 1, (rows, 2), generator=gen)
    if augment.flip:
        out[:, 2] = (torch.rand(rows, generator=gen) < 0.5).long()
    return out


def crop_flip(augment: Any, x: torch.Tensor, params: torch.Tensor) -> torch.Tensor:
    """Images ``x [N, C, H, W]`` cropped and flipped as ``params [N, 3]`` (on ``x``'s device) say: one gather."""
    n, c, h, w = x.shape
    p = int(augment.crop_padding)
    if p:
        x = F.pad(x, (p, p, p, p), mode="reflect" if augment.padding_mode == "reflect" else "constant")
    dy, dx, flip = params[:, 0:1], params[:, 1:2], params[:, 2:3].bool()
    cols = torch.arange(w, device=x.device).unsqueeze(0)
    xi = dx + torch.where(flip, (w - 1) - cols, cols)  # [N, W]: a flipped crop reads its window right to left
    yi = dy + torch.arange(h, device=x.device).unsqueeze(0)  # [N, H]
    rows = torch.arange(n, device=x.device).view(n, 1, 1, 1)
    chans = torch.arange(c, device=x.device).view(1, c, 1, 1)
    return x[rows, chans, yi.view(n, 1, h, 1), xi.view(n, 1, 1, w)]


def transform(augment: Any, batch: torch.Tensor, gen: torch.Generator, name: str) -> torch.Tensor:
    """``augment.transform(batch, gen)``, checked: same shape back, failures as one :class:`RecipeError`."""
    try:
        out = augment.transform(batch, gen)
    except RecipeError:
        raise
    except Exception as exc:
        raise RecipeError(
            f"recipe '{name}': augment.transform failed ({exc.__class__.__name__}: {str(exc)[:200]})."
        ) from None
    if not isinstance(out, torch.Tensor) or out.shape != batch.shape:
        got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise RecipeError(
            f"recipe '{name}': augment.transform must return a tensor of the batch's shape {tuple(batch.shape)}, "
            f"got {got}."
        )
    return out.to(batch.dtype)


def check_transform(augment: Any, probe: torch.Tensor, name: str) -> None:
    """Refuse a transform that draws from anything but the generator it is given (two seeded calls must agree).

    Its draws would otherwise come from torch's global generator, which K models trained at once share:
    model k would depend on the models trained beside it.
    """
    if augment.transform is None:
        return
    with torch.no_grad(), seeded(None):
        outs = []
        for other in (11, 12):
            torch.manual_seed(other)
            outs.append(transform(augment, probe.clone(), torch.Generator().manual_seed(0), name))
    if not torch.equal(outs[0], outs[1]):
        raise RecipeError(
            f"recipe '{name}': augment.transform gives different results for the same generator; it must draw "
            "its random numbers from the torch.Generator it is given (e.g. torch.rand(..., generator=generator))."
        )


class Augmenter:
    """A model's augmentation while it trains: its two generators and one call per mini-batch."""

    def __init__(self, augment: Any, seed: int, name: str) -> None:
        self.augment = augment
        self.name = name
        self.crop_gen = torch.Generator().manual_seed(crop_seed(seed))
        self.transform_gen = torch.Generator().manual_seed(transform_seed(seed))

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        params = draw(self.augment, self.crop_gen, len(x))
        if params is not None:
            x = crop_flip(self.augment, x, params.to(x.device, non_blocking=True))
        if self.augment.transform is not None:
            x = transform(self.augment, x, self.transform_gen, self.name)
        return x


def stacked(augmenters: Sequence[Augmenter], models: Sequence[int], x: torch.Tensor) -> torch.Tensor:
    """Augment the batches ``x [G, L, …]`` of ``models``, each from its own generators (see the module docstring)."""
    first = augmenters[models[0]]
    g, rows = x.shape[0], x.shape[1]
    draws = [draw(first.augment, augmenters[m].crop_gen, rows) for m in models]
    if draws[0] is not None:
        params = torch.cat(draws).to(x.device, non_blocking=True)  # type: ignore[arg-type]
        x = crop_flip(first.augment, x.reshape(g * rows, *x.shape[2:]), params).view(x.shape)
    if first.augment.transform is not None:
        x = torch.stack(
            [transform(first.augment, x[i], augmenters[m].transform_gen, first.name) for i, m in enumerate(models)]
        )
    return x


__all__ = [
    "SLAB_BYTES",
    "Augmenter",
    "check_padding",
    "check_rows",
    "slab_rows",
    "check_transform",
    "crop_flip",
    "crop_seed",
    "draw",
    "stacked",
    "transform_seed",
]
