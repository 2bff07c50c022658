"""Synthetic Purchase-100-like data: 600 binary purchase indicators, 100 customer classes.

Modelled on the Purchase-100 benchmark of Shokri et al. (2017, arXiv 1610.05820),
where each row is a customer's purchase history (did they ever buy item j?) and the
class is a cluster of similar customers, but generated here from fixed seeds, so
nothing is downloaded. The generative process:

* **Catalogue.** Each of the ``N_ITEMS`` = 600 items has a base popularity
  ``bg * LogNormal(0, 0.6)`` (clipped to [0.002, 0.3]): a few items are bought by
  many customers, most by few.
* **Segments and classes.** The 100 classes come in 20 segments of 5 classes
  (think "young families", "students"). Every segment has 40 typical items bought
  with probability ``P_SEGMENT`` = 0.25 by all its classes, and every class adds 15
  items of its own bought with probability ``P_CLASS`` = 0.30. Classes of one
  segment therefore look alike, and class items overlap by chance.
* **Customers.** A row draws a class uniformly, an activity level
  ``a ~ LogNormal(0, 0.3)`` (heavy shoppers buy more of everything) and then each
  item independently with probability ``min(a * p_item, 0.95)``. A row holds about
  43 purchases on average.

The task is learnable but noisy: an MLP trained on 2,500 rows reaches about 64 %
accuracy on new customers (chance is 1 %) while fitting its training rows
perfectly, which is the overfitting that makes Purchase-100 a standard
membership-inference benchmark.

One pool of rows is drawn from ``DATA_SEED``, exact duplicate rows are dropped
(keeping the first), and the pool is cut in order into three disjoint parts:

============  =====  ==========================================================
part          rows   use
============  =====  ==========================================================
members       2,500  the training set of ``model.pt``
nonmembers    2,500  never trained on: the audit's non-members
population    5,000  same distribution, never trained on: reference models
============  =====  ==========================================================

No row (as a feature vector) appears in two parts. The first call in a process
draws the data (0.1-0.3 s); every call returns fresh copies of the same arrays:
x float32 [n, 600] of 0/1, y int64 in 0..99.
"""

from __future__ import annotations

import functools

import numpy as np

N_ITEMS = 600
N_CLASSES = 100
N_SEGMENTS = 20
SEGMENT_ITEMS = 40
P_SEGMENT = 0.25
CLASS_ITEMS = 15
P_CLASS = 0.30
BASE_POPULARITY = 0.04
ACTIVITY_SIGMA = 0.3

N_MEMBERS = 2_500
N_NONMEMBERS = 2_500
N_POPULATION = 5_000

WORLD_SEED = 1234  # the catalogue, segments and class profiles
DATA_SEED = 7  # the customers

Split = tuple[np.ndarray, np.ndarray]


def class_profiles(seed: int = WORLD_SEED) -> np.ndarray:
    """Purchase probability of every item for every class, shape [100, 600]."""
    rng = np.random.default_rng(seed)
    popularity = np.clip(BASE_POPULARITY * rng.lognormal(0.0, 0.6, N_ITEMS), 0.002, 0.3)
    profiles = np.tile(popularity, (N_CLASSES, 1))
    segment_items = [rng.choice(N_ITEMS, SEGMENT_ITEMS, replace=False) for _ in range(N_SEGMENTS)]
    segment_of = np.repeat(np.arange(N_SEGMENTS), N_CLASSES // N_SEGMENTS)
    for c in range(N_CLASSES):
        seg = segment_items[segment_of[c]]
        profiles[c, seg] = np.maximum(profiles[c, seg], P_SEGMENT)
        own = rng.choice(N_ITEMS, CLASS_ITEMS, replace=False)
        profiles[c, own] = np.maximum(profiles[c, own], P_CLASS)
    return profiles


def sample(n: int, seed: int, profiles: np.ndarray | None = None) -> Split:
    """``n`` customers drawn from the class profiles with ``seed`` (duplicates possible)."""
    profiles = class_profiles() if profiles is None else profiles
    rng = np.random.default_rng(seed)
    y = rng.integers(0, N_CLASSES, n)
    activity = rng.lognormal(0.0, ACTIVITY_SIGMA, (n, 1)).astype(np.float32)
    p = profiles.astype(np.float32)[y]
    p *= activity
    np.minimum(p, 0.95, out=p)
    x = (rng.random((n, N_ITEMS), dtype=np.float32) < p).astype(np.float32)
    return x, y.astype(np.int64)


def _unique_first(x: np.ndarray) -> np.ndarray:
    """Indices of the first occurrence of every distinct row, in original order."""
    packed = np.packbits(x.astype(bool), axis=1)
    keys = np.ascontiguousarray(packed).view(np.dtype((np.void, packed.shape[1]))).ravel()
    _, first = np.unique(keys, return_index=True)
    return np.sort(first)


def load_splits() -> dict[str, Split]:
    """``{"members": (x, y), "nonmembers": (x, y), "population": (x, y)}``, pairwise disjoint.

    Fresh copies on every call; the draw itself is done once per process.
    """
    return {name: (x.copy(), y.copy()) for name, (x, y) in _splits().items()}


@functools.lru_cache(maxsize=1)
def _splits() -> dict[str, Split]:
    total = N_MEMBERS + N_NONMEMBERS + N_POPULATION
    x, y = sample(total + total // 100, DATA_SEED)  # 1 % spare rows to replace duplicates
    keep = _unique_first(x)
    if len(keep) < total:  # pragma: no cover - would need > 100 duplicates among 600-bit rows
        raise RuntimeError(f"only {len(keep)} distinct rows; need {total}")
    keep = keep[:total]
    x, y = x[keep], y[keep]
    cuts = np.cumsum([N_MEMBERS, N_NONMEMBERS])
    parts = np.split(np.arange(total), cuts)
    return {name: (x[idx], y[idx]) for name, idx in zip(("members", "nonmembers", "population"), parts)}


def members() -> Split:
    """The training set of the target model (2,500 rows)."""
    x, y = _splits()["members"]
    return x.copy(), y.copy()


def nonmembers() -> Split:
    """Held-out customers, never trained on (2,500 rows)."""
    x, y = _splits()["nonmembers"]
    return x.copy(), y.copy()


def population() -> Split:
    """Extra held-out customers for reference models (5,000 rows)."""
    x, y = _splits()["population"]
    return x.copy(), y.copy()
