"""Recipe: how the target was trained, so privgate can train "another model like it".

A recipe is given as a Python entry point ``module:attr`` whose attribute is a
:class:`Recipe`, a zero-argument callable returning one, or the team's own
training function ``train(x, y, seed, device) -> nn.Module`` (wrapped as
``Recipe(train_fn=train)``, :mod:`privgate.training.function`). A recipe is
configuration: reference and shadow models, and DP-SGD retraining, all train
through :func:`privgate.training.loop.train_model`, one loop used everywhere.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from privgate.errors import RecipeError
from privgate.recipe.check import check_recipe
from privgate.recipe.spec import DPSGD, OPTIMIZERS, PRECISIONS, SCHEDULES, TRAINING_DEFAULTS, Augment

if TYPE_CHECKING:  # torch is imported where a recipe builds or trains a model, not by reading one
    import torch
    from torch import nn


@dataclass
class Recipe:
    """Everything needed to train a model like the target.

    The first fields say what every recipe says; the rest describe how teams
    really train (learning-rate schedules, AdamW, label smoothing, gradient
    clipping, bf16, augmentation) and default to what turns them off. Both
    privgate's loop (:func:`privgate.training.loop.train_model`) and the vectorised
    engine (:mod:`privgate.training.engine`) apply every one of them, the same way.
    A subclass may train its own way with a method ``train(x, y, seed, model,
    device) -> nn.Module`` (:func:`own_train`), which ``train_model`` then calls.

    Args:
        model_factory: builds a fresh, untrained ``nn.Module`` that outputs logits
            (``[n, K]``, or one logit ``[n]``/``[n, 1]`` for a binary task trained with
            BCE-with-logits; rows of probabilities are trained on their log). Required
            unless ``train_fn`` is given.
        train_fn: your own training loop, ``train(x, y, seed, device) -> nn.Module``:
            called once per reference model instead of privgate's loop
            (:mod:`privgate.training.function`); the settings below then only
            describe it (``augment`` decides LiRA's and RMIA's augmented queries,
            :mod:`privgate.attacks.views`) and the engine cannot stack it.
        epochs: passes over the training set.
        batch_size: mini-batch size.
        lr: learning rate (the peak rate of a schedule).
        optimizer: ``"adam"``, ``"adamw"`` (decoupled weight decay, Loshchilov &
            Hutter 2017, arXiv 1711.05101) or ``"sgd"``, with ``torch.optim``'s update rules.
        momentum: SGD momentum.
        weight_decay: L2 penalty added to the gradient (Adam, SGD), or AdamW's
            decoupled decay ``p ← p·(1 − lr·weight_decay)``.
        pretrained: optional path of a *public* state_dict to start from.
        name: shown in reports.
        extra: free-form facts for the report.
        schedule: ``"constant"``, ``"step"``, ``"cosine"`` or ``"one-cycle"``: the
            learning rate of every step (:mod:`privgate.training.schedules`).
        warmup_steps: a linear warm-up of this many optimiser steps first.
        warmup_fraction: or of this fraction of all steps (give one of the two).
        lr_step_epochs: ``"step"``: multiply the rate by ``lr_gamma`` every this many epochs.
        lr_gamma: ``"step"``: the factor.
        min_lr: ``"cosine"``: the rate it anneals to.
        betas: Adam's and AdamW's (β1, β2).
        nesterov: Nesterov momentum for SGD (needs ``momentum > 0``).
        label_smoothing: cross-entropy against ``(1 − ε)·one-hot + ε/K`` (Szegedy
            et al. 2015, arXiv 1512.00567), as ``CrossEntropyLoss(label_smoothing=ε)``.
        clip_grad_norm: rescale each step's whole gradient to at most this
            L2 norm (``torch.nn.utils.clip_grad_norm_``); None: no clipping.
        precision: ``"fp32"``, or ``"bf16"`` for the forward pass under
            ``torch.autocast(dtype=torch.bfloat16)`` (GPU, and CPU where torch supports it).
        augment: an :class:`Augment` (random crops, flips, your own transform), or None.
    """

    model_factory: Callable[[], nn.Module] | None = None
    epochs: int = 30
    batch_size: int = 64
    lr: float = 1e-3
    optimizer: Literal["adam", "adamw", "sgd"] = "adam"
    momentum: float = 0.0
    weight_decay: float = 0.0
    pretrained: str | None = None
    name: str = "recipe"
    extra: dict[str, Any] = field(default_factory=dict)
    schedule: Literal["constant", "step", "cosine", "one-cycle"] = "constant"
    warmup_steps: int = 0
    warmup_fraction: float = 0.0
    lr_step_epochs: int = 30
    lr_gamma: float = 0.1
    min_lr: float = 0.0
    betas: tuple[float, float] = (0.9, 0.999)
    nesterov: bool = False
    label_smoothing: float = 0.0
    clip_grad_norm: float | None = None
    precision: Literal["fp32", "bf16"] = "fp32"
    augment: Augment | None = None
    train_fn: Callable[..., nn.Module] | None = None

    def __post_init__(self) -> None:
        check_recipe(self)

    def settings_in_use(self) -> list[str]:
        """The training settings this recipe sets beyond the plain loop (:data:`TRAINING_DEFAULTS`), by name."""
        return [k for k, v in TRAINING_DEFAULTS.items() if getattr(self, k) != v]

    def build(self, seed: int | None = None) -> nn.Module:
        """A fresh model (from the public pre-trained start when the recipe names one).

        With ``seed``, the factory runs under ``torch.manual_seed(seed)`` in a
        forked generator, so the same seed gives the same initial weights and
        the caller's random state is untouched; no other thread seeds torch's
        global generator meanwhile (:mod:`privgate.recipe.rng`). Any failure of the user's
        factory is a :class:`RecipeError`, as is a recipe of a training function that gives no factory.
        """
        import torch
        from torch import nn

        from privgate.recipe.rng import seeded

        if self.model_factory is None:
            raise RecipeError(
                f"recipe '{self.name}': trains with its own function and has no model_factory, so privgate cannot "
                "build its model (a state_dict checkpoint and DP-SGD retraining need one: give "
                "Recipe(train_fn=..., model_factory=...), or save the target as TorchScript)."
            )
        try:
            with seeded(seed):
                model = self.model_factory()
        except RecipeError:
            raise
        except Exception as exc:
            raise RecipeError(
                f"recipe '{self.name}': building the model failed ({exc.__class__.__name__}: {exc})."
            ) from None
        if not isinstance(model, nn.Module):
            raise RecipeError(
                f"recipe '{self.name}': model_factory returned {type(model).__name__}, not a torch.nn.Module."
            )
        if self.pretrained:
            state = torch.load(self.pretrained, map_location="cpu", weights_only=True)
            model.load_state_dict(state)
        return model

    @property
    def own_loop(self) -> bool:
        """Whether training calls the user's ``train_fn`` (a subclass with its own ``train`` method does not)."""
        return self.train_fn is not None and not own_train(self)

    @property
    def vectorisable(self) -> bool:
        """Whether :mod:`privgate.training.engine` may train many copies of this recipe at once.

        True for the plain recipe, whose loop the vectorised engine replicates; a
        subclass with its own ``train`` method (e.g. DP-SGD training) or a recipe of
        the user's own ``train_fn`` is trained one model at a time instead. Subclasses
        may also override this property.
        """
        return not own_train(self) and self.train_fn is None

    @property
    def dp_sgd(self) -> DPSGD | None:
        """The DP-SGD this recipe trains with, when its ``train`` is DP-SGD; None for plain training.

        A recipe that returns a :class:`DPSGD` lets the vectorised engine train
        its MLPs at once with the same mechanism (:mod:`privgate.training.mlp`).
        """
        return None

    def make_optimizer(self, params: Any) -> torch.optim.Optimizer:
        """The recipe's ``torch.optim`` optimiser over ``params``, at the recipe's (peak) learning rate."""
        import torch

        if self.optimizer == "adam":
            return torch.optim.Adam(params, lr=self.lr, betas=self.betas, weight_decay=self.weight_decay)
        if self.optimizer == "adamw":
            return torch.optim.AdamW(params, lr=self.lr, betas=self.betas, weight_decay=self.weight_decay)
        if self.optimizer == "sgd":
            return torch.optim.SGD(
                params, lr=self.lr, momentum=self.momentum, weight_decay=self.weight_decay, nesterov=self.nesterov
            )
        raise RecipeError(
            f"recipe '{self.name}': unknown optimizer '{self.optimizer}' (use {', '.join(map(repr, OPTIMIZERS))})."
        )


def own_train(recipe: Any) -> bool:
    """Whether ``recipe``'s class trains its own way: a ``train(x, y, seed, model, device)`` method of a subclass
    (DP-SGD's :class:`~privgate.dp.recipe.DPRecipe`), which :func:`~privgate.training.loop.train_model` calls."""
    return callable(getattr(type(recipe), "train", None))


__all__ = ["OPTIMIZERS", "PRECISIONS", "SCHEDULES", "TRAINING_DEFAULTS", "Augment", "DPSGD", "Recipe", "own_train"]
