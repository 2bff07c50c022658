"""LiRA and RMIA on a causal language model, with references privgate fine-tunes from a recipe.

The references (:mod:`privgate.lm.references`) never train on an audit record, so both run **offline**, on the
per-record mean token log-probability φ(x), which plays the role of the logit-scaled confidence (close to Gaussian
across models). ``lm_lira``: offline fixed-variance LiRA (Carlini et al. 2022, arXiv 2112.03570, §IV-C),
(φ − μ_out(x)) / σ_out by :func:`privgate.attacks.lira.lira_scores`. ``lm_rmia``: offline RMIA (Zarifzadeh et al.
2024, arXiv 2312.03262) with Pr(x | θ) = exp φ(x) and ``a`` calibrated on the references themselves
(:mod:`privgate.attacks.rmia`). Details: ``docs/language-models.md``.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from privgate.attacks.base import Attack, AttackContext, AttackResult
from privgate.attacks.reference import check_models
from privgate.attacks.rmia import calibrate_a, check_rmia_options, offline_px, rmia_scores
from privgate.errors import shown
from privgate.lm.attacks.context import lm_context

_TINY = 1e-300
#: Population records an attack needs before it fine-tunes anything.
MIN_POPULATION = 20


def _result(
    attack: Attack, refs: Any, scores: np.ndarray, start: float, notes: list[str], **extras: Any
) -> AttackResult:
    return AttackResult(
        attack=attack.name,
        threat_model=attack.threat_model,
        scores=np.asarray(scores, dtype=np.float64),
        seconds=time.perf_counter() - start,
        models_trained=refs.trained,
        options=dict(attack.options),
        notes=refs.notes() + notes,
        extras={**refs.extras(), **extras},
    )


def _min_population(v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 4:
        raise ValueError(f"option min_population must be an integer ≥ 4, got {shown(v)}")
    return v


class LMLiRAAttack(Attack):
    """Offline LiRA on per-record log-likelihoods (Carlini et al. 2022, arXiv 2112.03570), module docstring.

    Options:
        models: reference fine-tunes (even, ≥ 2).
        fixed_variance: ``true``, ``false`` (per-record variances, ≥ 4 models) or ``auto`` (fixed below 64).
        min_population: fewest population records to run at all.
    """

    name = "lm_lira"
    threat_model = "black-box"
    needs_recipe = True

    def __init__(
        self, models: int = 4, fixed_variance: bool | str = "auto", min_population: int = MIN_POPULATION, **options: Any
    ) -> None:
        super().__init__(**options)
        check_models(models, 2)
        if fixed_variance not in (True, False, "auto"):
            raise ValueError(f"option fixed_variance must be true, false or auto, got {shown(fixed_variance)}")
        if fixed_variance is False and models < 4:
            raise ValueError(f"per-record variances (fixed_variance: false) need at least 4 models, got {models}")
        self.options = {
            "models": models,
            "fixed_variance": fixed_variance,
            "min_population": _min_population(min_population),
        }

    def run(self, ctx: AttackContext) -> AttackResult:
        from privgate.attacks.lira import PER_EXAMPLE_MIN_MODELS, lira_scores
        from privgate.lm.references import fine_tuned

        start = time.perf_counter()
        lm = lm_context(ctx, self.name)
        o = self.options
        refs = fine_tuned(lm, self.name, o["models"], o["min_population"])
        fv = o["fixed_variance"]
        fixed = refs.k < PER_EXAMPLE_MIN_MODELS if fv == "auto" else bool(fv)
        out = np.zeros_like(refs.audit, dtype=bool)  # offline: no reference trained on an audit record
        scores = lira_scores(lm.scores.mean_logprob, refs.audit, out, online=False, fixed_variance=fixed)
        note = (
            f"offline LiRA on the mean token log-probability with {'one shared' if fixed else 'per-record'} "
            f"variance over {refs.k} OUT reference models"
        )
        return _result(self, refs, scores, start, [note], fixed_variance=fixed)


class LMRMIAAttack(Attack):
    """Offline RMIA on per-token likelihoods (Zarifzadeh et al. 2024, arXiv 2312.03262), module docstring.

    Options:
        models: reference fine-tunes (even, ≥ 2).
        a: the offline approximation parameter in [0, 1], or ``auto`` (calibrated on the references).
        gamma: the pairwise likelihood-ratio threshold γ ≥ 1.
        min_population: fewest population records to run at all.
    """

    name = "lm_rmia"
    threat_model = "black-box"
    needs_recipe = True

    def __init__(
        self,
        models: int = 4,
        a: float | str = "auto",
        gamma: float = 1.0,
        min_population: int = MIN_POPULATION,
        **options: Any,
    ) -> None:
        super().__init__(**options)
        check_models(models, 2)
        check_rmia_options(a, gamma)
        self.options = {
            "models": models,
            "a": a if a == "auto" else float(a),
            "gamma": float(gamma),
            "min_population": _min_population(min_population),
        }

    def run(self, ctx: AttackContext) -> AttackResult:
        from privgate.lm.references import fine_tuned

        start = time.perf_counter()
        lm = lm_context(ctx, self.name)
        o = self.options
        refs = fine_tuned(lm, self.name, o["models"], o["min_population"])
        p_pool, p_z, p_x = np.exp(refs.pool), np.exp(refs.z), np.exp(refs.audit)
        if o["a"] == "auto":
            a, grid = calibrate_a(p_pool, refs.inside, p_z)
        else:
            a, grid = float(o["a"]), {}
        px = offline_px(p_x.mean(axis=0), a)
        pz = offline_px(p_z.mean(axis=0), a)
        lx = lm.scores.mean_logprob - np.log(np.clip(px, _TINY, None))
        lz = refs.target_z - np.log(np.clip(pz, _TINY, None))
        scores = rmia_scores(lx, lz, o["gamma"])
        how = f"a = {a:g}" + (" (calibrated on the reference models)" if grid else "")
        note = f"offline RMIA on the per-token likelihood, {how}, γ = {o['gamma']:g}, {len(lz)} population z-samples"
        return _result(
            self, refs, scores, start, [note], a=a, a_calibration_auc={str(k): round(v, 4) for k, v in grid.items()}
        )
