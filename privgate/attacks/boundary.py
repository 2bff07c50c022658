"""Label-only attack: how far the label survives perturbation, at several distances, learned on the calibration split.

Choquette-Choo, Tramèr, Carlini & Papernot 2021 (arXiv 2007.14321) and Li & Zhang 2021 (arXiv 2007.15528): members
lie farther from the decision boundary. Signals: the clean label's correctness and, per strength (the multiples
:data:`SCALE_FACTORS` of the strength ``t₅₀`` found on non-member data), the fraction of perturbed queries that keep
the label; the score is a logistic regression cross-fitted on the calibration split
(:mod:`privgate.attacks.crossfit`). Every query is one row sent to the served model and counted there.
Details: ``docs/internals-attacks-lm.md``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from privgate.attacks.base import Attack, AttackContext, AttackResult
from privgate.attacks.label_only import FLIP_GRID, GAUSSIAN_GRID, NOISES, robustness
from privgate.errors import shown

if TYPE_CHECKING:
    from privgate.attacks.budget import CostFacts

#: The strengths probed, as multiples of t₅₀: ``scales`` of them from 0.25 up (from 0.125 for 5 or 6).
SCALE_FACTORS = (0.125, 0.25, 0.5, 1.0, 2.0, 4.0)
_CALIBRATION_ROWS = 300
_CALIBRATION_QUERIES = 8


class BoundaryAttack(Attack):
    """Label-only membership inference from the label's survival curve under perturbation.

    Choquette-Choo et al. 2021 (arXiv 2007.14321); Li & Zhang 2021 (arXiv 2007.15528).

    Options:
        queries: perturbed label queries per example (besides the clean one), shared by the strengths.
        scales: how many strengths (2 to 6), the first of :data:`SCALE_FACTORS` around t₅₀.
        noise: ``auto`` (``flip`` when every feature is 0/1, else ``gaussian``), ``gaussian`` or ``flip``.
        folds: cross-fitting folds of the learned combination.
    """

    name = "boundary"
    threat_model = "label-only"
    numeric_rows = True  # noise or flips added to the rows

    def __init__(self, queries: int = 64, scales: int = 4, noise: str = "auto", folds: int = 5, **options: Any) -> None:
        super().__init__(**options)
        for key, v, low, high in (("queries", queries, 2, 10000), ("scales", scales, 2, 6), ("folds", folds, 2, 20)):
            if isinstance(v, bool) or not isinstance(v, int) or not low <= v <= high:
                raise ValueError(f"option {key} must be an integer between {low} and {high}, got {shown(v)}")
        if queries < scales:
            raise ValueError(f"option queries ({queries}) must be at least scales ({scales}): one query per strength")
        if noise not in NOISES:
            raise ValueError(f"option noise must be one of {', '.join(NOISES)}, got {shown(noise)}")
        self.options = {"queries": queries, "scales": scales, "noise": noise, "folds": folds}

    def estimated_seconds(self, facts: CostFacts) -> float | None:
        from privgate.attacks.budget import fit_seconds

        rows = max(facts.rows, 1)
        calibration = min(_CALIBRATION_ROWS, facts.population or rows) * (1 + _CALIBRATION_QUERIES * 9) / rows
        fit = fit_seconds(self.options["folds"], rows // 2, scale=0.2)  # a logistic regression
        return facts.pass_s * (1 + self.options["queries"] + calibration) + fit

    def run(self, ctx: AttackContext) -> AttackResult:
        from privgate.attacks.learned import learned_scorer

        start = time.perf_counter()
        o = self.options
        shape = ctx.x.shape
        x = np.asarray(ctx.x, dtype=np.float32).reshape(len(ctx.x), -1)
        y = np.asarray(ctx.y)
        noise = o["noise"]
        if noise == "auto":
            noise = "flip" if np.isin(x, (0.0, 1.0)).all() else "gaussian"
        rng = np.random.default_rng(np.random.SeedSequence([ctx.seed, 0xB0D]))
        predict = _Labels(ctx.target, shape[1:])
        cal_x, cal_y, where = _calibration_rows(ctx)
        std = cal_x.std(axis=0) if noise == "gaussian" else np.ones(x.shape[1], dtype=np.float32)
        t50, shares = _calibrate(predict, cal_x, np.asarray(cal_y), noise, std, rng)
        factors = SCALE_FACTORS[: o["scales"]] if o["scales"] > 4 else SCALE_FACTORS[1 : 1 + o["scales"]]
        strengths = [min(t50 * f, 0.5) if noise == "flip" else t50 * f for f in factors]
        per = max(1, o["queries"] // len(strengths))
        clean = (predict(x) == y).astype(float)
        profile = [robustness(predict, x, y, per, noise, float(t), 1.0, rng, std=std) for t in strengths]
        features = np.column_stack([clean, *profile])
        n_classes = int(max(int(y.max()) + 1, 2)) if len(y) else 2
        scorer = learned_scorer(
            features,
            y,
            n_classes,
            per_class=None,
            classifier="logistic",
            folds=o["folds"],
            seed=ctx.seed,
            threads=ctx.threads,
        )
        unit = "flip probability" if noise == "flip" else "× feature standard deviation"
        queries = 1 + per * len(strengths)
        return AttackResult(
            attack=self.name,
            threat_model=self.threat_model,
            scores=features.mean(axis=1),  # label-free placeholder: the gate calls `fitted`
            seconds=time.perf_counter() - start,
            options=dict(o),
            fitted=scorer,
            notes=[
                f"label survival at {len(strengths)} strengths ({', '.join(f'{t:.3g}' for t in strengths)} {unit}; "
                f"t50 = {t50:.3g} calibrated on {where}), {per} perturbed queries each, combined by a logistic "
                f"regression cross-fitted over {o['folds']} folds of the calibration split; {queries} label queries "
                "per example"
            ],
            extras={
                "noise": noise,
                "strengths": [float(t) for t in strengths],
                "t50": float(t50),
                "queries": queries * len(x),
                "t50_calibration": shares,
            },
        )


@dataclass(frozen=True)
class _Labels:
    """The target's labels for flattened rows (reshaped to its rows' ``shape`` first)."""

    target: Any
    shape: tuple[int, ...]

    def __call__(self, rows: np.ndarray) -> np.ndarray:
        return self.target.predict(rows.reshape(len(rows), *self.shape))


def _calibration_rows(ctx: AttackContext) -> tuple[np.ndarray, np.ndarray, str]:
    """The flattened rows t50 is calibrated on, their labels, and what they are: the population, else the pool."""
    if ctx.population is not None and len(ctx.population) > 0:
        cal_x, cal_y, where = ctx.population.x, ctx.population.y, "the population (known non-members)"
    else:
        cal_x, cal_y, where = ctx.x, ctx.y, "the pooled audit rows (no membership used)"
    return np.asarray(cal_x, dtype=np.float32).reshape(len(cal_x), -1), np.asarray(cal_y), where


def _calibrate(
    predict: Any, x: np.ndarray, y: np.ndarray, noise: str, std: np.ndarray, rng: np.random.Generator
) -> tuple[float, dict[str, float]]:
    """t₅₀: the grid strength at which the correctly classified calibration rows keep their label closest to half."""
    rows = rng.permutation(len(x))[:_CALIBRATION_ROWS]
    x, y = x[rows], y[rows]
    keep = predict(x) == y
    if keep.any():
        x, y = x[keep], y[keep]
    grid = FLIP_GRID if noise == "flip" else GAUSSIAN_GRID
    shares = {f"{t:g}": float(robustness(predict, x, y, _CALIBRATION_QUERIES, noise, t, 1.0, rng, std=std).mean())
              for t in grid}  # fmt: skip
    best = min(grid, key=lambda t: abs(shares[f"{t:g}"] - 0.5))
    return float(best), shares
