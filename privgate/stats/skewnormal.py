"""Maximum-likelihood skew-normal fits, fast enough to bootstrap: the extrapolation behind canary exposure.

The skew-normal (Azzalini 1985, Scand. J. Statist. 12:171), f(x) = (2/ω) φ(z) Φ(αz), z = (x − ξ)/ω. :func:`fit`
minimises the negative log-likelihood with its analytic gradient by L-BFGS-B from a starting point: the maximum
:func:`scipy.stats.skewnorm.fit` finds, at a tenth of its cost per refit — what a bootstrap (Efron 1979) of the fit
of Carlini et al. 2019 ("The Secret Sharer", arXiv 1802.08232, §4.3) needs. The likelihood and its gradient:
``docs/internals-training-stats.md``; its use: ``docs/lm-leakage.md``.
"""

from __future__ import annotations

import math

import numpy as np

_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


def _nll(theta: np.ndarray, x: np.ndarray) -> tuple[float, np.ndarray]:
    from scipy.special import log_ndtr

    a, loc, log_scale = theta
    z = (x - loc) / math.exp(log_scale)
    log_cdf = log_ndtr(a * z)
    r = np.exp(-0.5 * (a * z) ** 2 - _HALF_LOG_2PI - log_cdf)
    n = len(x)
    value = n * log_scale + 0.5 * float(z @ z) - float(log_cdf.sum())
    grad = np.array([-(r @ z), -(z - a * r).sum() / math.exp(log_scale), n - (z @ z) + a * (r @ z)])
    return value, grad


def fit(sample: np.ndarray, start: tuple[float, float, float] | None = None) -> tuple[float, float, float]:
    """(shape α, location ξ, scale ω) of the skew-normal that maximises the likelihood of ``sample``.

    Without ``start`` this is :func:`scipy.stats.skewnorm.fit`; with one (e.g. the fit to the full sample when
    refitting a bootstrap resample), L-BFGS-B on the likelihood above from there, falling back to scipy's fit
    if it does not converge.
    """
    from scipy import optimize
    from scipy import stats as st

    x = np.asarray(sample, dtype=np.float64)
    if start is None:
        a, loc, scale = st.skewnorm.fit(x)
        return float(a), float(loc), float(scale)
    x0 = np.array([start[0], start[1], math.log(start[2])])
    res = optimize.minimize(_nll, x0, args=(x,), jac=True, method="L-BFGS-B")
    if not res.success or not np.all(np.isfinite(res.x)):
        return fit(x)
    return float(res.x[0]), float(res.x[1]), float(math.exp(res.x[2]))


def cdf(x: float, params: tuple[float, float, float]) -> float:
    """P(X ≤ x) under the skew-normal ``params`` (:func:`fit`'s (α, ξ, ω))."""
    from scipy import stats as st

    return float(st.skewnorm.cdf(x, *params))


__all__ = ["cdf", "fit"]
