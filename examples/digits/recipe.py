"""How ``model.pt`` was trained: the recipe privgate uses to train "another model like it".

A two-hidden-layer MLP trained with Adam, no weight decay and no early stopping,
for long enough that every training image is fitted (100 % train accuracy): the
model memorises its training set on purpose, so the ``strict`` policy has
something to find.
"""

from __future__ import annotations

from torch import nn

from privgate.recipe import Recipe

N_FEATURES = 64  # 8x8 pixels
N_CLASSES = 10
HIDDEN = 256


def make_model() -> nn.Module:
    """A fresh, untrained MLP 64 -> 256 -> 256 -> 10 that outputs logits."""
    return nn.Sequential(
        nn.Linear(N_FEATURES, HIDDEN),
        nn.Tanh(),
        nn.Linear(HIDDEN, HIDDEN),
        nn.Tanh(),
        nn.Linear(HIDDEN, N_CLASSES),
    )


RECIPE = Recipe(
    model_factory=make_model,
    epochs=150,
    batch_size=64,
    lr=3e-3,
    optimizer="adam",
    weight_decay=0.0,
    name="digits-mlp",
)
