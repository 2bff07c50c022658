"""What the statistics tests compare privgate.stats with: binomial acceptance bands, known mechanisms, score splits.

Monte-Carlo tests use fixed seeds, so they are deterministic. Their acceptance bands are binomial quantiles: an
implementation that meets its stated rate would fall outside one with probability about ``TAIL`` per side.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats as st

from privgate import stats as S

#: Per-side probability that a Monte-Carlo band rejects a correct implementation.
TAIL = 1e-3


def binom_hi(reps: int, p: float, tail: float = TAIL) -> int:
    """Largest count a Binomial(reps, p) exceeds with probability at most ``tail``."""
    return int(st.binom.ppf(1 - tail, reps, p))


def binom_lo(reps: int, p: float, tail: float = TAIL) -> int:
    """Smallest count a Binomial(reps, p) falls below with probability at most ``tail``."""
    return int(st.binom.ppf(tail, reps, p))


def rr_scores(rng: np.random.Generator, membership: np.ndarray, eps: float, reps: int) -> np.ndarray:
    """Randomised response: each score is the membership bit, kept with prob e^ε/(1+e^ε).

    Each example's output depends on its own bit only and the likelihood ratio of
    any output is e^{±ε}, so the mechanism is exactly ε-DP (δ = 0) and the ε
    bound from its optimal test is exactly ε.
    """
    keep = math.exp(eps) / (1 + math.exp(eps))
    flip = rng.random((reps, len(membership))) >= keep
    return (membership[None, :] ^ flip).astype(float)


def gauss_split(
    rng: np.random.Generator, n_in: int, n_out: int, mu: float, n_cal_out: int | None = None
) -> S.SplitScores:
    """Members N(mu, 1), non-members N(0, 1), in both splits."""
    return S.SplitScores(
        cal_in=rng.standard_normal(n_in) + mu,
        cal_out=rng.standard_normal(n_out if n_cal_out is None else n_cal_out),
        eval_in=rng.standard_normal(n_in) + mu,
        eval_out=rng.standard_normal(n_out),
    )
