"""Loss attack on a causal language model (Yeom, Giacomelli, Fredrikson & Jha 2018, arXiv 1709.01604).

score = mean token log-probability of the record = −loss = −log perplexity:
a record the model was trained on tends to have a lower loss.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from privgate.lm.attacks.base import RecordAttack
from privgate.lm.attacks.context import LMContext


class LMLossAttack(RecordAttack):
    """Record loss (Yeom et al. 2018, arXiv 1709.01604): score = mean log p(x_t | x_<t)."""

    name = "lm_loss"

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)

    def score(self, ctx: LMContext) -> np.ndarray:
        return ctx.scores.mean_logprob
