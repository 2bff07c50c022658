"""privgate's training loop: one model of a :class:`~privgate.recipe.Recipe` on (x, y), deterministic for a seed.

Reference and shadow models, federated nodes and DP-SGD retraining all train through :func:`train_model`, and the
vectorised engine (:mod:`privgate.training.engine`) replicates its loop K models at a time. How each random draw is
seeded: ``docs/internals-training-stats.md``.
"""

from __future__ import annotations

import inspect
from contextlib import nullcontext
from typing import Any, NamedTuple

import numpy as np
import torch
from torch import nn

from privgate import outputs
from privgate.errors import RecipeError
from privgate.recipe import Recipe, own_train
from privgate.recipe.rng import forked as forked_rng
from privgate.recipe.rng import seed_global
from privgate.training import augment, schedules
from privgate.training.dropout import seeded_dropout
from privgate.training.function import call_training_function
from privgate.training.plan import dropout_seed


def train_model(
    recipe: Recipe,
    x: np.ndarray,
    y: np.ndarray,
    seed: int = 0,
    model: nn.Module | None = None,
    device: str | torch.device | None = None,
) -> nn.Module:
    """Train a model on (x, y) with ``recipe``; deterministic for a given seed.

    A recipe whose class has its own ``train`` method (:func:`privgate.recipe.own_train`, e.g. DP-SGD) is trained
    by it; a recipe with a ``train_fn`` calls that instead, checked
    (:func:`privgate.training.function.call_training_function`); any other runs privgate's loop
    (:func:`_fit`): initialised by ``recipe.build(seed)``, batches in ``randperm`` order from a generator seeded
    with ``seed``, dropout masks from one seeded with :func:`~privgate.training.plan.dropout_seed`, augmentation
    from generators seeded from ``seed``, any other random draw of the forward pass from torch's generator seeded
    the same way (and restored after).

    Args:
        recipe: how to train.
        x: inputs, float array with the model's input shape per row.
        y: integer class labels.
        seed: drives initialisation, batch order, dropout masks and augmentation.
        model: train this module instead of a fresh one (federated rounds).
        device: where to train (``"cpu"``, ``"cuda"``); default the CPU. The model is returned on that device.
    """
    if own_train(recipe):
        extra: dict[str, Any] = {} if model is None else {"model": model}
        if device is not None and str(device) != "cpu" and takes_device(recipe):
            extra["device"] = device
        return recipe.train(x, y, seed=int(seed), **extra)  # type: ignore[attr-defined]
    return train_loop(recipe, x, y, seed, model, device)


def train_loop(
    recipe: Recipe,
    x: np.ndarray,
    y: np.ndarray,
    seed: int = 0,
    model: nn.Module | None = None,
    device: str | torch.device | None = None,
) -> nn.Module:
    """The recipe's ``train_fn``, else privgate's loop, whatever the recipe's class: what a subclass's own ``train``
    calls to train as privgate does (arguments: :func:`train_model`)."""
    if recipe.train_fn is not None:  # the user's own loop (privgate.training.function)
        if model is not None:
            raise RecipeError(
                f"recipe '{recipe.name}': its train_fn trains a model from scratch and cannot continue a given one "
                "(federated rounds); give a Recipe without train_fn for this job."
            )
        return call_training_function(recipe, x, y, int(seed), str(device or "cpu"))
    return _fit(recipe, x, y, int(seed), model, torch.device(device or "cpu"))


def takes_device(recipe: Recipe) -> bool:
    """Whether :func:`train_model` trains ``recipe`` on the device asked: a subclass's own ``train`` written for an
    older privgate may take no ``device=`` (its models then train on the CPU)."""
    if not own_train(recipe):
        return True
    try:
        params = inspect.signature(recipe.train).parameters  # type: ignore[attr-defined]
    except (TypeError, ValueError):
        return False
    return "device" in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


