"""Reference models trained one at a time (:func:`privgate.training.loop.train_model`), what the engine replicates.

:func:`privgate.training.engine.train_models` falls back to it for what no
kernel stacks — a subclass with its own ``train`` without DP-SGD, a model no
kernel can run — and always uses it for a recipe of the user's own training
function (:mod:`privgate.training.function`), whose models are one call each.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import nn

from privgate.errors import RecipeError
from privgate.recipe import Recipe
from privgate.training.loop import takes_device, train_model


def own_loop_reason(recipe: Recipe) -> str:
    """Why the engine trains a recipe of the user's own training function one model at a time."""
    from privgate.recipe.signature import function_name

    return (
        f"recipe '{recipe.name}' trains with its own function {function_name(recipe.train_fn)} (privgate's engine "
        "cannot stack a user's training loop)"
    )


def train_sequential(
    recipe: Recipe, x: np.ndarray, y: np.ndarray, masks: np.ndarray, seeds: Sequence[int], device: str = "cpu"
) -> tuple[list[dict[str, torch.Tensor]], list[str], nn.Module | None]:
    """One :func:`~privgate.training.loop.train_model` call per model: the reference the vectorised engine replicates.

    Returns the states, notes, and — for a recipe of the user's own training
    function — the first model returned, whose architecture the states load into
    (:attr:`privgate.training.ensemble.TorchReader.architecture`).
    """
    out = []
    notes: list[str] = []
    architecture: nn.Module | None = None
    if device != "cpu" and not takes_device(recipe):
        notes.append(f"{type(recipe).__name__}.train takes no device argument; its models were trained on the CPU")
    for mask, s in zip(masks, seeds):
        try:
            net = train_model(recipe, x[mask], y[mask], seed=int(s), device=device)
        except RecipeError:
            raise
        except Exception as exc:
            raise RecipeError(f"recipe '{recipe.name}': training failed ({exc.__class__.__name__}: {exc}).") from None
        out.append({n: t.detach().cpu().clone() for n, t in net.state_dict().items()})
        if recipe.own_loop and architecture is None:
            architecture = net.cpu().eval()
    return out, notes, architecture


__all__ = ["own_loop_reason", "train_sequential"]
