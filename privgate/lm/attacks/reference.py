"""Reference-model ratio (Carlini et al. 2021, "Extracting Training Data from Large Language Models", arXiv 2012.07805).

A reference model that never saw the audit records (``--reference-model DIR``, typically the base model before
fine-tuning) says how easy each record is; a member is one the target finds much easier. ``form: ratio`` is the
paper's −log ppl_target / log ppl_reference; ``form: difference`` is log ppl_reference − log ppl_target (the
difficulty calibration of Watson et al. 2022, arXiv 2111.08440), steadier when the reference's log-perplexity is
near zero.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from privgate.attacks.base import AttackSkipped
from privgate.errors import shown
from privgate.lm.attacks.base import RecordAttack
from privgate.lm.attacks.context import LMContext

FORMS = ("ratio", "difference")


class ReferenceRatioAttack(RecordAttack):
    """Target vs reference log-perplexity (Carlini et al. 2021, arXiv 2012.07805)."""

    name = "reference_ratio"

    def __init__(self, form: str = "ratio", **options: Any) -> None:
        super().__init__(**options)
        if form not in FORMS:
            raise ValueError(f"option form must be one of {', '.join(FORMS)}, got {shown(form)}")
        self.options = {"form": form}

    def score(self, ctx: LMContext) -> np.ndarray:
        if ctx.reference is None:
            raise AttackSkipped("'reference_ratio' needs a reference model (--reference-model DIR)")
        target, ref = -ctx.scores.mean_logprob, -ctx.reference.mean_logprob
        if self.options["form"] == "difference":
            return ref - target
        return -target / np.maximum(ref, 1e-6)
