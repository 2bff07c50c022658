"""How ``model.pt`` was trained: a wide MLP, Adam, no regularisation, long enough to fit
every training row — including the 20 % flipped labels, i.e. it memorises."""

from __future__ import annotations

from torch import nn

from privgate.recipe import Recipe


def make_model() -> nn.Module:
    """A fresh MLP 9 -> 128 -> 128 -> 2 that outputs logits."""
    return nn.Sequential(nn.Linear(9, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 2))


RECIPE = Recipe(
    model_factory=make_model, epochs=300, batch_size=64, lr=3e-3, optimizer="adam", name="synthetic-attribute-mlp"
)
