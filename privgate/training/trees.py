"""Reference models for boosted-tree targets: K boosters of one :class:`~privgate.tree_recipe.TreeRecipe`.

The plan is the one every reference-model attack shares (:mod:`privgate.attacks.reference`; Carlini et al. 2022,
arXiv 2112.03570); each booster trains with its own library, one after another, with the run's thread budget, and
its margins are read as the target's are (:func:`privgate.inputs.targets.boosted.margins`), through a
:class:`BoosterReader` of a :class:`~privgate.training.trained.TrainedReferences`. Boosters are not cached: they train
in well under a second each on audit-sized tables.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from privgate.errors import RecipeError
from privgate.inputs.targets.boosted import BoostedModel, margins, objective_kind
from privgate.training.trained import TrainedReferences
from privgate.tree_recipe import TreeRecipe


@dataclass(frozen=True)
class BoosterReader:
    """How boosters are read: their margins, as the target's are (:func:`privgate.inputs.targets.boosted.margins`)."""

    library: str

    def output_batches(
        self, boosters: list[Any], x: np.ndarray, batch: int = 4096, transform: Any = None
    ) -> Iterator[tuple[int, int, np.ndarray]]:
        """``(model k, first row, margins)`` of every booster on ``x``, ``batch`` rows at a time."""
        if transform is not None:
            raise ValueError("boosters are read on the audit rows as given, not on augmented views")
        for k, booster in enumerate(boosters):
            for i in range(0, len(x), batch):
                yield k, i, margins(self.library, booster, x[i : i + batch])  # type: ignore[arg-type]

    def passes(self, boosters: list[Any], x: np.ndarray) -> int | None:
        return None  # not counted


def check_matches(target_model: Any, recipe: TreeRecipe) -> None:
    """The recipe must train what the target is: the same library, and margins read the same way."""
    if not isinstance(target_model, BoostedModel):
        return  # another kind of target: privgate.inputs.sanity.recipe_warning says so in the report
    if target_model.library != recipe.library:
        raise RecipeError(
            f"tree recipe '{recipe.name}': trains {recipe.library} models but the target is a {target_model.library} "
            "model; reference models must be trained like the target."
        )
    theirs = objective_kind(target_model.library, target_model.objective, target_model.source)
    mine = objective_kind(recipe.library, recipe.objective, f"tree recipe '{recipe.name}'")  # type: ignore[arg-type]
    if mine != theirs:
        raise RecipeError(
            f"tree recipe '{recipe.name}': its objective '{recipe.objective}' gives {mine} outputs but the target's "
            f"'{target_model.objective}' gives {theirs}; reference models must be trained like the target."
        )


def train_trees(
    recipe: TreeRecipe, x: np.ndarray, y: np.ndarray, masks: np.ndarray, seeds: Sequence[int], threads: int = 1
) -> TrainedReferences:
    """Booster k trained on ``x[masks[k]]`` with seed ``seeds[k]``, one after another."""
    t0 = time.perf_counter()
    boosters = [recipe.train(x[m], y[m], seed=s, threads=threads) for m, s in zip(masks, seeds)]
    return TrainedReferences(
        recipe=recipe,
        models=boosters,
        masks=masks,
        seeds=list(seeds),
        reader=BoosterReader(recipe.library),
        trained=len(boosters),
        mode="sequential",
        seconds=time.perf_counter() - t0,
        kernel=recipe.library,
        threads=threads,
        notes=[f"{recipe.library} reference models are trained in each run (boosters are not cached)"],
    )


__all__ = ["BoosterReader", "check_matches", "train_trees"]
