"""Augmented queries: the fixed views of every audit image that LiRA and RMIA ask the target and each reference model.

A model trained with random crops and flips has memorised each image under its augmentations (Carlini et al.
2022, arXiv 2112.03570, §V; Zarifzadeh et al. 2024, arXiv 2312.03262). ``augmented_queries: 2 | 18 | 50``
asks every model the identity and the mirror (2), or a 3×3 (18) or 5×5 (50) grid of the shifts the
recipe's crop draws, each mirrored (RMIA's code offers the same three); the default is 2 when the recipe flips,
18 (its 9 shifts) when it only crops; ``false`` queries once. A reference model's view is made on its device
from the batch already there (:meth:`privgate.training.ensemble.TorchReader.output_batches`); the target's from
slabs of rows bounded in bytes. Grids, costs and the measurements behind the default: docs/attacks.md.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import numpy as np

#: The policy option (``lira: {augmented_queries: 18}``); ``false`` turns the views off.
OPTION = "augmented_queries"
#: The settings: views asked for → shifts per side of the grid (each view also mirrored when the recipe flips).
GRIDS = {2: 1, 18: 3, 50: 5}
#: Most bytes of the target's rows one view is made of at a time (the reference models' views: their batches).
TARGET_SLAB_BYTES = 64 << 20


@dataclass(frozen=True)
class View:
    """One fixed augmentation: a shift of ``(dy, dx)`` pixels, mirrored left-right when ``flip``."""

    dy: int = 0
    dx: int = 0
    flip: bool = False

    @property
    def name(self) -> str:
        shift = f"shift({self.dy:+d},{self.dx:+d})" if (self.dy or self.dx) else ""
        if self.flip:
            return f"mirror+{shift}" if shift else "mirror"
        return shift or "identity"


@dataclass(frozen=True)
class Query:
    """One view as a transform of a batch of images on its own device (hashable: it keys the kept outputs)."""

    view: View
    shift: int
    padding_mode: str

    def __call__(self, xb: Any) -> Any:
        import torch

        from privgate.training.augment import crop_flip

        how = SimpleNamespace(crop_padding=self.shift, padding_mode=self.padding_mode)
        v = self.view
        params = torch.tensor([[self.shift + v.dy, self.shift + v.dx, int(v.flip)]], device=xb.device)
        return crop_flip(how, xb, params.expand(len(xb), 3))


@dataclass(frozen=True)
class Views:
    """The views of one recipe and setting: their shifts, flips and how the shifted images are padded."""

    views: tuple[View, ...]
    shift: int
    padding_mode: str

    def __len__(self) -> int:
        return len(self.views)

    def __iter__(self) -> Iterator[View]:
        return iter(self.views)

    @property
    def names(self) -> list[str]:
        return [v.name for v in self.views]

    def query(self, view: View) -> Query | None:
        """``view`` as a transform of a batch on its device; None for the identity (the rows as they are)."""
        return None if view == View() else Query(view, self.shift, self.padding_mode)

    def apply(self, view: View, x: np.ndarray) -> np.ndarray:
        """``x [n, C, H, W]`` as ``view`` shows it (``x`` itself for the identity), made a bounded slab at a time."""
        q = self.query(view)
        if q is None:
            return x
        import torch

        from privgate.training.augment import slab_rows

        out = np.empty(x.shape, dtype=np.float32)
        step = slab_rows(x.shape[1:], self.shift)
        for start in range(0, len(x), step):
            out[start : start + step] = q(torch.as_tensor(np.asarray(x[start : start + step], dtype=np.float32)))
        return out

    def target_rows(
        self, target: Any, view: View, x: np.ndarray, y: np.ndarray, fn: Callable[[np.ndarray, np.ndarray], np.ndarray]
    ) -> np.ndarray:
        """``target.map_rows`` of ``view`` of ``x``, its view made a slab of whole target batches at a time."""
        if view == View():
            return target.map_rows(x, y, fn)
        from privgate.inputs.target import BATCH
        from privgate.training.augment import slab_rows

        step = slab_rows(x.shape[1:], self.shift, TARGET_SLAB_BYTES)
        step = max(BATCH, step - step % BATCH) if step >= BATCH else step
        parts = [
            target.map_rows(self.apply(view, x[s : s + step]), y[s : s + step], fn) for s in range(0, len(x), step)
        ]
        return np.concatenate(parts)

    def describe(self) -> str:
        """One sentence for the attack's notes."""
        what = []
        if self.shift:
            step = min(abs(v.dy) for v in self.views if v.dy)
            span = f"±{step} px" if step == self.shift else f"up to ±{self.shift} px in steps of {step}"
            what.append(f"shifts of {span} ({self.padding_mode} padding)")
        if any(v.flip for v in self.views):
            what.append("mirrored")
        return f"{len(self.views)} fixed augmentations of each example (identity, {', '.join(what)})"


