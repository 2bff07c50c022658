"""The remediation tests' setup: a memorising 64-64-10 MLP on 300 digits, its recipe, audit files and policies.

``build_tiny(folder)`` writes the folder the CLI runs in and returns what the in-process tests use; the suite's
``tiny`` fixture (tests/conftest.py) builds it once per session.
"""

from __future__ import annotations

import hashlib
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import torch
from sklearn.datasets import load_digits

from privgate import Dataset, train_model
from privgate.inputs.entrypoints import load_recipe

RECIPE_SOURCE = textwrap.dedent(
    '''
    import torch
    from torch import nn
    from privgate.recipe import Recipe

    def make_model():
        return nn.Sequential(nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 10))

    class Gate(nn.Module):
        """A learnable scale behind data-dependent control flow: no per-example gradient exists for it."""

        def __init__(self):
            super().__init__()
            self.scale = nn.Parameter(torch.ones(10))

        def forward(self, x):
            return x * self.scale if x.sum() > 0 else x

    def make_bad():
        return nn.Sequential(nn.Linear(64, 10), Gate())

    RECIPE = Recipe(model_factory=make_model, epochs=80, batch_size=32, lr=2e-2, optimizer="adam", name="tiny")
    BAD = Recipe(model_factory=make_bad, epochs=1, batch_size=32, name="bad")
    '''
)

#: decision: point keeps the small audit decidable; the original (a memorising MLP on 300 digits) has
#: balanced MIA accuracy ≈ 0.60, DP-SGD models ≈ 0.52.
POLICY_PASSABLE = """
name: tiny-remediate
sensitivity: confidential
release: api
decision: point
attacks: {loss: {}, confidence: {}}
checks:
  - {id: mia-acc, attack: best, metric: accuracy, max: 0.55}
utility: {max_drop: 0.15}
remediation: {enabled: true, epsilons: [8, 1], strategy: ladder, accountant: rdp, epochs: 8, batch_size: 100,
              max_grad_norm: 1.0}
"""

#: An AUC of at most 0.3 is below chance: no model meets it, and ε = 1 costs too much utility.
POLICY_IMPOSSIBLE = POLICY_PASSABLE.replace("name: tiny-remediate", "name: impossible").replace(
    "- {id: mia-acc, attack: best, metric: accuracy, max: 0.55}", "- {id: mia-auc, attack: best, metric: auc, max: 0.3}"
)


def sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def build_tiny(d: Path) -> dict[str, Any]:
    """A folder with the tiny recipe, digits splits (.npz), a memorising model.pt and three policies."""
    (d / "tiny_recipe.py").write_text(RECIPE_SOURCE)
    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)
    y = digits.target.astype(np.int64)
    order = np.random.default_rng(0).permutation(len(x))
    parts = {"members": order[:300], "nonmembers": order[1000:1300], "population": order[1300:1600]}
    for name, idx in parts.items():
        np.savez(d / f"{name}.npz", x=x[idx], y=y[idx])
    # privgate's loader: this folder's tiny_recipe, even after another test's in-process run imported its own
    recipe, bad = (load_recipe(f"tiny_recipe:{name}", [d]) for name in ("RECIPE", "BAD"))
    model = train_model(recipe, x[parts["members"]], y[parts["members"]], seed=0)
    torch.save(model.state_dict(), d / "model.pt")
    (d / "passable.yaml").write_text(POLICY_PASSABLE)
    (d / "impossible.yaml").write_text(POLICY_IMPOSSIBLE)
    (d / "disabled.yaml").write_text(POLICY_PASSABLE.replace("enabled: true", "enabled: false"))
    ds = {k: Dataset(x[v], y[v], k) for k, v in parts.items()}
    return {"dir": d, "recipe": recipe, "bad": bad, "model": model, **ds}
