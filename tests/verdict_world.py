"""Models with a known truth for the verdict tests: null, memorising and well-generalising targets.

Every model here is a small torch MLP on a seeded synthetic task (4 Gaussian
classes in 16-D), with a recipe that trains "another model like it", so the
built-in policies run every attack they list (reference models included):

* a **null** model never saw the audit members: it is trained on rows disjoint
  from both members and non-members, so any membership signal is noise;
* a **memorising** model fits random labels of 10 classes: members are
  predicted right, non-members are right by chance (10 %);
* a **generalising** model is trained briefly with weight decay on many rows:
  its accuracy on members and non-members is the same.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from privgate import Recipe
from privgate.inputs.entrypoints import load_recipe

D, CLASSES = 16, 4

RECIPE = textwrap.dedent(
    """
    from torch import nn
    from privgate.recipe import Recipe

    def make_model():
        return nn.Sequential(nn.Linear({d}, {h}), nn.ReLU(), nn.Linear({h}, {c}))

    RECIPE = Recipe(
        model_factory=make_model, epochs={epochs}, batch_size=64, lr={lr}, weight_decay={wd}, name="verdict-mlp"
    )
    """
)


def task(n: int, seed: int, classes: int = CLASSES, random_labels: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Gaussian classes around fixed centres (the same task for every seed), or labels independent of x."""
    rng = np.random.default_rng(seed)
    centres = np.random.default_rng(2024).normal(0, 1.0, size=(classes, D))
    y = rng.integers(0, classes, size=n)
    x = centres[y] + rng.normal(0, 1.6, size=(n, D))
    if random_labels:
        y = rng.integers(0, classes, size=n)
    return x.astype(np.float32), y.astype(np.int64)


def fit(
    x: np.ndarray, y: np.ndarray, classes: int, epochs: int, weight_decay: float, seed: int, hidden: int = 32
) -> nn.Module:
    """Full-batch Adam, the way the recipe's model is built (deterministic for a seed)."""
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(D, hidden), nn.ReLU(), nn.Linear(hidden, classes))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2 if hidden > 32 else 3e-3, weight_decay=weight_decay)
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    for _ in range(epochs):
        opt.zero_grad()
        nn.functional.cross_entropy(model(xt), yt).backward()
        opt.step()
    return model.eval()


@dataclass
class World:
    """A target with its audit data, its recipe, and the recipe's ``module:attr`` spec (for the CLI)."""

    model: nn.Module
    members: tuple[np.ndarray, np.ndarray]
    nonmembers: tuple[np.ndarray, np.ndarray]
    population: tuple[np.ndarray, np.ndarray]
    spec: str
    dir: Path

    @property
    def recipe(self) -> Recipe:
        """The recipe object, loaded from the module written into ``dir`` (privgate imports only project modules)."""
        return load_recipe(self.spec, [self.dir])


def _recipe(dir: Path, name: str, classes: int, epochs: int, wd: float, hidden: int = 32) -> tuple[str, Path]:
    """Write a recipe module into ``dir``; returns its ``module:attr`` spec and the folder."""
    dir.mkdir(parents=True, exist_ok=True)
    lr = 1e-2 if hidden > 32 else 3e-3
    (dir / f"{name}.py").write_text(RECIPE.format(d=D, c=classes, h=hidden, epochs=epochs, wd=wd, lr=lr))
    return f"{name}:RECIPE", dir


def null_world(dir: Path, seed: int, n: int = 200) -> World:
    """A model trained on rows disjoint from its 'members': membership is unobservable by construction."""
    x_train, y_train = task(600, 10_000 + seed)
    model = fit(x_train, y_train, CLASSES, epochs=300, weight_decay=0.0, seed=seed)
    return World(
        model,
        task(n, 20_000 + seed),
        task(n, 30_000 + seed),
        task(200, 40_000 + seed),
        *_recipe(dir, "null_recipe", CLASSES, epochs=30, wd=0.0),
    )


def memorising_world(dir: Path, seed: int = 0, n: int = 300) -> World:
    """A wide MLP that fits random labels of 10 classes: a leak every attack sees."""
    members = task(n, 50_000 + seed, classes=10, random_labels=True)
    model = fit(*members, classes=10, epochs=400, weight_decay=0.0, seed=seed, hidden=128)
    return World(
        model,
        members,
        task(n, 60_000 + seed, classes=10, random_labels=True),
        task(200, 70_000 + seed, classes=10, random_labels=True),
        *_recipe(dir, "memo_recipe", 10, epochs=60, wd=0.0, hidden=128),
    )


def generalising_world(dir: Path, seed: int = 0, n: int = 5000) -> World:
    """Trained briefly with weight decay on its n members; accuracy on members ≈ on non-members."""
    members = task(n, 80_000 + seed)
    model = fit(*members, classes=CLASSES, epochs=60, weight_decay=1e-2, seed=seed)
    return World(
        model,
        members,
        task(n, 90_000 + seed),
        task(1000, 95_000 + seed),
        *_recipe(dir, "gen_recipe", CLASSES, epochs=2, wd=1e-2),
    )


def partly_leaky_world(dir: Path, seed: int = 0, n: int = 300) -> World:
    """40 % random labels, memorised: a leak that 150 + 150 evaluation rows can show but not always prove."""
    x, y = task(n, 110_000 + seed)
    rng = np.random.default_rng(seed)
    flip = rng.random(n) < 0.4
    y = np.where(flip, rng.integers(0, CLASSES, size=n), y)
    xn, yn = task(n, 120_000 + seed)
    yn = np.where(rng.random(n) < 0.4, rng.integers(0, CLASSES, size=n), yn)
    model = fit(x, y, CLASSES, epochs=400, weight_decay=0.0, seed=seed, hidden=128)
    return World(
        model,
        (x, y),
        (xn, yn),
        task(200, 130_000 + seed),
        *_recipe(dir, "leaky_recipe", CLASSES, epochs=60, wd=0.0, hidden=128),
    )


SEVERITY = {"pass": 0, "inconclusive": 1, "fail": 2}
LADDER = ("public", "internal", "confidential", "strict")
