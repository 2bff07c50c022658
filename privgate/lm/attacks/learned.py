"""A learned combination of the language-model signals, cross-fitted on the calibration split.

A membership classifier (:mod:`privgate.attacks.learned`) over the loss (Yeom et al. 2018, arXiv 1709.01604), the
zlib and reference ratios (Carlini et al. 2021, arXiv 2012.07805), Min-K% (Shi et al. 2023, arXiv 2310.16789) and
Min-K%++ (Zhang et al. 2024, arXiv 2404.02936), each of which sees one side of memorisation, learns how they
combine on the calibration split, cross-fitted (:mod:`privgate.attacks.crossfit`): no record is scored by a
classifier that saw its membership, and the evaluation split's membership is never used.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from privgate.attacks.base import Attack, AttackContext, AttackResult
from privgate.attacks.learned import CLASSIFIERS, learned_scorer
from privgate.errors import shown
from privgate.lm.attacks.context import LMContext, lm_context
from privgate.lm.attacks.mink import lowest_mean
from privgate.lm.attacks.zlib import zlib_bits

KS = (0.05, 0.1, 0.2, 0.3, 0.5)


def lm_signals(ctx: LMContext) -> tuple[np.ndarray, list[str]]:
    """``[n, d]`` signals of every pooled record and their names."""
    s = ctx.scores
    mean = s.mean_logprob
    cols: dict[str, np.ndarray] = {
        "loss": mean,
        "zlib": mean / np.array([zlib_bits(t) for t in ctx.texts]),
        "tokens": np.log(np.maximum(s.n_tokens, 1)),
        "logprob_sd": np.array([float(v.std()) if len(v) else 0.0 for v in s.logprob]),
    }
    for k in KS:
        cols[f"min_k_{k:g}"] = np.array([lowest_mean(v, k) for v in s.logprob])
        cols[f"min_k_pp_{k:g}"] = np.array([lowest_mean((a - m) / d, k) for a, m, d in zip(s.logprob, s.mu, s.sigma)])
    if ctx.reference is not None:
        cols["reference_difference"] = mean - ctx.reference.mean_logprob
        cols["reference_loss"] = ctx.reference.mean_logprob
    return np.column_stack(list(cols.values())), list(cols)


class LMLearnedAttack(Attack):
    """Membership classifier over the language-model signals (module docstring), cross-fitted.

    Options:
        classifier: ``gbdt`` (histogram gradient boosting), ``logistic`` or ``mlp``.
        folds: cross-fitting folds over the calibration split (2–20).
    """

    name = "lm_learned"
    threat_model = "black-box"

    def __init__(self, classifier: str = "logistic", folds: int = 5, **options: Any) -> None:
        super().__init__(**options)
        if classifier not in CLASSIFIERS:
            raise ValueError(f"option classifier must be one of {', '.join(CLASSIFIERS)}, got {shown(classifier)}")
        if isinstance(folds, bool) or not isinstance(folds, int) or not 2 <= folds <= 20:
            raise ValueError(f"option folds must be an integer from 2 to 20, got {shown(folds)}")
        self.options = {"classifier": classifier, "folds": folds}

    def run(self, ctx: AttackContext) -> AttackResult:
        start = time.perf_counter()
        lm = lm_context(ctx, self.name)
        feats, names = lm_signals(lm)
        o = self.options
        scorer = learned_scorer(
            feats,
            np.zeros(len(feats), dtype=np.int64),
            1,
            per_class=None,
            classifier=o["classifier"],
            folds=o["folds"],
            seed=ctx.seed,
            threads=ctx.threads,
        )
        return AttackResult(
            attack=self.name,
            threat_model=self.threat_model,
            scores=np.zeros(len(feats)),
            seconds=time.perf_counter() - start,
            options=dict(o),
            notes=[
                f"{o['classifier']} membership classifier over {len(names)} signals ({', '.join(names[:6])}, …), "
                f"cross-fitted over {o['folds']} folds of the calibration split"
            ],
            extras={"signals": names},
            fitted=scorer,
        )
