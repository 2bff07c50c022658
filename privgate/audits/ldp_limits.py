"""What `privgate audit ldp` and `dpsgd` accept before any work: the claimed ε, the number of games, their cost.

Kept free of torch so the CLI refuses an absurd ``--epsilon`` or ``--trials``
with one sentence (exit 2) before anything heavy is imported.
"""

from __future__ import annotations

import math

from privgate.report.numbers import duration

#: The largest claimed ε audited. Refuting ε needs about e^ε trials (a distinguisher's lower bound grows like the
#: log of its trial count: 2,000 trials prove at most ε ≈ 5); above 100 no audit could ever refute the claim, and
#: e^ε overflows a float beyond 709.
MAX_EPSILON = 100.0
#: The most games (trials × adversary × distinguisher × ε cells) one audit may play, and the rate the refusal's
#: estimate uses: ~6,000 games per second, measured for the bundled digits MLP (d = 2,410) on one thread of a
#: shared 2-core machine (`privgate audit ldp --epsilon 1 --trials 2000`); 10⁹ games is about two days.
MAX_GAMES = 10**9
GAMES_PER_SECOND = 6_000


def epsilon_problem(eps: float) -> str | None:
    """Why ``eps`` cannot be a claimed ε to audit (one sentence), or None."""
    if not (math.isfinite(eps) and eps > 0):
        return f"every claimed ε must be a positive finite number, got {eps:g}"
    if eps > MAX_EPSILON:
        return (
            f"a claimed ε of {eps:g} cannot be audited: refuting it would take about e^ε trials, and privgate "
            f"audits claims up to ε = {MAX_EPSILON:g}"
        )
    return None


__all__ = ["GAMES_PER_SECOND", "MAX_EPSILON", "MAX_GAMES", "duration", "epsilon_problem"]
