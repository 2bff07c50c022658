"""Reference models trained one ``recipe.train`` call at a time: the loop the vectorised engine replicates.

:func:`privgate.training.engine.train_models` falls back to it for what no
kernel stacks — a subclass overriding ``train`` without DP-SGD, a model no
kernel can run — and always uses it for a recipe of the user's own training
function (:mod:`privgate.training.function`), whose models are one call each.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from privgate.errors import RecipeError
from privgate.recipe import Recipe


def takes_device(recipe: Recipe) -> bool:
    """Whether ``recipe.train`` accepts ``device=`` (a subclass written for an older privgate may not)."""
    try:
        params = inspect.signature(recipe.train).parameters
    except (TypeError, ValueError):
        return False
    return "device" in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


def train_one(recipe: Recipe, x: np.ndarray, y: np.ndarray, seed: int, device: str = "cpu") -> nn.Module:
    """``recipe.train(x, y, seed=seed)`` on ``device`` when the recipe's ``train`` takes one (else on the CPU)."""
    extra = {"device": device} if device != "cpu" and takes_device(recipe) else {}
    return recipe.train(x, y, seed=int(seed), **extra)


def own_loop_reason(recipe: Recipe) -> str:
    """Why the engine trains a recipe of the user's own training function one model at a time."""
    from privgate.training.function import function_name

    return (
        f"recipe '{recipe.name}' trains with its own function {function_name(recipe.train_fn)} (privgate's engine "
        "cannot stack a user's training loop)"
    )


def train_sequential(
    recipe: Recipe, x: np.ndarray, y: np.ndarray, masks: np.ndarray, seeds: Sequence[int], device: str = "cpu"
) -> tuple[list[dict[str, torch.Tensor]], list[str], nn.Module | None]:
    """One ``recipe.train`` call per model: the reference the vectorised engine replicates.

    Returns the states, notes, and — for a recipe of the user's own training
    function — the first model returned, whose architecture the states load into
    (:attr:`privgate.training.ensemble.TorchReader.architecture`).
    """
    out = []
    notes: list[str] = []
    architecture: nn.Module | None = None
    extra: dict[str, Any] = {}
    if device != "cpu":
        if takes_device(recipe):
            extra["device"] = device
        else:
            notes.append(f"{type(recipe).__name__}.train takes no device argument; its models were trained on the CPU")
    for mask, s in zip(masks, seeds):
        try:
            net = recipe.train(x[mask], y[mask], seed=int(s), **extra)
        except RecipeError:
            raise
        except Exception as exc:
            raise RecipeError(f"recipe '{recipe.name}': training failed ({exc.__class__.__name__}: {exc}).") from None
        out.append({n: t.detach().cpu().clone() for n, t in net.state_dict().items()})
        if recipe.own_loop and architecture is None:
            architecture = net.cpu().eval()
    return out, notes, architecture


__all__ = ["own_loop_reason", "takes_device", "train_one", "train_sequential"]
