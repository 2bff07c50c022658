"""How ``model.pt`` was trained: the recipe privgate uses to train "another model like it".

A two-hidden-layer ReLU MLP trained with Adam, no weight decay and no early
stopping, in small batches for long enough that nearly every training image is
fitted, mislabelled ones included (98 % train accuracy): the model memorises its
training set on purpose, so the ``strict`` policy has something to find. Sized so
that privgate's 16 reference models train in a few CPU-seconds: 128 units (the
hidden-to-hidden product dominates the work) and 60 epochs of batch 32.
"""

from __future__ import annotations

from torch import nn

from privgate.recipe import Recipe

N_FEATURES = 64  # 8x8 pixels
N_CLASSES = 10
HIDDEN = 128


def make_model() -> nn.Module:
    """A fresh, untrained MLP 64 -> 128 -> 128 -> 10 that outputs logits."""
    return nn.Sequential(
        nn.Linear(N_FEATURES, HIDDEN),
        nn.ReLU(),
        nn.Linear(HIDDEN, HIDDEN),
        nn.ReLU(),
        nn.Linear(HIDDEN, N_CLASSES),
    )


RECIPE = Recipe(
    model_factory=make_model,
    epochs=60,
    batch_size=32,
    lr=5e-3,
    optimizer="adam",
    weight_decay=0.0,
    name="digits-mlp",
)