class _Setup(NamedTuple):
    """What one training run holds: the model, its rows on the device, the optimiser and what each step applies."""

    net: nn.Module
    xt: torch.Tensor
    yt: torch.Tensor
    opt: torch.optim.Optimizer
    scheduler: Any
    augmenter: augment.Augmenter | None
    layout: torch.memory_format | None


def _setup(
    recipe: Recipe, x: np.ndarray, y: np.ndarray, seed: int, model: nn.Module | None, dev: torch.device
) -> _Setup:
    net = (model if model is not None else recipe.build(seed=seed)).to(dev)
    xt = torch.as_tensor(np.asarray(x), dtype=torch.float32).to(dev)
    yt = torch.as_tensor(np.asarray(y), dtype=torch.long).to(dev)
    opt = recipe.make_optimizer(net.parameters())
    n = len(xt)
    spe = schedules.steps_per_epoch(n, recipe.batch_size)
    scheduler = schedules.torch_scheduler(recipe, opt, int(recipe.epochs) * spe, spe)
    augmenter = None
    if recipe.augment is not None:
        augment.check_rows(recipe.augment, xt.shape[1:], recipe.name)
        augment.check_transform(recipe.augment, xt[: min(4, n)], recipe.name)
        augmenter = augment.Augmenter(recipe.augment, seed, recipe.name)
    # channels-last convolutions on a GPU: the layout its convolution kernels are fastest in (rounding only)
    layout = torch.channels_last if dev.type == "cuda" and xt.dim() == 4 else None
    if layout is not None:
        net = net.to(memory_format=layout)
    return _Setup(net, xt, yt, opt, scheduler, augmenter, layout)


def _fit(
    recipe: Recipe, x: np.ndarray, y: np.ndarray, seed: int, model: nn.Module | None, dev: torch.device
) -> nn.Module:
    """privgate's own loop. Each step: augment the batch, forward pass (under bf16 autocast when
    ``precision="bf16"``), cross-entropy (label-smoothed; BCE-with-logits for one logit, :mod:`privgate.outputs`),
    backward pass, gradient clipping, the optimiser's step, then the learning-rate scheduler's step
    (:mod:`privgate.training.schedules`)."""
    s = _setup(recipe, x, y, seed, model, dev)
    net, n = s.net, len(s.xt)
    gen = torch.Generator().manual_seed(seed)
    bf16, smoothing = recipe.precision == "bf16", float(recipe.label_smoothing)
    kind: outputs.Kind | None = None
    net.train()
    masks = torch.Generator().manual_seed(dropout_seed(seed))
    forked = [dev.index if dev.index is not None else torch.cuda.current_device()] if dev.type == "cuda" else []
    with forked_rng(forked), seeded_dropout(net, masks):
        seed_global(dropout_seed(seed))
        for _ in range(recipe.epochs):
            order = torch.randperm(n, generator=gen).to(dev)
            for start in range(0, n, recipe.batch_size):
                idx = order[start : start + recipe.batch_size]
                xb = s.xt[idx] if s.augmenter is None else s.augmenter(s.xt[idx])
                if s.layout is not None:
                    xb = xb.contiguous(memory_format=s.layout)
                s.opt.zero_grad(set_to_none=True)
                with torch.autocast(dev.type, dtype=torch.bfloat16) if bf16 else nullcontext():
                    out = net(xb)
                if kind is None:  # decided on the first batch (each batch's check would wait on a GPU)
                    kind = outputs.kind_of(out.detach().float()) or outputs.LOGITS
                outputs.nll(out.float(), s.yt[idx], kind, label_smoothing=smoothing).backward()
                if recipe.clip_grad_norm is not None:
                    torch.nn.utils.clip_grad_norm_(net.parameters(), float(recipe.clip_grad_norm))
                s.opt.step()
                if s.scheduler is not None:
                    s.scheduler.step()
    if s.layout is not None:
        net = net.to(memory_format=torch.contiguous_format)
    net.eval()
    return net


__all__ = ["takes_device", "train_loop", "train_model"]