def views_for(augment: Any, count: int | None = None) -> Views | None:
    """The fixed views of a recipe's :class:`~privgate.recipe.Augment` for a setting (module docstring).

    ``count``: 2, 18 or 50 (None: the default, 2 when the recipe flips, else 18). The grid's step is
    ``max(1, crop_padding // (side - 1))`` px (18: ±p/2; 50: the same span at half the step), its span never
    more than the padding (a recipe that crops by 1 px gets the 3×3 grid for 50). None: no crop, no flip.
    """
    if augment is None or not (augment.crop_padding or augment.flip):
        return None
    p = int(augment.crop_padding)
    side = GRIDS[count if count is not None else (2 if augment.flip else 18)] if p else 1
    side = min(side, 2 * p + 1) if p else 1
    d = max(1, p // (side - 1)) if side > 1 else 0
    half = (side - 1) // 2
    steps = [i * d for i in range(-half, half + 1)]
    shifts = [(0, 0)] + [(dy, dx) for dy in steps for dx in steps if (dy, dx) != (0, 0)]
    flips = (False, True) if augment.flip else (False,)
    views = tuple(View(dy, dx, f) for f in flips for dy, dx in shifts)
    return Views(views, half * d, "reflect" if augment.padding_mode == "reflect" else "zeros")


def check_option(value: Any) -> bool | int:
    """Validate the ``augmented_queries`` option: true (the default), false, 2, 18 or 50."""
    if isinstance(value, bool) or (isinstance(value, int) and value in GRIDS):
        return value
    raise ValueError(f"option {OPTION} must be true, false, 2, 18 or 50, got {value!r}"[:200])


def query_views(recipe: Any, x: np.ndarray, setting: bool | int) -> tuple[Views | None, list[str]]:
    """The views LiRA and RMIA query for ``recipe`` on the audit rows ``x``, and notes on why there are none.

    No views and no notes for a recipe without augmentation (the report is as
    before it existed); a note when the recipe augments but its augmentation
    gives no views here (turned off, rows that are not images, only a ``transform``,
    a setting that leaves only the identity). A bad ``crop_padding`` is one sentence (:class:`RecipeError`).
    """
    augment = getattr(recipe, "augment", None)
    if augment is None:
        return None, []
    from privgate.training.augment import check_padding

    check_padding(augment, recipe.name, x.shape[1:] if x.ndim == 4 else None)
    count = None if setting is True else setting
    views = views_for(augment, count or None)
    if views is None:
        return None, ["no augmented queries: the recipe's augment has only its own transform, which has no fixed views"]
    if setting is False:
        return None, [f"no augmented queries ({OPTION}: false): each example is queried once, as it is"]
    if x.ndim != 4:
        return None, [
            f"no augmented queries: the recipe crops or flips, but the audit rows have shape {tuple(x.shape[1:])}, "
            "not images [C, H, W]"
        ]
    if len(views) == 1:
        return None, [
            f"no augmented queries: {OPTION}: {setting} gives only the identity for a recipe that does not flip"
        ]
    notes = []
    if count is not None and len(views) < count:
        notes.append(f"{OPTION}: {count} asks {count} views; the recipe's augment gives {len(views)} of them")
    return views, notes


__all__ = ["GRIDS", "OPTION", "Query", "View", "Views", "check_option", "query_views", "views_for"]
