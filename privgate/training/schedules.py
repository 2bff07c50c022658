"""Learning-rate schedules of a recipe: torch's schedulers for ``train_model``, their closed forms for the engine.

The schedule advances once per optimiser step over ``T = epochs · ceil(n / batch_size)`` steps, after an optional
linear warm-up (Goyal et al. 2017, arXiv 1706.02677): ``constant``, ``step``, ``cosine`` (Loshchilov & Hutter 2016,
arXiv 1608.03983) or ``one-cycle`` (Smith & Topin 2017, arXiv 1708.07120). privgate's loop steps
torch's own schedulers (:func:`torch_scheduler`); the engine computes the same rates in closed form per model
(:func:`rates`), each at its own step count and ``T``; the two agree up to float rounding.
Formulas: ``docs/internals-training-stats.md``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from privgate.errors import RecipeError
from privgate.recipe.spec import SCHEDULES

#: torch's ``OneCycleLR`` defaults: start at ``lr / DIV``, end at ``lr / DIV / FINAL_DIV``.
ONE_CYCLE_DIV, ONE_CYCLE_FINAL_DIV, ONE_CYCLE_PCT = 25.0, 1e4, 0.3


def steps_per_epoch(n: int, batch_size: int) -> int:
    """Optimiser steps of one epoch over ``n`` rows (the last batch may be short)."""
    return math.ceil(int(n) / int(batch_size))


def warmup(recipe: Any, total: int) -> int:
    """The warm-up in steps for a training of ``total`` steps: ``warmup_steps``, else ``⌊warmup_fraction · T⌋``."""
    if recipe.warmup_steps:
        return int(recipe.warmup_steps)
    return int(math.floor(float(recipe.warmup_fraction) * total))


def _pct_start(recipe: Any, total: int) -> float:
    if recipe.warmup_fraction:
        return float(recipe.warmup_fraction)
    if recipe.warmup_steps:
        return int(recipe.warmup_steps) / total
    return ONE_CYCLE_PCT


def check(recipe: Any, total: int, spe: int) -> None:
    """Refuse, in one sentence, a schedule that cannot run over ``total`` steps (``spe`` per epoch)."""
    name = recipe.schedule
    if name == "constant":
        return
    if name == "one-cycle":
        end = _pct_start(recipe, total) * total - 1
        if end == 0 or end >= total - 1:
            raise RecipeError(
                f"recipe '{recipe.name}': one-cycle over {total} steps needs a rising phase (warm-up) of more "
                f"than 1 and fewer than {total} steps; it has {end + 1:g}."
            )
        return
    w = warmup(recipe, total)
    if w >= total:
        raise RecipeError(
            f"recipe '{recipe.name}': the warm-up of {w} steps is not shorter than the training's {total} steps "
            f"({spe} per epoch)."
        )


def torch_scheduler(recipe: Any, optimizer: Any, total: int, spe: int) -> Any:
    """torch's scheduler for ``recipe`` over ``total`` steps (``spe`` per epoch), stepped once per step; or None."""
    from torch.optim import lr_scheduler as sched

    check(recipe, total, spe)
    name = recipe.schedule
    if name == "one-cycle":
        return sched.OneCycleLR(
            optimizer,
            max_lr=float(recipe.lr),
            total_steps=int(total),
            pct_start=_pct_start(recipe, total),
            anneal_strategy="cos",
            cycle_momentum=False,
            div_factor=ONE_CYCLE_DIV,
            final_div_factor=ONE_CYCLE_FINAL_DIV,
        )
    w = warmup(recipe, total)
    main: Any = None
    if name == "step":
        main = sched.StepLR(optimizer, step_size=int(recipe.lr_step_epochs) * spe, gamma=float(recipe.lr_gamma))
    elif name == "cosine":
        main = sched.CosineAnnealingLR(optimizer, T_max=total - w, eta_min=float(recipe.min_lr))
    if not w:
        return main
    warm = sched.LinearLR(optimizer, start_factor=1.0 / (w + 1), end_factor=1.0, total_iters=w)
    if main is None:  # constant after the warm-up: LinearLR stays at its end factor
        return warm
    return sched.SequentialLR(optimizer, [warm, main], milestones=[w])


def rates(recipe: Any, t: np.ndarray, total: np.ndarray, spe: np.ndarray) -> np.ndarray:
    """The learning rate of step ``t`` (0-based) of models training ``total`` steps, ``spe`` per epoch (arrays).

    The closed forms of the schedulers :func:`torch_scheduler` builds, in float64.
    """
    lr = float(recipe.lr)
    name = recipe.schedule
    t = np.asarray(t, dtype=np.float64)
    total = np.asarray(total, dtype=np.float64)
    if name == "one-cycle":
        return _one_cycle(recipe, t, total)
    w = (
        np.full_like(total, float(recipe.warmup_steps))
        if recipe.warmup_steps
        else np.floor(float(recipe.warmup_fraction) * total)
    )
    after = t - w
    if name == "step":
        size = float(recipe.lr_step_epochs) * np.asarray(spe, dtype=np.float64)
        main = lr * float(recipe.lr_gamma) ** np.floor_divide(np.maximum(after, 0), size)
    elif name == "cosine":
        eta = float(recipe.min_lr)
        span = np.maximum(total - w, 1.0)
        main = eta + (lr - eta) * (1 + np.cos(math.pi * np.maximum(after, 0) / span)) / 2
    else:
        main = np.full_like(t, lr)
    with np.errstate(divide="ignore", invalid="ignore"):
        start = 1.0 / (w + 1)
        warm = lr * (start + (1.0 - start) * np.minimum(t, w) / w)
    return np.where(t < w, warm, main)


def _one_cycle(recipe: Any, t: np.ndarray, total: np.ndarray) -> np.ndarray:
    top = float(recipe.lr)
    first = top / ONE_CYCLE_DIV
    last = first / ONE_CYCLE_FINAL_DIV
    if recipe.warmup_fraction or not recipe.warmup_steps:
        pct = np.full_like(total, _pct_start(recipe, 1))
    else:
        pct = int(recipe.warmup_steps) / total
    end1 = pct * total - 1
    rising = t <= end1
    with np.errstate(divide="ignore", invalid="ignore"):
        frac = np.where(rising, t / end1, (t - end1) / (total - 1 - end1))
    hi = np.where(rising, top, last)
    lo = np.where(rising, first, top)
    # torch's _annealing_cos(start, end, pct) = end + (start − end)/2 · (cos(π·pct) + 1)
    return hi + (lo - hi) / 2.0 * (np.cos(math.pi * frac) + 1)


__all__ = ["SCHEDULES", "check", "rates", "steps_per_epoch", "torch_scheduler", "warmup"]
