"""The vectorised engine: K models of one recipe trained at once by one of the stacked kernels.

The closed-form MLP kernel (:mod:`privgate.training.mlp`, DP-SGD included), the grouped kernel
(:mod:`privgate.training.grouped`) or ``vmap`` (:mod:`privgate.training.stacked`); a recipe none of them can
replicate is :class:`~privgate.training.kernels.NotVectorisable`, and :mod:`privgate.training.engine` trains it
one model at a time. How it works: ``docs/internals-training-stats.md``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from privgate.errors import RecipeError
from privgate.recipe import OPTIMIZERS, Recipe
from privgate.training import augment, grouped, mlp
from privgate.training.dp_step import dp_step, dp_view
from privgate.training.kernels import NotVectorisable, mlp_kernel_mismatch
from privgate.training.optimisers import optimise
from privgate.training.plan import dropout_seed, epoch_schedule
from privgate.training.sequential import own_loop_reason
from privgate.training.stacked import NotStackable, StackedModel, Training, unstack


def _check_vectorisable(recipe: Recipe) -> None:
    if recipe.own_loop:
        raise NotVectorisable(own_loop_reason(recipe))
    if not recipe.vectorisable and recipe.dp_sgd is None:
        raise NotVectorisable(f"recipe '{recipe.name}' ({type(recipe).__name__}) trains with its own loop")
    if recipe.optimizer not in OPTIMIZERS:
        raise RecipeError(
            f"recipe '{recipe.name}': unknown optimizer '{recipe.optimizer}' (use {', '.join(map(repr, OPTIMIZERS))})."
        )


KERNELS = ("auto", "mlp", "grouped", "vmap")


def train_vectorised(
    recipe: Recipe,
    x: np.ndarray,
    y: np.ndarray,
    masks: np.ndarray,
    seeds: Sequence[int],
    kernel: str = "auto",
    device: str = "cpu",
) -> tuple[list[dict[str, torch.Tensor]], str, list[str]]:
    """Train ``len(seeds)`` models at once (see the module docstring): ``(states, kernel used, notes)``.

    ``kernel``: ``"mlp"`` — the closed-form kernel of :mod:`privgate.training.mlp`
    (plain Linear/activation stacks only); ``"grouped"`` — the grouped kernel of
    :mod:`privgate.training.grouped` (``nn.Sequential`` stacks of convolutions,
    normalisations, pooling, dropout and linear layers); ``"vmap"`` — the general
    kernel of :mod:`privgate.training.stacked` (any model ``vmap`` can map);
    ``"auto"`` — the first of these three that qualifies for the model and
    reproduces its own forward pass.
    """
    if kernel not in KERNELS:
        raise ValueError(f"kernel must be one of {KERNELS}, not {kernel!r}")
    _check_vectorisable(recipe)
    if recipe.dp_sgd is not None:
        recipe = dp_view(recipe)
    stack = _Stack.of(recipe, x, y, masks, seeds, device)
    if recipe.dp_sgd is not None and kernel == "vmap":
        raise NotVectorisable("DP-SGD is vectorised for MLPs only (the vmap kernel was asked for)")
    stack.training = _training(recipe, stack.xt, seeds)
    why = ""
    if kernel in ("auto", "mlp"):
        states, said = _train_mlp(stack)  # the kernel's name, or why it cannot train these models
        if states is not None:
            return states, said, []
        why = said
    if recipe.dp_sgd is not None:
        raise NotVectorisable(f"DP-SGD is vectorised for MLPs only ({why})")
    if kernel == "mlp":
        raise NotVectorisable(f"the MLP kernel cannot train this model: {why}")
    forward = _grouped_forward(stack, x, kernel) if kernel in ("auto", "grouped") else None
    if stack.training.bf16 and forward is None:  # vmap's batching rules run convolutions outside torch.autocast
        raise NotVectorisable("the general (vmap) kernel cannot run a bf16 forward pass as torch.autocast does")
    return _train_stacked(stack, forward), "grouped" if forward else "vmap", []


@dataclass
class _Stack:
    """K freshly built models of one recipe, the data on the training device, and each model's rows and generator."""

    recipe: Recipe
    nets: list[nn.Module]
    seeds: Sequence[int]
    xt: torch.Tensor
    yt: torch.Tensor
    rows: list[torch.Tensor]
    gens: list[torch.Generator]
    device: torch.device
    training: Training = field(default_factory=lambda: Training(0.0, False, ()))

    @classmethod
    def of(
        cls, recipe: Recipe, x: np.ndarray, y: np.ndarray, masks: np.ndarray, seeds: Sequence[int], device: str
    ) -> _Stack:
        dev = torch.device(device)
        return cls(
            recipe=recipe,
            nets=[recipe.build(seed=s) for s in seeds],
            seeds=seeds,
            xt=torch.as_tensor(np.asarray(x), dtype=torch.float32).to(dev),
            yt=torch.as_tensor(np.asarray(y), dtype=torch.long).to(dev),
            rows=[torch.as_tensor(np.flatnonzero(m), dtype=torch.long) for m in masks],
            gens=[torch.Generator().manual_seed(int(s)) for s in seeds],
            device=dev,
        )

    def schedule(self) -> tuple[torch.Tensor, torch.Tensor, np.ndarray]:
        """The next epoch's batches of every model (:func:`privgate.training.plan.epoch_schedule`)."""
        return epoch_schedule(self.gens, self.rows, int(self.recipe.batch_size))


