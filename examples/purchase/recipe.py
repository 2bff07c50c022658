"""How ``model.pt`` was trained: the recipe privgate uses to train "another model like it".

The classic Purchase-100 target of Shokri et al. (2017, arXiv 1610.05820): one
hidden Tanh layer, trained with Adam, no weight decay and no early stopping, to
100 % train accuracy. With 25 rows per class and 600 features it memorises its
training customers; that overfitting is what the ``internal`` policy catches.
"""

from __future__ import annotations

from torch import nn

from privgate.recipe import Recipe

N_FEATURES = 600
N_CLASSES = 100
HIDDEN = 256


def make_model() -> nn.Module:
    """A fresh, untrained MLP 600 -> 256 -> 100 (Tanh) that outputs logits."""
    return nn.Sequential(
        nn.Linear(N_FEATURES, HIDDEN),
        nn.Tanh(),
        nn.Linear(HIDDEN, N_CLASSES),
    )


RECIPE = Recipe(
    model_factory=make_model,
    epochs=30,
    batch_size=64,
    lr=1e-3,
    optimizer="adam",
    weight_decay=0.0,
    name="purchase-mlp",
)
