"""Audit data for the digits CNN example: scikit-learn's bundled 8×8 digits as 1×8×8 images, split once.

The same three disjoint parts as ``examples/digits`` (the 1,797 images shuffled
with ``numpy.random.default_rng(0)``), each image a ``[1, 8, 8]`` float32
array in [0, 1] (pixels 0..16 divided by 16), the layout ``nn.Conv2d`` reads:

============  =====  ==================================================
part          rows   use
============  =====  ==================================================
members         897  the training set of ``model.pt``
nonmembers      600  never trained on: the audit's non-members
population      300  same distribution, never trained on
============  =====  ==================================================

Nothing is downloaded (``load_digits`` ships with scikit-learn).
"""

from __future__ import annotations

import numpy as np
from sklearn.datasets import load_digits

N_MEMBERS = 897
N_NONMEMBERS = 600
N_POPULATION = 300  # 897 + 600 + 300 = 1797, the whole data set

Split = tuple[np.ndarray, np.ndarray]


def load_splits(seed: int = 0) -> dict[str, Split]:
    """``{"members": (x, y), "nonmembers": (x, y), "population": (x, y)}``: x float32 ``[n, 1, 8, 8]``, y int64."""
    digits = load_digits()
    x = (digits.images / 16.0).astype(np.float32)[:, None, :, :]
    y = digits.target.astype(np.int64)
    order = np.random.default_rng(seed).permutation(len(x))
    cuts = np.cumsum([N_MEMBERS, N_NONMEMBERS, N_POPULATION])
    assert cuts[-1] == len(x), "split sizes must cover the data set exactly"
    parts = np.split(order, cuts[:-1])
    return {name: (x[idx], y[idx]) for name, idx in zip(("members", "nonmembers", "population"), parts)}


def members() -> Split:
    """The training set of the target model (897 images)."""
    return load_splits()["members"]


def nonmembers() -> Split:
    """Held-out images from the same distribution, never trained on (600)."""
    return load_splits()["nonmembers"]


def population() -> Split:
    """More held-out images for reference models, disjoint from both audit sets (300)."""
    return load_splits()["population"]