def _train_mlp(stack: _Stack) -> tuple[list[dict[str, torch.Tensor]] | None, str]:
    """The models trained by the closed-form MLP kernel and the kernel's name, or None and why it cannot."""
    from torch.func import stack_module_state

    recipe, nets, k = stack.recipe, stack.nets, len(stack.nets)
    mlp_plan, why = mlp.plan(nets[0])
    if mlp_plan is not None and (stack.training.bf16 or stack.training.augmenters):
        return None, "the MLP kernel trains in float32 without augmentation"
    if mlp_plan is None:
        return None, why
    params, _ = stack_module_state(nets)
    names = list(params)
    p = [params[n].detach().to(stack.device) for n in names]
    batch = 1 if recipe.dp_sgd is not None else int(recipe.batch_size)
    engine = mlp.StackedMLP(mlp_plan, names, k, batch, stack.xt, stack.yt, stack.training.label_smoothing)
    why = mlp_kernel_mismatch(engine, nets[0], engine.pack(p), stack.xt)
    if why:
        return None, why
    p = engine.pack(p)
    if recipe.dp_sgd is not None:  # DP-SGD: Poisson batches, clipping and noise per model
        grad_fn, dp_schedule = dp_step(engine, recipe.dp_sgd, stack.rows, stack.gens, stack.seeds, p)
        optimise(recipe, p, grad_fn, dp_schedule)
        used = "mlp-dp"
    else:
        optimise(recipe, p, engine.grads, stack.schedule)
        used = "mlp"
    return unstack(nets[0], dict(zip(names, engine.unpack(p))), k), used


def _grouped_forward(stack: _Stack, x: np.ndarray, kernel: str) -> grouped.GroupedForward | None:
    """The grouped kernel's forward pass for these models, or None when it does not qualify (``kernel`` ``auto``)."""
    net = stack.nets[0]
    layout, why = grouped.plan(net, tuple(x.shape[1:]))
    if layout is not None:
        why = grouped.mismatch(layout, net, torch.as_tensor(x[: min(8, len(x))]))
        if not why:
            size = 2 if stack.training.bf16 else 4
            batch = int(stack.recipe.batch_size)
            per_call = grouped.models_per_call(net, stack.xt[:1], batch, len(stack.nets), stack.device, size)
            return grouped.GroupedForward(layout, per_call)
    if kernel == "grouped":
        raise NotVectorisable(f"the grouped kernel cannot train this model: {why}")
    return None


def _train_stacked(stack: _Stack, forward: grouped.GroupedForward | None) -> list[dict[str, torch.Tensor]]:
    """The models trained as one stacked model: the grouped kernel's ``forward``, or ``vmap`` (None)."""
    dropout = [dropout_seed(s) for s in stack.seeds]
    try:
        model = StackedModel(stack.nets, stack.xt, stack.yt, dropout, grouped=forward, training=stack.training)
    except NotStackable as exc:
        raise NotVectorisable(str(exc)) from None
    stack.nets = []  # the stacked model holds the parameters now
    try:
        optimise(stack.recipe, model.params, model.grads, stack.schedule, epoch_hook=model.begin_epoch)
    except NotStackable as exc:
        raise NotVectorisable(str(exc)) from None
    return model.states([t.detach() for t in model.params])


def _training(recipe: Recipe, xt: torch.Tensor, seeds: Sequence[int]) -> Training:
    """The recipe's label smoothing, precision and augmentation for the kernels (checked on the data first)."""
    augmenters: tuple[augment.Augmenter, ...] = ()
    if recipe.augment is not None:
        augment.check_rows(recipe.augment, xt.shape[1:], recipe.name)
        augment.check_transform(recipe.augment, xt[: min(4, len(xt))], recipe.name)
        augmenters = tuple(augment.Augmenter(recipe.augment, int(s), recipe.name) for s in seeds)
    return Training(float(recipe.label_smoothing), recipe.precision == "bf16", augmenters)


__all__ = ["KERNELS", "train_vectorised"]
