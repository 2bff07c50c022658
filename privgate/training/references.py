"""Reference models of any recipe: a trainer per recipe kind, found by one function the attacks call.

Torch recipes train on the vectorised engine (:mod:`privgate.training.engine`), tree recipes as boosters
(:mod:`privgate.training.trees`), scikit-learn recipes as clones (:mod:`privgate.training.sklearn_models`); each
trainer first refuses a recipe that cannot train like the target, and all return a
:class:`~privgate.training.trained.TrainedReferences`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from privgate.errors import RecipeError
from privgate.sklearn_recipe import SklearnRecipe
from privgate.training import sklearn_models, trees
from privgate.training.trained import TrainedReferences, TrainSettings
from privgate.tree_recipe import TreeRecipe


@dataclass(frozen=True)
class Trainer:
    """How one kind of recipe trains reference models.

    Attributes:
        check: ``check(target, recipe)`` raises :class:`RecipeError` when the recipe cannot train like the target.
        train: ``train(recipe, target, x, y, masks, seeds, settings)``: model k on ``x[masks[k]]``, seed ``seeds[k]``.
        executor: whether it trains on the run's executor (:attr:`TrainSettings.executor`; else here).
    """

    check: Callable[[Any, Any], None]
    train: Callable[..., TrainedReferences]
    executor: bool


def trainer_for(recipe: Any) -> Trainer:
    """The trainer of the recipe's kind: :data:`TREES`, :data:`CLONES` or :data:`TORCH`."""
    if isinstance(recipe, TreeRecipe):
        return TREES
    if isinstance(recipe, SklearnRecipe):
        return CLONES
    return TORCH


def _train_torch(
    recipe: Any,
    target: Any,
    x: np.ndarray,
    y: np.ndarray,
    masks: np.ndarray,
    seeds: Sequence[int],
    settings: TrainSettings,
) -> TrainedReferences:
    """Torch models; a recipe of the user's own training function without a ``model_factory`` loads its states into
    the target's architecture, and its first model is checked against the target once it has returned one."""
    from privgate.training import engine  # torch: imported by torch recipes only

    own = recipe.model_factory is None
    refs = engine.train_ensemble(recipe, x, y, masks, seeds, settings, architecture=target.module if own else None)
    if own and len(refs):
        check_torch_target(target, recipe, refs.models[0])
    return refs


def _check_torch(target: Any, recipe: Any) -> None:
    if recipe.model_factory is not None:  # a recipe of the user's own training function only: once it returned one
        check_torch_target(target, recipe)


def check_torch_target(target: Any, recipe: Any, state: dict[str, Any] | None = None) -> None:
    """The recipe's model must have the target's parameters (when the target exposes them).

    ``state``: a trained reference model's, for a recipe of the user's own
    training function that builds no model (checked once it has returned one).
    """
    import torch

    from privgate.training.function import shape_mismatch

    model = target.model
    target_state = model.state_dict() if hasattr(model, "state_dict") and callable(model.state_dict) else None
    if not isinstance(target_state, dict) or not target_state:
        return
    if state is None:
        state = recipe.build().state_dict()
    tensors = {k: v for k, v in target_state.items() if isinstance(v, torch.Tensor)}
    missing, extra, shapes = shape_mismatch(state, tensors)
    if not (missing or extra or shapes):
        return
    detail = "; ".join(
        part
        for part in (
            f"target parameters the recipe's model lacks: {', '.join(missing[:3])}" if missing else "",
            f"recipe parameters the target lacks: {', '.join(extra[:3])}" if extra else "",
            f"different shapes: {', '.join(shapes[:3])}" if shapes else "",
        )
        if part
    )
    raise RecipeError(
        f"recipe '{recipe.name}': its model does not match the target's parameters ({detail}); "
        "reference models must be trained like the target."
    )


def _check_trees(target: Any, recipe: TreeRecipe) -> None:
    trees.check_matches(target.model, recipe)


def _train_trees(
    recipe: TreeRecipe,
    target: Any,
    x: np.ndarray,
    y: np.ndarray,
    masks: np.ndarray,
    seeds: Sequence[int],
    settings: TrainSettings,
) -> TrainedReferences:
    return trees.train_trees(recipe, x, y, masks, seeds, threads=settings.threads or 1)


def _train_clones(
    recipe: SklearnRecipe,
    target: Any,
    x: np.ndarray,
    y: np.ndarray,
    masks: np.ndarray,
    seeds: Sequence[int],
    settings: TrainSettings,
) -> TrainedReferences:
    return sklearn_models.train_clones(recipe, target.model, x, y, masks, seeds, settings)


#: torch models: the vectorised engine, cached
TORCH = Trainer(check=_check_torch, train=_train_torch, executor=True)
#: boosted trees: their own library, one after another, not cached
TREES = Trainer(check=_check_trees, train=_train_trees, executor=False)
#: scikit-learn clones of the recipe's (or the target's) estimator, cached
CLONES = Trainer(check=sklearn_models.check_target, train=_train_clones, executor=True)

__all__ = ["CLONES", "TORCH", "TREES", "Trainer", "check_torch_target", "trainer_for"]
