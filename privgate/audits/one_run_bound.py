"""The ε lower bound of one-run auditing: pure functions over counts, no training, no I/O.

Steinke, Nasr & Jagielski 2023, "Privacy Auditing with One (1) Training Run" (arXiv 2305.08846), their (ε, δ)
result (§5, the p-value of Appendix D) with its δ term kept (dropping it, as some re-implementations do, is
unsound for δ > 0): ε_lb = sup{ε : f_ε(W) ≤ α} for W right guesses of r, by bisection. Valid while 2mδ ≤ 1;
beyond, the audit proves nothing (ε_lb = 0) and says so. The number of guesses comes from a grid fixed in
advance (:data:`GUESS_FRACTIONS`), each point at α/|grid| (Bonferroni). The bound and the proof of its
validity: ``docs/internals-dp-audits.md``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats as _st
from scipy.special import bdtrc

#: Fractions of m guessed (half "in" from the top scores, half "out" from the bottom), fixed before the audit.
GUESS_FRACTIONS = (0.02, 0.05, 0.1, 0.2, 0.5, 1.0)

#: Bisection stops when the bracket is this narrow (in ε).
TOLERANCE = 1e-6


def _accuracy(epsilon: float) -> float:
    return 1.0 / (1.0 + math.exp(-epsilon))


def p_value(m: int, r: int, v: int, epsilon: float, delta: float) -> float:
    """f_ε(v): an upper bound on P[W ≥ v] for an (ε, δ)-DP algorithm with m canaries and r guesses (see module)."""
    if not 0 <= v <= r <= m:
        raise ValueError(f"need 0 <= v <= r <= m, got v={v}, r={r}, m={m}")
    if v == 0:
        return 1.0
    q = _accuracy(epsilon)
    # P[B ≥ v]: the survival function's ufunc; scipy.stats.binom.sf checks and broadcasts its arguments for
    # ~0.5 ms a call, and the bisection asks for it ~25 times per guess count
    tail = float(bdtrc(v - 1, r, q))
    if delta <= 0:
        return min(1.0, tail)
    pmf = _st.binom.pmf(np.arange(v - 1, -1, -1), r, q)  # P[B = v−1], P[B = v−2], …, P[B = 0]
    windows = np.cumsum(pmf) / np.arange(1, v + 1)  # P[v − i ≤ B < v] / i for i = 1 … v
    return min(1.0, tail + 2 * m * delta * float(windows.max()))


def epsilon_lb_from_guesses(m: int, r: int, v: int, delta: float, alpha: float) -> float:
    """The largest ε that ``v`` correct of ``r`` guesses refute at level α: sup{ε : f_ε(v) ≤ α}; 0 if none.

    Returns 0 when 2mδ > 1 (the bound is not monotone there; see the module docstring).
    """
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must lie in (0, 1), got {alpha}")
    if 2 * m * delta > 1 or v == 0 or p_value(m, r, v, 0.0, delta) > alpha:
        return 0.0
    lo, hi = 0.0, 1.0
    while p_value(m, r, v, hi, delta) <= alpha:
        lo, hi = hi, hi * 2
        if hi > 1e4:  # pragma: no cover - f → 1 as ε → ∞ for v ≥ 1, so this is never reached
            return lo
    while hi - lo > TOLERANCE:
        mid = (lo + hi) / 2
        if p_value(m, r, v, mid, delta) <= alpha:
            lo = mid
        else:
            hi = mid
    return lo


def guess_counts(m: int, fractions: tuple[float, ...] = GUESS_FRACTIONS) -> list[int]:
    """k, the guesses per side, of each grid point: between 1 and ⌈m/2⌉ (r = m at the 100 % point)."""
    ks = sorted({max(1, min(math.ceil(m / 2), int(round(f * m / 2)))) for f in fractions})
    return ks


@dataclass(frozen=True)
class Attempt:
    """One grid point: k in + k out guesses (r = 2k, or m when 2k > m), v right, and its bound at α/|grid|."""

    guesses: int
    correct: int
    epsilon_lb: float


def guess(scores: np.ndarray, included: np.ndarray, k: int) -> tuple[int, int]:
    """(r, v): guess the ``k`` highest scores in and the ``k`` lowest out (no canary guessed twice).

    Ties are broken by canary index, which is independent of inclusion, so the
    guesses depend on the training output only.
    """
    order = np.argsort(-np.asarray(scores, dtype=float), kind="stable")
    m = len(order)
    k_in = min(k, m)
    k_out = min(k, m - k_in)
    top, bottom = order[:k_in], order[m - k_out :] if k_out else order[:0]
    inc = np.asarray(included, dtype=bool)
    return k_in + k_out, int(inc[top].sum() + (~inc[bottom]).sum())


def audit_bound(
    scores: np.ndarray,
    included: np.ndarray,
    delta: float,
    confidence: float,
    fractions: tuple[float, ...] = GUESS_FRACTIONS,
) -> tuple[Attempt, list[Attempt]]:
    """Every grid point's attempt and the one with the largest bound, all at (1 − confidence)/|grid|."""
    m = len(scores)
    ks = guess_counts(m, fractions)
    alpha = (1.0 - confidence) / len(ks)
    attempts = []
    for k in ks:
        r, v = guess(scores, included, k)
        attempts.append(Attempt(r, v, epsilon_lb_from_guesses(m, r, v, delta, alpha)))
    best = max(attempts, key=lambda a: (a.epsilon_lb, a.correct))
    return best, attempts


def max_provable_from_canaries(
    m: int, delta: float, confidence: float, fractions: tuple[float, ...] = GUESS_FRACTIONS
) -> float:
    """The largest bound m canaries could show: every guess right at the best grid point."""
    ks = guess_counts(m, fractions)
    alpha = (1.0 - confidence) / len(ks)
    return max(epsilon_lb_from_guesses(m, min(2 * k, m), min(2 * k, m), delta, alpha) for k in ks)


__all__ = [
    "GUESS_FRACTIONS",
    "Attempt",
    "audit_bound",
    "epsilon_lb_from_guesses",
    "guess",
    "guess_counts",
    "max_provable_from_canaries",
    "p_value",
]
