"""zlib-entropy ratio (Carlini et al. 2021, "Extracting Training Data from Large Language Models", arXiv 2012.07805).

A low loss may only mean the text is easy (repetitive, boilerplate); zlib's
compressed length measures how easy it is without any model. The attack ranks
by the ratio of the model's log-perplexity to the zlib entropy of the text
(bits of the compressed UTF-8 bytes): score = −log-perplexity / zlib bits, so
records the model finds much easier than zlib does score high.
"""

from __future__ import annotations

import zlib
from typing import Any

import numpy as np

from privgate.lm.attacks.base import RecordAttack
from privgate.lm.attacks.context import LMContext


def zlib_bits(text: str) -> float:
    """Bits of the zlib-compressed UTF-8 text (level 9)."""
    return 8.0 * len(zlib.compress(text.encode("utf-8"), 9))


class ZlibAttack(RecordAttack):
    """Log-perplexity over zlib entropy (Carlini et al. 2021, arXiv 2012.07805)."""

    name = "zlib"

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)

    def score(self, ctx: LMContext) -> np.ndarray:
        nll = -ctx.scores.mean_logprob
        bits = np.array([zlib_bits(t) for t in ctx.texts])
        return -nll / bits
