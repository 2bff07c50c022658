"""A synthetic table with a planted dependency and a declared sensitive column.

Each row is one person: column 0 is a sensitive binary attribute ``s`` (think
"has condition X"), columns 1..8 are ordinary numeric attributes ``x1..x8``,
and the label ``y`` (binary, the model's task) depends on ``s``:

* ``s ~ Bernoulli(sigmoid(1.5·x1 − 0.5))`` — s is partly predictable from x1,
  so a model-free imputation of s from the other columns beats the prior;
* ``y = 1[(2s − 1)·x2 + 0.3·x3 > 0]``, flipped with probability 0.2 — the
  label reveals s *through* x2, the planted dependency.

A model-free baseline that knows this relation (an imputation model trained on
the population, given the other columns and the label) recovers s for about
80 % of people. A model that *memorised* its training rows, including the 20 %
flipped labels, lets an attacker do better on exactly those members — which is
what ``attribute_advantage`` measures.

Generated from a seed; nothing is downloaded. Every call returns the same arrays.
"""

from __future__ import annotations

import numpy as np

SENSITIVE_COLUMN = 0
N_MEMBERS = 600
N_NONMEMBERS = 600
N_POPULATION = 1200
N_FEATURES = 9
LABEL_NOISE = 0.2

Split = tuple[np.ndarray, np.ndarray]


def generate(n: int, seed: int) -> Split:
    """``n`` rows: x float32 [n, 9] (column 0 the sensitive 0/1 value), y int64 in {0, 1}."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, N_FEATURES)).astype(np.float32)
    s = (rng.random(n) < 1 / (1 + np.exp(-(1.5 * x[:, 1] - 0.5)))).astype(np.float32)
    x[:, SENSITIVE_COLUMN] = s
    y = ((2 * s - 1) * x[:, 2] + 0.3 * x[:, 3] > 0).astype(np.int64)
    flip = rng.random(n) < LABEL_NOISE
    y[flip] = 1 - y[flip]
    return x, y


def load_splits(seed: int = 0) -> dict[str, Split]:
    """``{"members", "nonmembers", "population"}``, disjoint, from one generated table."""
    x, y = generate(N_MEMBERS + N_NONMEMBERS + N_POPULATION, seed)
    cuts = np.cumsum([N_MEMBERS, N_NONMEMBERS])
    parts = np.split(np.arange(len(y)), cuts)
    return {name: (x[idx], y[idx]) for name, idx in zip(("members", "nonmembers", "population"), parts)}


def members() -> Split:
    """The training set of ``model.pt``."""
    return load_splits()["members"]


def nonmembers() -> Split:
    """Rows from the same distribution the model never saw."""
    return load_splits()["nonmembers"]


def population() -> Split:
    """More rows from the same distribution, for the attacker's prior and the model-free baseline."""
    return load_splits()["population"]
