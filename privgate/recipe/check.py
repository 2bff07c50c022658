"""A recipe's training settings checked when it is made: a bad one is one sentence (:class:`RecipeError`, exit 2).

:class:`privgate.recipe.Recipe` calls :func:`check_recipe` from ``__post_init__``,
so a recipe module with ``schedule="cosin"`` or ``label_smoothing=-0.1`` fails
where it is written (the CLI reports it as bad input) instead of training
reference models unlike the target, and ``dataclasses.replace`` is checked too.
Settings that depend on the data (a warm-up longer than the training, crops of
rows that are not images) are checked when training starts
(:mod:`privgate.training.schedules`, :mod:`privgate.training.augment`).
"""

from __future__ import annotations

import math
from typing import Any

from privgate.errors import RecipeError
from privgate.recipe.signature import signature_problem
from privgate.recipe.spec import OPTIMIZERS, PRECISIONS, SCHEDULES, Augment


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(float(v))


def _int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _bad(head: str, field: str, value: Any, want: str) -> RecipeError:
    return RecipeError(f"{head}: {field} must be {want}, got {value!r}.")


def check_recipe(recipe: Any) -> None:
    """Raise :class:`RecipeError` naming the first bad training setting of ``recipe`` (see the module docstring)."""
    head = f"recipe '{recipe.name}'"
    _check_training(recipe, head)
    _check_schedule(recipe, head)
    _check_optimiser(recipe, head)
    if recipe.augment is not None:
        _check_augment(recipe.augment, head)


def _check_training(recipe: Any, head: str) -> None:
    """What trains the model: a model_factory or the user's train_fn."""
    if recipe.model_factory is None and recipe.train_fn is None:
        raise RecipeError(
            f"{head}: give a model_factory (privgate trains the model) or a train_fn (your own training loop, "
            "train(x, y, seed, device) -> nn.Module)."
        )
    for name in ("model_factory", "train_fn"):
        value = getattr(recipe, name)
        if value is not None and not callable(value):
            raise _bad(head, name, value, "a function or None")
    if recipe.train_fn is not None:
        problem = signature_problem(recipe.train_fn)
        if problem:
            raise RecipeError(f"{head}: train_fn {problem}.")


def _check_schedule(recipe: Any, head: str) -> None:
    """The learning-rate schedule and its warm-up."""
    if recipe.optimizer not in OPTIMIZERS:
        raise _bad(head, "optimizer", recipe.optimizer, f"one of {', '.join(OPTIMIZERS)}")
    if recipe.schedule not in SCHEDULES:
        raise _bad(head, "schedule", recipe.schedule, f"one of {', '.join(SCHEDULES)}")
    if not _int(recipe.warmup_steps) or recipe.warmup_steps < 0:
        raise _bad(head, "warmup_steps", recipe.warmup_steps, "a whole number of steps >= 0")
    if not _number(recipe.warmup_fraction) or not 0.0 <= recipe.warmup_fraction < 1.0:
        raise _bad(head, "warmup_fraction", recipe.warmup_fraction, "a fraction in [0, 1)")
    if recipe.warmup_steps and recipe.warmup_fraction:
        raise RecipeError(f"{head}: give warmup_steps or warmup_fraction, not both.")
    if not _int(recipe.lr_step_epochs) or recipe.lr_step_epochs < 1:
        raise _bad(head, "lr_step_epochs", recipe.lr_step_epochs, "a whole number of epochs >= 1")
    if not _number(recipe.lr_gamma) or recipe.lr_gamma <= 0:
        raise _bad(head, "lr_gamma", recipe.lr_gamma, "a positive number")
    if not _number(recipe.min_lr) or recipe.min_lr < 0:
        raise _bad(head, "min_lr", recipe.min_lr, "a number >= 0")


def _check_optimiser(recipe: Any, head: str) -> None:
    """The optimiser's settings, the loss's smoothing, clipping and precision (betas normalised to floats)."""
    betas = recipe.betas
    if not isinstance(betas, (tuple, list)) or len(betas) != 2 or not all(_number(b) and 0.0 <= b < 1.0 for b in betas):
        raise _bad(head, "betas", betas, "two numbers in [0, 1)")
    recipe.betas = (float(betas[0]), float(betas[1]))
    if not isinstance(recipe.nesterov, bool):
        raise _bad(head, "nesterov", recipe.nesterov, "True or False")
    if recipe.nesterov and (recipe.optimizer != "sgd" or not recipe.momentum):
        raise RecipeError(f"{head}: nesterov needs optimizer 'sgd' with momentum > 0.")
    if not _number(recipe.label_smoothing) or not 0.0 <= recipe.label_smoothing < 1.0:
        raise _bad(head, "label_smoothing", recipe.label_smoothing, "a number in [0, 1)")
    clip = recipe.clip_grad_norm
    if clip is not None and (not _number(clip) or clip <= 0):
        raise _bad(head, "clip_grad_norm", clip, "a positive number or None")
    if recipe.precision not in PRECISIONS:
        raise _bad(head, "precision", recipe.precision, f"one of {', '.join(PRECISIONS)}")


def _check_augment(aug: Any, head: str) -> None:
    if not isinstance(aug, Augment):
        raise _bad(head, "augment", aug, "a privgate.recipe.Augment or None")
    if not _int(aug.crop_padding) or aug.crop_padding < 0:
        raise _bad(head, "augment.crop_padding", aug.crop_padding, "a whole number of pixels >= 0")
    if not isinstance(aug.flip, bool):
        raise _bad(head, "augment.flip", aug.flip, "True or False")
    if aug.padding_mode not in ("zeros", "reflect"):
        raise _bad(head, "augment.padding_mode", aug.padding_mode, "'zeros' or 'reflect'")
    if aug.transform is not None and not callable(aug.transform):
        raise _bad(head, "augment.transform", aug.transform, "a function (batch, generator) -> batch, or None")


__all__ = ["check_recipe"]
