"""The reference-model engine: vectorised training equals recipe.train, the cache, fallbacks, bad recipes."""

from __future__ import annotations

import dataclasses
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch
from torch import nn

from privgate import PrivgateError, Recipe, train_model
from privgate.errors import RecipeError
from privgate.threads import torch_threads
from privgate.training.cache import ModelCache
from privgate.training.engine import train_ensemble, train_models
from privgate.training.fingerprint import recipe_fingerprint
from privgate.training.loop import train_loop
from privgate.training.plan import model_seeds, paired_masks
from privgate.training.trained import TrainSettings


def tiny_model() -> nn.Module:
    return nn.Sequential(nn.Linear(6, 12), nn.Tanh(), nn.Linear(12, 3))


def bn_model() -> nn.Module:
    return nn.Sequential(nn.Linear(6, 12), nn.BatchNorm1d(12), nn.ReLU(), nn.Linear(12, 3))


def data(n: int = 90, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, 6)).astype(np.float32), rng.integers(0, 3, n)


RECIPE = Recipe(tiny_model, epochs=3, batch_size=16, lr=1e-2, name="tiny")


class CountingRecipe(Recipe):
    """A recipe with its own training loop (as DP-SGD retraining has): never vectorised."""

    calls = 0

    def train(self, x, y, seed=0, model=None):  # noqa: ANN001, ANN201
        CountingRecipe.calls += 1
        return train_loop(self, x, y, seed=seed, model=model)


def _max_diff(a: list[dict], b: list[dict]) -> float:
    return max(float((sa[k] - sb[k]).abs().max()) for sa, sb in zip(a, b) for k in sa)


@pytest.mark.parametrize("kernel", ["mlp", "vmap"])
@pytest.mark.parametrize(
    "changes",
    [{}, {"weight_decay": 1e-2}, {"optimizer": "sgd", "momentum": 0.9, "weight_decay": 1e-3}, {"optimizer": "sgd"}],
    ids=["adam", "adam-l2", "sgd-momentum-l2", "sgd"],
)
def test_vectorised_training_replicates_recipe_train(changes, kernel):
    """Same init, batch order and optimiser as recipe.train, model by model, up to float rounding."""
    recipe = dataclasses.replace(RECIPE, **changes)
    x, y = data()
    masks = paired_masks(len(x), 3, seed=1)
    masks[2] = True
    masks[2, :37] = False  # a third model on another subset size: uneven steps per epoch
    seeds = model_seeds(1, 3)
    vec, mode, notes, used = train_models(recipe, x, y, masks, seeds, vectorise=True, kernel=kernel)
    assert (mode, used, notes) == ("vectorised", kernel, [])
    ref = [train_model(recipe, x[m], y[m], seed=s).state_dict() for m, s in zip(masks, seeds)]
    assert _max_diff(vec, ref) < 1e-5


def test_plans_are_balanced_and_nested():
    masks = paired_masks(101, 6, seed=3)
    assert (masks.sum(axis=0) == 3).all()  # every row IN for exactly half of the models
    assert set(masks.sum(axis=1)) == {50, 51}
    assert (paired_masks(101, 4, seed=3) == masks[:4]).all()  # 4 models are a prefix of 6
    assert model_seeds(3, 4) == model_seeds(3, 6)[:4]
    assert not (paired_masks(101, 2, seed=4) == masks[:2]).all()


def test_cache_second_run_trains_nothing(tmp_path):
    x, y = data()
    masks, seeds = paired_masks(len(x), 4, 0), model_seeds(0, 4)
    first = train_ensemble(RECIPE, x, y, masks, seeds, TrainSettings(cache_dir=tmp_path))
    assert (first.trained, first.cached, first.mode, first.kernel) == (4, 0, "vectorised", "mlp")
    second = train_ensemble(RECIPE, x, y, masks, seeds, TrainSettings(cache_dir=tmp_path))
    assert (second.trained, second.cached, second.mode) == (0, 4, "cache")
    assert _max_diff(first.models, second.models) == 0.0
    np.testing.assert_array_equal(first.logits(x), second.logits(x))
    # six models reuse the first four (nested plans) and train two
    more = train_ensemble(
        RECIPE, x, y, paired_masks(len(x), 6, 0), model_seeds(0, 6), TrainSettings(cache_dir=tmp_path)
    )
    assert (more.trained, more.cached) == (2, 4)
    # anything in the key changes the model: seed, data, recipe
    assert train_ensemble(RECIPE, x, y, masks, model_seeds(1, 4), TrainSettings(cache_dir=tmp_path)).trained == 4
    assert train_ensemble(RECIPE, x + 1, y, masks, seeds, TrainSettings(cache_dir=tmp_path)).trained == 4
    assert (
        train_ensemble(
            dataclasses.replace(RECIPE, lr=2e-2), x, y, masks, seeds, TrainSettings(cache_dir=tmp_path)
        ).trained
        == 4
    )
    assert not list(tmp_path.rglob("*.tmp"))


