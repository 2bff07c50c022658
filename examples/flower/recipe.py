"""How every Flower client trains: a small MLP on 8x8 digits, a few local epochs of Adam per round.

``privgate fl audit`` loads each saved state_dict into ``RECIPE.build()``; the
reference attacks (``--attacks ...,rmia,lira``) train models like a client with it.
"""

from __future__ import annotations

from torch import nn

from privgate.recipe import Recipe


def make_model() -> nn.Module:
    """A fresh MLP 64 -> 128 -> 10 that outputs logits."""
    return nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))


# epochs = local epochs per round
RECIPE = Recipe(model_factory=make_model, epochs=20, batch_size=32, lr=3e-3, optimizer="adam", name="flower-digits")
