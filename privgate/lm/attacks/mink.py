"""Min-K% Prob (Shi et al. 2023, arXiv 2310.16789) and Min-K%++ (Zhang et al. 2024, arXiv 2404.02936).

Min-K%: the mean log-probability of the k % least likely tokens of a record (an unseen text has a few outlier
tokens of very low probability; a memorised one has few). Min-K%++ first standardises each token's log-probability
by the model's own next-token distribution at that position, (log p(x_t) − μ_t) / σ_t, since training makes a
training token a mode of that distribution; then the mean of the k % lowest.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from privgate.lm.attacks.base import RecordAttack, fraction_option
from privgate.lm.attacks.context import LMContext


def lowest_mean(values: np.ndarray, k: float) -> float:
    """Mean of the ⌈k·n⌉ smallest values (at least one); 0 for an empty record."""
    if len(values) == 0:
        return 0.0
    m = max(1, int(np.ceil(k * len(values))))
    return float(np.partition(values, m - 1)[:m].mean())


class MinKAttack(RecordAttack):
    """Min-K% Prob (Shi et al. 2023, arXiv 2310.16789): mean of the k lowest token log-probabilities."""

    name = "min_k"

    def __init__(self, k: float = 0.2, **options: Any) -> None:
        super().__init__(**options)
        self.options = {"k": fraction_option("k", k)}

    def score(self, ctx: LMContext) -> np.ndarray:
        return np.array([lowest_mean(v, self.options["k"]) for v in ctx.scores.logprob])


class MinKPlusPlusAttack(RecordAttack):
    """Min-K%++ (Zhang et al. 2024, arXiv 2404.02936): Min-K% of (log p − μ) / σ per token."""

    name = "min_k_pp"

    def __init__(self, k: float = 0.2, **options: Any) -> None:
        super().__init__(**options)
        self.options = {"k": fraction_option("k", k)}

    def score(self, ctx: LMContext) -> np.ndarray:
        s = ctx.scores
        return np.array(
            [lowest_mean((lp - mu) / sd, self.options["k"]) for lp, mu, sd in zip(s.logprob, s.mu, s.sigma)]
        )