def test_fingerprint_covers_recipe_fields_and_architecture():
    fp = recipe_fingerprint(RECIPE)
    assert fp == recipe_fingerprint(dataclasses.replace(RECIPE))  # stable, no memory addresses
    assert fp != recipe_fingerprint(dataclasses.replace(RECIPE, epochs=4))
    assert fp != recipe_fingerprint(
        dataclasses.replace(RECIPE, model_factory=lambda: nn.Sequential(nn.Linear(6, 13), nn.Tanh(), nn.Linear(13, 3)))
    )
    assert fp != recipe_fingerprint(CountingRecipe(tiny_model, epochs=3, batch_size=16, lr=1e-2, name="tiny"))


def test_corrupt_or_foreign_cache_entries_are_retrained(tmp_path):
    x, y = data()
    masks, seeds = paired_masks(len(x), 2, 0), model_seeds(0, 2)
    first = train_ensemble(RECIPE, x, y, masks, seeds, TrainSettings(cache_dir=tmp_path))
    files = sorted((tmp_path / "models").rglob("*.pt"))
    assert len(files) == 2
    files[0].write_bytes(files[0].read_bytes()[:100])  # truncated
    torch.save({"other": torch.zeros(2)}, files[1])  # not this model
    again = train_ensemble(RECIPE, x, y, masks, seeds, TrainSettings(cache_dir=tmp_path))
    assert again.trained == 2
    assert _max_diff(first.models, again.models) < 1e-6
    assert train_ensemble(RECIPE, x, y, masks, seeds, TrainSettings(cache_dir=tmp_path)).trained == 0


def test_interrupted_write_leaves_no_entry(tmp_path, monkeypatch):
    import os

    def interrupted(src, dst):  # noqa: ANN001, ANN202
        raise KeyboardInterrupt

    x, y = data()
    masks, seeds = paired_masks(len(x), 2, 0), model_seeds(0, 2)
    monkeypatch.setattr(os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        train_ensemble(RECIPE, x, y, masks, seeds, TrainSettings(cache_dir=tmp_path))
    monkeypatch.undo()
    assert not list(tmp_path.rglob("*.pt")) and not list(tmp_path.rglob("*.tmp"))
    assert train_ensemble(RECIPE, x, y, masks, seeds, TrainSettings(cache_dir=tmp_path)).trained == 2


def test_concurrent_runs_train_each_model_once(tmp_path):
    """Two runs on one cache (as pytest-xdist workers): the lock makes the second wait, then load."""
    x, y = data()
    masks, seeds = paired_masks(len(x), 4, 0), model_seeds(0, 4)
    barrier = threading.Barrier(2)

    def run(_: int):  # noqa: ANN202
        barrier.wait()
        return train_ensemble(RECIPE, x, y, masks, seeds, TrainSettings(cache_dir=tmp_path))

    with ThreadPoolExecutor(2) as pool:
        a, b = pool.map(run, range(2))
    assert sorted([a.trained, b.trained]) == [0, 4]
    assert _max_diff(a.models, b.models) == 0.0


def test_custom_train_loop_falls_back_to_sequential_and_says_so(tmp_path):
    recipe = CountingRecipe(tiny_model, epochs=2, batch_size=16, lr=1e-2, name="dp-like")
    assert recipe.vectorisable is False and RECIPE.vectorisable is True
    x, y = data()
    CountingRecipe.calls = 0
    ens = train_ensemble(recipe, x, y, paired_masks(len(x), 2, 0), model_seeds(0, 2), TrainSettings(cache_dir=tmp_path))
    assert ens.mode == "sequential" and ens.trained == 2 and CountingRecipe.calls == 2
    assert any("one after another" in n and "own loop" in n for n in ens.notes)


def test_models_with_buffers_are_vectorised_with_their_buffers():
    """BatchNorm running statistics train per model (tests/test_engine_models.py checks them against recipe.train)."""
    recipe = Recipe(bn_model, epochs=1, batch_size=16, lr=1e-2, name="bn")
    x, y = data()
    states, mode, notes, kernel = train_models(recipe, x, y, paired_masks(len(x), 2, 0), model_seeds(0, 2))
    assert (mode, kernel, notes) == ("vectorised", "grouped", [])
    assert not torch.equal(states[0]["1.running_mean"], states[1]["1.running_mean"])  # each model its own statistics
    assert int(states[0]["1.num_batches_tracked"]) == 3  # 45 rows, batch 16: 3 steps


def test_bad_recipes_are_privgate_errors():
    x, y = data()
    masks, seeds = paired_masks(len(x), 2, 0), model_seeds(0, 2)

    def broken() -> nn.Module:
        raise RuntimeError("no GPU here")

    with pytest.raises(RecipeError, match="building the model failed.*no GPU here"):
        train_ensemble(Recipe(broken, name="broken"), x, y, masks, seeds)
    wrong_inputs = Recipe(lambda: nn.Linear(5, 3), name="five-features")
    with pytest.raises(PrivgateError, match="cannot run on the audit data"):
        train_ensemble(wrong_inputs, x, y, masks, seeds)


def test_thread_setting_is_restored():
    before = torch.get_num_threads()
    with torch_threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before


def test_cache_store_is_atomic_and_load_checks_shapes(tmp_path):
    cache = ModelCache(tmp_path)
    state = {"w": torch.ones(2, 3)}
    cache.store("ab" * 32, state)
    assert cache.load("ab" * 32, {"w": torch.zeros(2, 3)})["w"].sum() == 6
    assert cache.load("ab" * 32, {"w": torch.zeros(3, 2)}) is None
    assert cache.load("cd" * 32, state) is None
