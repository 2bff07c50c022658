"""Reference models for boosted-tree targets: K boosters of one :class:`~privgate.tree_recipe.TreeRecipe`.

The plan is the one every reference-model attack shares (:mod:`privgate.attacks.reference`; Carlini et al. 2022,
arXiv 2112.03570); each booster trains with its own library, one after another, with the run's thread budget, and
its margins are read as the target's are (:func:`privgate.inputs.targets.boosted.margins`). :class:`TreeEnsemble`
answers what attacks ask of an :class:`~privgate.training.ensemble.Ensemble`. Boosters are not cached: they train in
well under a second each on audit-sized tables.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from privgate.errors import RecipeError
from privgate.inputs.targets.boosted import BoostedModel, margins, objective_kind
from privgate.tree_recipe import TreeRecipe


@dataclass
class TreeEnsemble:
    """K trained boosters in mask order and their cost (the fields of :class:`~privgate.training.ensemble.Ensemble`)."""

    recipe: TreeRecipe
    boosters: list[Any]
    masks: np.ndarray
    seeds: list[int]
    trained: int = 0
    cached: int = 0
    mode: str = "sequential"
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)
    kernel: str = ""
    threads: int = 0
    warnings: list[str] = field(default_factory=list)
    device: str = "cpu"

    def __len__(self) -> int:
        return len(self.boosters)

    def first(self, k: int) -> TreeEnsemble:
        """The first ``k`` boosters (all: ``self``); the plan is prefix-stable (:mod:`privgate.attacks.sharing`)."""
        if k >= len(self.boosters):
            return self
        return dataclasses.replace(self, boosters=self.boosters[:k], masks=self.masks[:k], seeds=self.seeds[:k])

    def output_batches(self, x: np.ndarray, batch: int = 4096) -> Iterator[tuple[int, int, np.ndarray]]:
        """``(model k, first row, margins)`` of every booster on ``x``, ``batch`` rows at a time."""
        for k, booster in enumerate(self.boosters):
            for i in range(0, len(x), batch):
                yield k, i, margins(self.recipe.library, booster, x[i : i + batch])  # type: ignore[arg-type]

    def logits(self, x: np.ndarray, batch: int = 4096) -> np.ndarray:
        """``[K, n, …]`` margins of every booster on ``x``."""
        out: list[list[np.ndarray]] = [[] for _ in self.boosters]
        for k, _, raw in self.output_batches(x, batch):
            out[k].append(raw)
        return np.stack([np.concatenate(parts) for parts in out])


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
) -> TreeEnsemble:
    """Booster k trained on ``x[masks[k]]`` with seed ``seeds[k]``, one after another."""
    t0 = time.perf_counter()
    boosters = [recipe.train(x[m], y[m], seed=s, threads=threads) for m, s in zip(masks, seeds)]
    return TreeEnsemble(
        recipe=recipe,
        boosters=boosters,
        masks=masks,
        seeds=list(seeds),
        trained=len(boosters),
        mode="sequential",
        seconds=time.perf_counter() - t0,
        kernel=recipe.library,
        threads=threads,
        notes=[f"{recipe.library} reference models are trained in each run (boosters are not cached)"],
    )


__all__ = ["TreeEnsemble", "check_matches", "train_trees"]
