"""LiRA, the likelihood-ratio attack (Carlini, Chien, Nasr, Song, Terzis & Tramèr 2022, arXiv 2112.03570).

Per example, the logit-scaled confidence φ = log(p_y / (1 − p_y)) of the reference models
(:mod:`privgate.attacks.reference`) that trained on it (IN) and did not (OUT) is fitted by Gaussians: **online**
scores the target's φ by log N(φ; μ_in, σ_in²) − log N(φ; μ_out, σ_out²), **offline** by (φ − μ_out) / σ_out.
``fixed_variance: auto`` shares one variance below 64 models; augmented queries (§V) average per-view scores over
:mod:`privgate.attacks.views`. Saturated φ (p_y exactly 0 or 1) are read half a step beyond the most extreme
unsaturated value. Derivation: ``docs/internals-attacks-lm.md``.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import numpy as np

from privgate.attacks.base import Attack, AttackContext, AttackResult
from privgate.attacks.reference import (
    References,
    build_references,
    check_models,
    logit_confidence,
    reference_result,
)
from privgate.attacks.views import OPTION, Views, check_option, query_views
from privgate.errors import shown

if TYPE_CHECKING:
    from privgate.attacks.budget import CostFacts

#: Below this many models, ``fixed_variance: auto`` shares one variance across examples.
PER_EXAMPLE_MIN_MODELS = 64
#: |φ| beyond this is a probability of exactly 0 or 1 (φ at the float64 floor, ±690), not a logit.
SATURATED = 640.0


def unsaturate(phi_target: np.ndarray, phi_ref: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """φ with every saturated value (p_y exactly 0 or 1) read at ±(φ_max + log 2); and how many there were.

    ``φ_max``: the largest unsaturated |φ| of the target and the reference models together (module docstring).
    """
    sat_t, sat_r = np.abs(phi_target) >= SATURATED, np.abs(phi_ref) >= SATURATED
    n = int(sat_t.sum() + sat_r.sum())
    if n == 0:
        return phi_target, phi_ref, 0
    finite = np.concatenate([np.abs(phi_target[~sat_t]), np.abs(phi_ref[~sat_r])])
    edge = (float(finite.max()) if finite.size else 0.0) + float(np.log(2.0))
    return (
        np.where(sat_t, np.sign(phi_target) * edge, phi_target),
        np.where(sat_r, np.sign(phi_ref) * edge, phi_ref),
        n,
    )


def _gaussian(phi: np.ndarray, use: np.ndarray, fixed: bool) -> tuple[np.ndarray, np.ndarray]:
    """Per-example mean and standard deviation of ``phi[K, n]`` over the models where ``use``."""
    cnt = use.sum(axis=0)
    mu = np.where(use, phi, 0.0).sum(axis=0) / np.maximum(cnt, 1)
    sq = np.where(use, (phi - mu) ** 2, 0.0)
    dof = np.maximum(cnt - 1, 0)
    pooled = sq.sum() / max(int(dof.sum()), 1)
    if fixed:
        var = np.full(phi.shape[1], pooled)
    else:
        var = np.where(dof > 0, sq.sum(axis=0) / np.maximum(dof, 1), pooled)
        var = np.maximum(var, 1e-2 * pooled)  # one degenerate example must not dominate the ranking
    return mu, np.sqrt(np.maximum(var, 1e-12))


def lira_scores(
    phi_target: np.ndarray, phi_ref: np.ndarray, inside: np.ndarray, *, online: bool, fixed_variance: bool
) -> np.ndarray:
    """LiRA membership scores (higher = more likely a member).

    Args:
        phi_target: ``[n]`` the target's logit-scaled confidences.
        phi_ref: ``[K, n]`` the reference models' logit-scaled confidences.
        inside: ``[K, n]`` whether example i was in model k's training set.
        online: use IN and OUT models (likelihood ratio) or OUT only (one-sided test).
        fixed_variance: one variance per side for all examples.

    Saturated φ (probabilities of exactly 0 or 1) are read by :func:`unsaturate` first.
    """
    phi_target, phi_ref, _ = unsaturate(np.asarray(phi_target, float), np.asarray(phi_ref, float))
    mu_out, sd_out = _gaussian(phi_ref, ~inside, fixed_variance)
    if not online:
        return (phi_target - mu_out) / sd_out
    mu_in, sd_in = _gaussian(phi_ref, inside, fixed_variance)

    def logpdf(v: np.ndarray, mu: np.ndarray, sd: np.ndarray) -> np.ndarray:
        return -0.5 * ((v - mu) / sd) ** 2 - np.log(sd)

    return logpdf(phi_target, mu_in, sd_in) - logpdf(phi_target, mu_out, sd_out)


def view_scores(
    ctx: AttackContext, refs: References, views: Views, *, online: bool, fixed_variance: bool
) -> np.ndarray:
    """LiRA on augmented queries: :func:`lira_scores` per view, averaged (one view's statistics held at a time)."""
    total = np.zeros(len(ctx.y))
    for view in views:
        phi_target = views.target_rows(ctx.target, view, ctx.x, ctx.y, logit_confidence)
        phi_ref = refs.per_row(logit_confidence, view=views.query(view))  # shared with RMIA: one pass per view
        total += lira_scores(phi_target, phi_ref, refs.inside, online=online, fixed_variance=fixed_variance)
    return total / len(views)


class LiRAAttack(Attack):
    """Likelihood-ratio attack, online or offline (Carlini et al. 2022, arXiv 2112.03570).

    Options:
        models: reference models to train (≥ 4; each example is IN for half of them).
        offline: use only the models that did not train on each example.
        fixed_variance: ``true``, ``false`` or ``auto`` (fixed below 64 models).
        augmented_queries: query fixed augmentations of each example when the recipe
            crops or flips images: 2, 18, 50 or false (default true: 2 when it flips;
            :mod:`privgate.attacks.views`).
    """

    name = "lira"
    threat_model = "black-box"
    needs_recipe = True

    def __init__(
        self,
        models: int = 16,
        offline: bool = False,
        fixed_variance: bool | str = "auto",
        augmented_queries: bool | int = True,
        **options: Any,
    ) -> None:
        super().__init__(**options)
        check_models(models, 4)
        if not isinstance(offline, bool):
            raise TypeError("option offline must be true or false")
        if fixed_variance not in (True, False, "auto"):
            raise ValueError(f"option fixed_variance must be true, false or auto, got {shown(fixed_variance)}")
        if fixed_variance is False and models < 8:
            raise ValueError(
                f"per-example variances (fixed_variance: false) need at least 8 models (4 per side), got {models}"
            )
        self.options = {"models": models, "offline": offline, "fixed_variance": fixed_variance}
        if check_option(augmented_queries) is not True:  # listed only when set: reports without it stay comparable
            self.options[OPTION] = augmented_queries

    def estimated_seconds(self, facts: CostFacts) -> float | None:
        from privgate.attacks.budget import reference_seconds

        return reference_seconds(facts, self.options["models"])

    def run(self, ctx: AttackContext) -> AttackResult:
        start = time.perf_counter()
        k = self.options["models"]
        refs = build_references(ctx, k, attack=self.name)
        fv = self.options["fixed_variance"]
        fixed = k < PER_EXAMPLE_MIN_MODELS if fv == "auto" else bool(fv)
        online = not self.options["offline"]
        views, notes = query_views(ctx.recipe, ctx.x, self.options.get(OPTION, True))
        saturated = 0
        if views is None:
            phi_target = ctx.per_row(logit_confidence)  # [n], streamed: the [n, classes] outputs are never held
            phi_ref = refs.per_row(logit_confidence)  # [K, n], streamed model by model
            saturated = unsaturate(phi_target, phi_ref)[2]
            scores = lira_scores(phi_target, phi_ref, refs.inside, online=online, fixed_variance=fixed)
        else:
            scores = view_scores(ctx, refs, views, online=online, fixed_variance=fixed)
        note = (
            f"{'online' if online else 'offline'} LiRA with {'one shared' if fixed else 'per-example'} variance; "
            f"{k // 2} IN and {k - k // 2} OUT models per example"
        )
        if saturated:
            note += (
                f"; {saturated} probabilit{'y' if saturated == 1 else 'ies'} of exactly 0 or 1 (of "
                f"{(k + 1) * len(ctx.y)} read) taken at half the outputs' resolution"
            )
        if views is not None:
            note += (
                f"; the target and every reference model queried on {views.describe()}, one Gaussian per "
                "augmentation, their log-likelihood ratios averaged (Carlini et al. 2022, §V)"
            )
        extras = {"augmented_queries": views.names} if views is not None else {}
        return reference_result(
            self, refs, scores, start, self.options, [note] + notes, reference_models=k, fixed_variance=fixed, **extras
        )
