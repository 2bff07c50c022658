"""Audit data for the digits example: scikit-learn's bundled 8x8 digits, split once.

The 1,797 images are shuffled with a fixed seed and cut into three disjoint parts:

============  =====  ==================================================
part          rows   use
============  =====  ==================================================
members         897  the training set of ``model.pt`` (about 50 %),
                     25 % of them with a wrong label
nonmembers      600  never trained on: the audit's non-members
population      300  same distribution, never trained on: data for
                     reference/shadow models
============  =====  ==================================================

Pixels (0..16) are scaled to [0, 1]. Every call returns fresh arrays and the same
values; nothing is downloaded (``load_digits`` ships with scikit-learn).
"""

from __future__ import annotations

import numpy as np
from sklearn.datasets import load_digits

N_MEMBERS = 897
N_NONMEMBERS = 600
N_POPULATION = 300  # 897 + 600 + 300 = 1797, the whole data set

Split = tuple[np.ndarray, np.ndarray]


def load_splits(seed: int = 0) -> dict[str, Split]:
    """``{"members": (x, y), "nonmembers": (x, y), "population": (x, y)}``.

    x is float32 of shape [n, 64] in [0, 1]; y is int64 in 0..9.
    """
    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)
    y = digits.target.astype(np.int64)
    order = np.random.default_rng(seed).permutation(len(x))
    cuts = np.cumsum([N_MEMBERS, N_NONMEMBERS, N_POPULATION])
    parts = np.split(order, cuts[:-1])
    assert cuts[-1] == len(x), "split sizes must cover the data set exactly"
    return {name: (x[idx], y[idx]) for name, idx in zip(("members", "nonmembers", "population"), parts)}


#: Share of the members whose label is replaced by another class (fixed seed): the model fits them anyway.
LABEL_NOISE = 0.25


def members() -> Split:
    """The training set of the target model (897 rows), a quarter of them mislabelled.

    Mislabelled records are what a network memorises: it fits them (98 % train
    accuracy) at the cost of generalising (81 % on non-members), and they are the
    records a membership attack finds first — the report's exposed records.
    """
    x, y = load_splits()["members"]
    rng = np.random.default_rng(1)
    flip = rng.random(len(y)) < LABEL_NOISE
    y = y.copy()
    y[flip] = (y[flip] + rng.integers(1, 10, int(flip.sum()))) % 10
    return x, y


def nonmembers() -> Split:
    """Held-out rows from the same distribution, never trained on (600 rows)."""
    return load_splits()["nonmembers"]


def population() -> Split:
    """Extra held-out rows for reference models, disjoint from both audit sets (300 rows)."""
    return load_splits()["population"]
