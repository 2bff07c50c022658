"""How ``model.pt`` was trained: the recipe privgate uses to train "another model like it".

A plain tabular MLP (140 one-hot answers → 256 → 256 → 5 ideology classes,
ReLU), trained with Adam for 30 epochs without weight decay or early stopping,
as a quick model on survey data often is. It fits its 10,000 training
respondents almost perfectly (train accuracy ≈ 0.97) while predicting new
respondents' ideology far less well (≈ 0.42; the majority class is 0.36):
the gap is memorisation, which is what the attacks measure.
"""

from __future__ import annotations

from torch import nn

from privgate.recipe import Recipe

N_FEATURES = 140
N_CLASSES = 5
HIDDEN = 256


def make_model() -> nn.Module:
    """A fresh, untrained MLP 140 -> 256 -> 256 -> 5 (ReLU) that outputs logits."""
    return nn.Sequential(
        nn.Linear(N_FEATURES, HIDDEN),
        nn.ReLU(),
        nn.Linear(HIDDEN, HIDDEN),
        nn.ReLU(),
        nn.Linear(HIDDEN, N_CLASSES),
    )


RECIPE = Recipe(
    model_factory=make_model,
    epochs=30,
    batch_size=128,
    lr=1e-3,
    optimizer="adam",
    weight_decay=0.0,
    name="survey-mlp",
)
