"""How ``model.pt`` was trained: a small convolutional network with BatchNorm on 1×8×8 digits.

Two 3×3 convolutions (8 and 16 channels), each followed by BatchNorm, ReLU and
2×2 max-pooling, then one linear layer to the 10 classes' logits. The
convolutions have no bias: BatchNorm subtracts the batch mean right after them,
so a bias there would have a gradient of exactly zero — in exact arithmetic;
in floats, rounding noise that Adam, dividing by its root mean square, turns
into steps of size lr (see docs/attacks.md, "the engine").

Trained with Adam for 40 epochs without weight decay, it fits its 897 training
images (train accuracy 1.0) and generalises well; reference models of this
recipe train K at a time on the engine's general kernel (``torch.func`` over
stacked parameters and BatchNorm buffers, :mod:`privgate.training.stacked`).
"""

from __future__ import annotations

from torch import nn

from privgate.recipe import Recipe

N_CLASSES = 10


def make_model() -> nn.Module:
    """A fresh CNN for ``[n, 1, 8, 8]`` images that outputs ``[n, 10]`` logits."""
    return nn.Sequential(
        nn.Conv2d(1, 8, 3, padding=1, bias=False),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.AvgPool2d(2),
        nn.Conv2d(8, 16, 3, padding=1, bias=False),
        nn.BatchNorm2d(16),
        nn.ReLU(),
        nn.AvgPool2d(2),
        nn.Flatten(),
        nn.Linear(16 * 2 * 2, N_CLASSES),
    )


RECIPE = Recipe(
    model_factory=make_model,
    epochs=40,
    batch_size=64,
    lr=3e-3,
    optimizer="adam",
    weight_decay=0.0,
    name="digits-cnn",
)
