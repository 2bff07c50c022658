"""Private selection with a random number of trials: the released ε of a random-stopping search.

Papernot & Steinke 2022 ("Hyperparameter tuning with Rényi differential privacy", arXiv 2110.03620): run a
randomised algorithm K times, K itself random, output only the best run; the whole search's RDP is Theorem 2
(truncated negative binomial K, the geometric case being Liu & Talwar 2019, arXiv 1811.07971) or Theorem 6
(Poisson K), a small constant factor of one run. Drawing the run's ε from the schedule independently of the
data is covered by joint quasi-convexity (van Erven & Harremoës 2014, arXiv 1206.2459). The formulas:
``docs/internals-dp-audits.md``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from privgate.dpsgd.accounting import ORDERS, delta_from_rdp, epsilon_from_rdp

Distribution = Literal["geometric", "logarithmic", "negative_binomial", "poisson"]


def tnb_mean(gamma: float, eta: float) -> float:
    """E[K] of the truncated negative binomial TNB(η, γ) (Papernot & Steinke 2022, Definition 1).

    P[K = k] ∝ C(k + η − 1, k)·(1 − γ)^k for k ≥ 1; η = 0: P[K = k] ∝ (1 − γ)^k / k.
    E[K] = η(1 − γ) / (γ(1 − γ^η)); 1/γ for η = 1; (1 − γ)/(γ·log(1/γ)) for η = 0.
    """
    if not 0 < gamma <= 1:
        raise ValueError(f"γ must be in (0, 1], got {gamma}")
    if gamma == 1:
        return 1.0
    if eta == 0:
        return (1 - gamma) / (gamma * math.log(1 / gamma))
    if eta == 1:
        return 1 / gamma
    return eta * (1 - gamma) / (gamma * -math.expm1(eta * math.log(gamma)))


def tnb_gamma(mean: float, eta: float) -> float:
    """The γ whose TNB(η, γ) has mean ``mean`` (bisection; E[K] falls as γ grows), rounded towards a larger mean."""
    if mean < 1:
        raise ValueError(f"the mean number of trials must be at least 1, got {mean}")
    if mean == 1:
        return 1.0
    if eta == 1:
        return 1 / mean
    lo, hi = 1e-12, 1.0
    for _ in range(200):
        mid = (lo + hi) / 2
        if tnb_mean(mid, eta) > mean:
            lo = mid
        else:
            hi = mid
    return lo


@dataclass(frozen=True)
class Trials:
    """The distribution of the number of trials K of a random-stopping search.

    Args:
        distribution: ``geometric`` (η = 1, Liu & Talwar 2019), ``logarithmic``
            (η = 0), ``negative_binomial`` (truncated, shape ``shape`` = η) or
            ``poisson`` (mean μ; K may be 0, and then nothing is released).
        mean: E[K].
        shape: η for ``negative_binomial``.
    """

    distribution: Distribution = "geometric"
    mean: float = 3.0
    shape: float = 1.0

    @property
    def eta(self) -> float:
        return {"geometric": 1.0, "logarithmic": 0.0, "poisson": math.inf}.get(self.distribution, float(self.shape))

    @property
    def gamma(self) -> float | None:
        """γ of the truncated negative binomial (None for Poisson)."""
        return None if self.distribution == "poisson" else tnb_gamma(self.mean, self.eta)

    def draw(self, rng: np.random.Generator) -> int:
        """One K, from ``rng`` (seeded by the run's seed, independent of the data)."""
        if self.distribution == "poisson":
            return int(rng.poisson(self.mean))
        gamma = self.gamma
        assert gamma is not None
        if gamma >= 1:
            return 1
        if self.eta == 0:
            return int(rng.logseries(1 - gamma))
        while True:  # numpy counts failures before η successes: P(k) ∝ C(k+η−1, k)(1−γ)^k; truncate k = 0
            k = int(rng.negative_binomial(self.eta, gamma))
            if k >= 1:
                return k

    def describe(self) -> str:
        if self.distribution == "poisson":
            return f"Poisson with mean {self.mean:g}"
        name = {"geometric": "geometric", "logarithmic": "logarithmic"}.get(
            self.distribution, f"truncated negative binomial (η = {self.eta:g})"
        )
        return f"{name} with mean {self.mean:g} (γ = {self.gamma:.4g})"


def mixture_rdp(curves: Sequence[np.ndarray]) -> np.ndarray:
    """RDP of one run of Q that draws its mechanism from ``curves``' independently of the data: the pointwise max.

    Rényi divergence is jointly quasi-convex (van Erven & Harremoës 2014, arXiv 1206.2459, Thm. 13), so a
    data-independent mixture is never worse than its worst component; the max also keeps the released ε at
    least the training ε of whichever run is released.
    """
    return np.max(np.vstack([np.asarray(c, dtype=float) for c in curves]), axis=0)


def repeat_and_select_rdp(rdp: np.ndarray, trials: Trials, orders: Sequence[float] = ORDERS) -> np.ndarray:
    """RDP curve of the best of K runs of Q, Q's curve being ``rdp`` (Papernot & Steinke 2022, Thms. 2 and 6).

    Theorem 2 (TNB): ρ′(λ) = ρ(λ) + (1 + η)·min_λ̂[(1 − 1/λ̂)ρ(λ̂) + log(1/γ)/λ̂] + log(E[K])/(λ − 1),
    then made monotone in λ (RDP grows with the order, so ρ′(λ) ≤ ρ′(λ′) for λ ≤ λ′).
    Theorem 6 (Poisson): ρ′(λ) = ρ(λ) + μ·δ̂(ε̂) + log(μ)/(λ − 1) with ε̂ = log(1 + 1/(λ − 1)),
    δ̂ from Q's curve (:func:`~privgate.dpsgd.accounting.delta_from_rdp`).
    """
    a = np.asarray(orders, dtype=float)
    rho = np.asarray(rdp, dtype=float)
    if trials.distribution == "poisson":
        mu = float(trials.mean)
        out = np.array(
            [
                rho[i] + mu * delta_from_rdp(rho, math.log1p(1 / (a[i] - 1)), orders) + math.log(mu) / (a[i] - 1)
                for i in range(len(a))
            ]
        )
        return out
    gamma = trials.gamma
    assert gamma is not None
    eta = trials.eta
    const = (1 + eta) * float(np.min((1 - 1 / a) * rho + math.log(1 / gamma) / a))
    out = rho + const + math.log(trials.mean) / (a - 1)
    return np.minimum.accumulate(out[::-1])[::-1]  # monotonicity: a lower order is bounded by any higher one


@dataclass(frozen=True)
class RandomStopping:
    """The released (ε, δ) of a random-stopping search, and what it was computed from."""

    epsilon: float
    delta: float
    order: float
    trials: Trials
    per_run_epsilon: float


def random_stopping_epsilon(per_run: Sequence[np.ndarray], delta: float, trials: Trials) -> RandomStopping:
    """(ε, δ) of releasing the best of K runs, each run one of ``per_run``'s RDP curves drawn uniformly.

    ``per_run_epsilon`` is the ε of one run of Q (the mixture) at the same δ, for comparison.
    """
    q_curve = mixture_rdp(per_run)
    eps, order = epsilon_from_rdp(repeat_and_select_rdp(q_curve, trials), delta)
    one, _ = epsilon_from_rdp(q_curve, delta)
    return RandomStopping(eps, delta, order, trials, one)


__all__ = [
    "Distribution",
    "RandomStopping",
    "Trials",
    "mixture_rdp",
    "random_stopping_epsilon",
    "repeat_and_select_rdp",
    "tnb_gamma",
    "tnb_mean",
]
