"""Who holds which rows: a seeded split into node shards, shared non-members and the attacker's population.

``iid`` deals shuffled rows into N near-equal shards; ``dirichlet:α`` is the label-skewed split of Hsu, Qi &
Brown 2019 (arXiv 1909.06335), used by Gao 2024 (University of Zurich) with α = 0.1. Non-members are held-out
rows no node trains on, drawn per victim to match its label mix (:func:`matched_nonmembers`): otherwise an
attack on a label-skewed shard would separate its classes, not membership. See ``docs/federated.md``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from privgate.errors import PrivgateError, shown

#: Fewest training rows a node may get.
MIN_ROWS = 10


class SplitError(PrivgateError):
    """A data split that cannot be made: a bad distribution, too little data."""


@dataclass(frozen=True)
class Distribution:
    """``iid`` or ``dirichlet`` with its concentration α."""

    kind: str
    alpha: float | None = None

    @property
    def name(self) -> str:
        return "iid" if self.kind == "iid" else f"dirichlet:{self.alpha:g}"


def parse_distribution(spec: str) -> Distribution:
    """``iid`` or ``dirichlet:ALPHA`` (α > 0)."""
    s = str(spec).strip()
    if s == "iid":
        return Distribution("iid")
    if s.startswith("dirichlet:"):
        try:
            alpha = float(s.split(":", 1)[1])
        except ValueError:
            alpha = math.nan
        if not (math.isfinite(alpha) and alpha > 0):
            raise SplitError(f"distribution {shown(s)}: dirichlet:ALPHA needs a concentration α > 0 (e.g. 0.1).")
        return Distribution("dirichlet", alpha)
    raise SplitError(f"unknown distribution {shown(s)} (use iid or dirichlet:ALPHA, e.g. dirichlet:0.1).")


def _rng(seed: int, stream: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([int(seed), 0xF1, stream]))


def holdout(n: int, fractions: tuple[float, ...], seed: int) -> list[np.ndarray]:
    """Shuffle ``range(n)`` and cut off parts of the given fractions: ``[rest, part_1, part_2, …]`` (sorted)."""
    order = _rng(seed, 0).permutation(n)
    sizes = [int(round(f * n)) for f in fractions]
    if sum(sizes) >= n:
        raise SplitError(f"held-out fractions {fractions} leave no training rows out of {n}.")
    parts, start = [], 0
    for size in sizes:
        parts.append(np.sort(order[start : start + size]))
        start += size
    return [np.sort(order[start:]), *parts]


def shards(
    y: np.ndarray, nodes: int, distribution: Distribution, seed: int, min_rows: int = MIN_ROWS
) -> list[np.ndarray]:
    """Indices (into ``y``) of each node's training rows, disjoint, covering every row."""
    n = len(y)
    if nodes < 1:
        raise SplitError(f"a federation needs at least one node, got {nodes}.")
    if n < nodes * min_rows:
        raise SplitError(
            f"{n} training rows cannot give {nodes} nodes at least {min_rows} rows each (use fewer nodes or more data)."
        )
    rng = _rng(seed, 1)
    if distribution.kind == "iid":
        return [np.sort(part) for part in np.array_split(rng.permutation(n), nodes)]
    alpha = float(distribution.alpha or 1.0)
    classes = np.unique(y)
    for _ in range(100):
        out: list[list[int]] = [[] for _ in range(nodes)]
        for c in classes:
            rows = rng.permutation(np.flatnonzero(y == c))
            share = rng.dirichlet(np.full(nodes, alpha))
            cuts = (np.cumsum(share)[:-1] * len(rows)).astype(int)
            for node, part in enumerate(np.split(rows, cuts)):
                out[node] += part.tolist()
        if min(len(o) for o in out) >= min_rows:
            return [np.sort(np.asarray(o, dtype=np.int64)) for o in out]
    raise SplitError(
        f"dirichlet:{alpha:g} left a node with fewer than {min_rows} rows in 100 draws; use a larger α or fewer nodes."
    )


def matched_nonmembers(member_labels: np.ndarray, pool_labels: np.ndarray, seed: int, stream: int = 0) -> np.ndarray:
    """Indices (into the pool) of the largest sample of non-members with the members' label proportions.

    With m_c the members of class c (proportion π_c) and a_c the pool's rows
    of class c, the sample takes ``floor(π_c · M)`` rows of every class, where
    M = min_c a_c / π_c is the largest size every class can supply; drawn
    without replacement from the seed (one ``stream`` per victim). An attack then sees members and
    non-members with the same label distribution, so its score cannot separate
    them by class alone.
    """
    classes, counts = np.unique(member_labels, return_counts=True)
    share = counts / counts.sum()
    avail = np.array([np.sum(pool_labels == c) for c in classes])
    total = float(np.min(avail / share))
    rng = _rng(seed, 1000 + int(stream))
    out = []
    for c, s, a in zip(classes, share, avail):
        k = min(int(math.floor(s * total + 1e-9)), int(a))
        out.append(rng.permutation(np.flatnonzero(pool_labels == c))[:k])
    return np.sort(np.concatenate(out)) if out else np.zeros(0, dtype=np.int64)


def label_counts(y: np.ndarray, parts: list[np.ndarray], classes: int) -> list[list[int]]:
    """``[node][class]`` row counts of each part."""
    return [np.bincount(y[p], minlength=classes).astype(int).tolist() for p in parts]


__all__ = [
    "MIN_ROWS",
    "Distribution",
    "SplitError",
    "holdout",
    "label_counts",
    "matched_nonmembers",
    "parse_distribution",
    "shards",
]
