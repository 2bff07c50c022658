"""The audits' bundled model and data: a small MLP on scikit-learn's digits (ships with scikit-learn, no download).

Digits (Alpaydin & Kaynak 1998, UCI; 1,797 8×8 images, 10 classes) with pixels
scaled to [0, 1]. The MLP 64 → 32 → 10 (tanh) has d = 2,410 parameters: enough
for 1,000 gradient canaries (one coordinate each) and small enough that the
LDP game's K = 10,000 trials per cell take a fraction of a second.
"""

from __future__ import annotations

import numpy as np
from torch import nn

from privgate.inputs.data import Dataset
from privgate.recipe import Recipe

DIGITS_SOURCE = "<bundled: scikit-learn digits>"


def digits() -> Dataset:
    """scikit-learn's digits as float32 pixels in [0, 1] and int64 labels."""
    from sklearn.datasets import load_digits

    bunch = load_digits()
    return Dataset((bunch.data / 16.0).astype(np.float32), bunch.target.astype(np.int64), DIGITS_SOURCE)


def digits_mlp() -> nn.Module:
    """64 → 32 → 10 with tanh: 2,410 parameters, logits out."""
    return nn.Sequential(nn.Linear(64, 32), nn.Tanh(), nn.Linear(32, 10))


#: θ_t of the LDP game: the MLP after one epoch, a global model early in federated training. How strong the
#: gradient-flip adversary is depends on it: the norm projection flips a gradient of norm ‖x‖ < L with probability
#: 1/2 − ‖x‖/(2L), so it gets weaker as the model converges and its gradients shrink (Matsumoto et al. 2022, Figure 3).
LDP_RECIPE = Recipe(model_factory=digits_mlp, epochs=1, batch_size=64, lr=1e-2, name="bundled digits MLP (1 epoch)")

#: What the one-run DP-SGD audit trains by default (privgate's DP-SGD path, as `privgate harden` trains a recipe).
DPSGD_RECIPE = Recipe(model_factory=digits_mlp, epochs=15, batch_size=128, lr=1e-2, name="bundled digits MLP")


__all__ = ["DIGITS_SOURCE", "DPSGD_RECIPE", "LDP_RECIPE", "digits", "digits_mlp"]
