"""Augmented queries: the fixed views of every audit image that LiRA and RMIA ask the target and each reference model.

A model trained with random crops and flips has seen each of its training
images at many shifts and in both orientations; it has memorised the image
*under its augmentations*, and asking it about the one unaugmented image reads
only part of what it learnt. Carlini et al. (2022, arXiv 2112.03570, §V,
"Improving LiRA with augmentations") query every model on the same fixed set
of augmentations of each example, fit a Gaussian per augmentation and combine
them, which raises LiRA's TPR at low FPR on augmented CIFAR-10 models several
times over; Zarifzadeh et al. (2024, arXiv 2312.03262) average RMIA's
likelihood ratio over the same queries.

The views come from the recipe's :class:`~privgate.recipe.Augment`, so they are
images the model saw in training:

* shifts by ``d = max(1, crop_padding // 2)`` pixels: ``(dy, dx) ∈ {−d, 0, d}²``
  (9 views) when the recipe crops, each a crop of the image padded by ``d`` as
  the recipe pads it (zeros or ``reflect``), i.e. a window its random crop also
  draws;
* each of them mirrored left-right as well when the recipe flips (×2);
* the identity first: a recipe that crops and flips gives 18 views (the
  paper's number), one that only flips 2, one that only crops 9.

Every model — the target and each reference model — is asked the same views
(so the target's answers go through the policy's ``serves:`` surface, one query
per view and row); a recipe's own ``transform`` adds none (it has no fixed
version). Views apply only when the recipe crops or flips and the audit rows
are images ``[C, H, W]``; otherwise the attacks query each row once, as
before, and the report is unchanged. The attacks read each view's outputs a
batch of rows at a time (:meth:`privgate.attacks.reference.References.per_row`)
and keep per-row statistics only, one view after another.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import numpy as np

#: Rows augmented per slab when a view is made (one slab of float32 images at a time on top of the result).
SLAB = 4096
#: The policy option that turns augmented queries off (``lira: {augmented_queries: false}``).
OPTION = "augmented_queries"


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
class Views:
    """The views of one recipe: their shifts, flips and how the shifted images are padded."""

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

    def apply(self, view: View, x: np.ndarray) -> np.ndarray:
        """``x [n, C, H, W]`` as ``view`` shows it (``x`` itself for the identity: models' outputs on it are shared)."""
        if view == View():
            return x
        import torch

        from privgate.training.augment import crop_flip

        how = SimpleNamespace(crop_padding=self.shift, padding_mode=self.padding_mode)
        out = np.empty(x.shape, dtype=np.float32)
        for start in range(0, len(x), SLAB):
            xb = torch.as_tensor(np.asarray(x[start : start + SLAB], dtype=np.float32))
            params = torch.tensor([[self.shift + view.dy, self.shift + view.dx, int(view.flip)]]).expand(len(xb), 3)
            out[start : start + len(xb)] = crop_flip(how, xb, params).numpy()
        return out

    def describe(self) -> str:
        """One sentence for the attack's notes."""
        what = []
        if any(v.dy or v.dx for v in self.views):
            what.append(f"shifts of ±{self.shift} px ({self.padding_mode} padding)")
        if any(v.flip for v in self.views):
            what.append("mirrored")
        return f"{len(self.views)} fixed augmentations of each example (identity, {', '.join(what)})"


def views_for(augment: Any) -> Views | None:
    """The fixed views of a recipe's :class:`~privgate.recipe.Augment` (module docstring); None: no crop, no flip."""
    if augment is None or not (augment.crop_padding or augment.flip):
        return None
    d = max(1, int(augment.crop_padding) // 2) if augment.crop_padding else 0
    shifts = [(0, 0)] + ([(dy, dx) for dy in (-d, 0, d) for dx in (-d, 0, d) if (dy, dx) != (0, 0)] if d else [])
    flips = (False, True) if augment.flip else (False,)
    views = tuple(View(dy, dx, f) for f in flips for dy, dx in shifts)
    return Views(views, d, "reflect" if augment.padding_mode == "reflect" else "zeros")


def check_option(value: Any) -> bool:
    """Validate the ``augmented_queries`` option: true or false."""
    if not isinstance(value, bool):
        raise TypeError(f"option {OPTION} must be true or false")
    return value


def query_views(recipe: Any, x: np.ndarray, enabled: bool) -> tuple[Views | None, list[str]]:
    """The views LiRA and RMIA query for ``recipe`` on the audit rows ``x``, and notes on why there are none.

    No views and no notes for a recipe without augmentation (the report is as
    before it existed); a note when the recipe augments but its augmentation
    gives no views here (turned off, rows that are not images, only a ``transform``).
    """
    augment = getattr(recipe, "augment", None)
    if augment is None:
        return None, []
    views = views_for(augment)
    if views is None:
        return None, ["no augmented queries: the recipe's augment has only its own transform, which has no fixed views"]
    if not enabled:
        return None, [f"no augmented queries ({OPTION}: false): each example is queried once, as it is"]
    if x.ndim != 4:
        return None, [
            f"no augmented queries: the recipe crops or flips, but the audit rows have shape {tuple(x.shape[1:])}, "
            "not images [C, H, W]"
        ]
    if views.padding_mode == "reflect" and views.shift >= min(x.shape[2], x.shape[3]):
        return None, [f"no augmented queries: shifts of {views.shift} px need larger images than {x.shape[2:]}"]
    return views, []


__all__ = ["OPTION", "View", "Views", "check_option", "query_views", "views_for"]
