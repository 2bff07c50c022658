"""Reference models of every recipe kind come back as one type, from the trainer of the recipe's kind."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression
from torch import nn

from privgate import Recipe, TreeRecipe
from privgate.attacks.reference import reused
from privgate.inputs.targets.sklearn import SklearnModel
from privgate.sklearn_recipe import SklearnRecipe
from privgate.training.plan import model_seeds, paired_masks
from privgate.training.references import CLONES, TORCH, TREES, trainer_for
from privgate.training.trained import TrainedReferences, TrainSettings

RNG = np.random.default_rng(0)
X = RNG.normal(size=(60, 4)).astype(np.float32)
Y = (X[:, 0] + 0.3 * X[:, 1] > 0).astype(np.int64)


def _torch() -> nn.Module:
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))


KINDS = {
    "torch": (Recipe(_torch, epochs=2, batch_size=16, lr=1e-2, name="mlp"), TORCH, "vectorised", "mlp", 2),
    "trees": (
        TreeRecipe("xgboost", {"objective": "binary:logistic", "max_depth": 2}, rounds=3, name="xgb"),
        TREES,
        "sequential",
        "xgboost",
        1,
    ),
    "clones": (SklearnRecipe(LogisticRegression(), "logistic"), CLONES, "sequentially", "sklearn.base.clone + fit", 2),
}


@pytest.mark.parametrize("kind", list(KINDS))
def test_every_recipe_kind_trains_one_result_type(kind: str) -> None:
    recipe, expected, mode, kernel, width = KINDS[kind]
    target = SimpleNamespace(model=SklearnModel(LogisticRegression().fit(X, Y), "test"), module=None)
    masks, seeds = paired_masks(len(X), 4, 0), model_seeds(0, 4)
    trainer = trainer_for(recipe)
    assert trainer is expected
    trainer.check(target, recipe)
    refs = trainer.train(recipe, target, X, Y, masks, seeds, TrainSettings(threads=1))
    assert type(refs) is TrainedReferences
    assert (len(refs), refs.trained, refs.cached, refs.seeds) == (4, 4, 0, list(seeds))
    assert (refs.mode, refs.kernel, refs.device) == (mode, kernel, "cpu") and refs.seconds > 0
    whole = refs.logits(X)
    assert whole.shape[:2] == (4, len(X)) and (whole.shape[2] if whole.ndim == 3 else 1) == width
    head = refs.first(2)
    assert len(head) == 2 and np.array_equal(head.logits(X), whole[:2])  # the same models, read the same way
    later = reused(head, cached=False)  # what a later attack of the run gets: no cost, the same outputs
    assert (later.mode, later.trained, later.seconds) == ("shared", 0, 0.0)
    assert np.array_equal(later.logits(X), whole[:2])
