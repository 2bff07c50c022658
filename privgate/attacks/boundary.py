"""Label-only attack: the distance to the decision boundary, found by bisection along random directions.

Choquette-Choo, Tramèr, Carlini & Papernot 2021 (arXiv 2007.14321) and Li &
Zhang 2021 (arXiv 2007.15528) show that a model's training examples lie
farther from its decision boundary than unseen examples, and that an attacker
who sees only the predicted label can measure that distance with queries. Li &
Zhang estimate it with an adversarial search (HopSkipJump); the robustness
attack of Choquette-Choo et al. (:mod:`privgate.attacks.label_only`) counts how
often the label survives noise of one strength, a binomial fraction that is
coarse with few queries and saturates at 0 or 1 for rows far from that
strength. This attack measures the distance itself:

* for each audit row and each of ``directions`` random directions, the smallest
  perturbation size ``t`` at which the predicted label stops being the true
  label is found by bisection on ``[0, t_max]`` (``steps`` label queries; one
  more query at ``t_max`` decides whether the label flips at all — if not, the
  distance is ``t_max``, a censored value);
* Gaussian directions ``t · ε``, ``ε ~ N(0, diag(s²))`` with ``s`` the per-feature
  standard deviations, for real-valued features; for 0/1 features (``noise:
  flip``) a random order of the features, ``t`` the fraction of them flipped in
  that order (Choquette-Choo et al.'s choice for binary data);
* the score is the mean distance over the directions, 0 for a row the model
  already misclassifies (Li & Zhang's rule: misclassified rows are non-members).

``t_max`` and ``s`` are calibrated on data known not to be members — the
population when the audit has one, else the pooled audit rows, with no
membership — as the smallest size on a grid at which :data:`FLIP_SHARE` of
the correctly classified calibration rows lose their label, so the bisection's
resolution ``t_max / 2^steps`` is spent where rows differ. With
``class_dependent`` the gate standardises the scores per class on the
calibration non-members (distances to the boundary differ by class). Every
query is one row sent to the served model and counted there.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from privgate.attacks.base import Attack, AttackContext, AttackResult
from privgate.errors import shown

NOISES = ("auto", "gaussian", "flip")
#: Candidate ``t_max`` (Gaussian: in feature standard deviations; flip: the fraction of features).
GAUSSIAN_GRID = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0)
FLIP_GRID = (0.02, 0.05, 0.1, 0.2, 0.35, 0.5, 0.75, 1.0)
#: ``t_max`` is the smallest grid size at which this share of correctly classified calibration rows flip.
FLIP_SHARE = 0.9
_CALIBRATION_ROWS = 300
_CALIBRATION_DIRECTIONS = 2


class _Directions:
    """Perturbations ``x(t)`` along one random direction per row (Gaussian, or a random flip order)."""

    def __init__(self, x: np.ndarray, noise: str, std: np.ndarray, rng: np.random.Generator) -> None:
        self.x, self.noise = x, noise
        if noise == "flip":
            self.rank = rng.random(x.shape).argsort(axis=1).argsort(axis=1)
        else:
            self.eps = rng.normal(size=x.shape) * std[None, :]

    def at(self, t: np.ndarray) -> np.ndarray:
        if self.noise == "flip":
            flip = self.rank < np.round(t * self.x.shape[1])[:, None]
            return np.where(flip, 1.0 - self.x, self.x).astype(np.float32)
        return (self.x + t[:, None] * self.eps).astype(np.float32)


def boundary_distance(
    predict: Any,
    x: np.ndarray,
    y: np.ndarray,
    noise: str,
    std: np.ndarray,
    t_max: float,
    steps: int,
    rng: np.random.Generator,
) -> np.ndarray:
    """Per row, the smallest ``t ∈ [0, t_max]`` at which the label along one random direction is no longer ``y``.

    ``steps + 1`` label queries per row: one at ``t_max`` (rows that keep their
    label there get ``t_max``), then ``steps`` bisection steps on the others.
    """
    d = _Directions(x, noise, std, rng)
    flips = np.asarray(predict(d.at(np.full(len(x), t_max)))) != y
    lo, hi = np.zeros(len(x)), np.full(len(x), t_max)
    for _ in range(steps):
        mid = (lo + hi) / 2
        changed = np.asarray(predict(d.at(mid))) != y
        hi = np.where(flips & changed, mid, hi)
        lo = np.where(flips & ~changed, mid, lo)
    return np.where(flips, (lo + hi) / 2, t_max)


class BoundaryAttack(Attack):
    """Label-only membership inference from the distance to the decision boundary.

    Choquette-Choo et al. 2021 (arXiv 2007.14321); Li & Zhang 2021 (arXiv 2007.15528).

    Options:
        queries: label queries per example (besides the clean one), split into ``directions``
            bisections of ``queries / directions − 1`` steps.
        directions: random directions per example.
        noise: ``auto`` (``flip`` when every feature is 0/1, else ``gaussian``), ``gaussian`` or ``flip``.
        class_dependent: standardise the scores per class on the calibration non-members.
    """

    name = "boundary"
    threat_model = "label-only"

    def __init__(
        self, queries: int = 64, directions: int = 8, noise: str = "auto", class_dependent: bool = True, **options: Any
    ) -> None:
        super().__init__(**options)
        for key, v, low in (("queries", queries, 2), ("directions", directions, 1)):
            if isinstance(v, bool) or not isinstance(v, int) or not low <= v <= 10000:
                raise ValueError(f"option {key} must be an integer between {low} and 10000, got {shown(v)}")
        if queries < 2 * directions:
            raise ValueError(
                f"option queries ({queries}) must be at least twice directions ({directions}): each direction "
                "needs a query at the largest size and at least one bisection step"
            )
        if noise not in NOISES:
            raise ValueError(f"option noise must be one of {', '.join(NOISES)}, got {shown(noise)}")
        if not isinstance(class_dependent, bool):
            raise ValueError(f"option class_dependent must be true or false, got {shown(class_dependent)}")
        self.options = {"queries": queries, "directions": directions, "noise": noise, "class_dependent": class_dependent}

    def run(self, ctx: AttackContext) -> AttackResult:
        start = time.perf_counter()
        o = self.options
        shape = ctx.x.shape
        x = np.asarray(ctx.x, dtype=np.float32).reshape(len(ctx.x), -1)
        y = np.asarray(ctx.y)
        noise = o["noise"]
        if noise == "auto":
            noise = "flip" if np.isin(x, (0.0, 1.0)).all() else "gaussian"
        rng = np.random.default_rng(np.random.SeedSequence([ctx.seed, 0xB0D]))

        def predict(rows: np.ndarray) -> np.ndarray:
            return ctx.target.predict(rows.reshape(len(rows), *shape[1:]))

        if ctx.population is not None and len(ctx.population) > 0:
            cal_x, cal_y, where = ctx.population.x, ctx.population.y, "the population (known non-members)"
        else:
            cal_x, cal_y, where = ctx.x, ctx.y, "the pooled audit rows (no membership used)"
        cal_x = np.asarray(cal_x, dtype=np.float32).reshape(len(cal_x), -1)
        std = cal_x.std(axis=0) if noise == "gaussian" else np.ones(x.shape[1])
        t_max, shares = self._calibrate(predict, cal_x, np.asarray(cal_y), noise, std, rng)
        steps = o["queries"] // o["directions"] - 1
        clean = predict(x) == y
        distances = np.stack(
            [boundary_distance(predict, x, y, noise, std, t_max, steps, rng) for _ in range(o["directions"])]
        )
        scores = np.where(clean, distances.mean(axis=0) / t_max, 0.0)
        unit = "of the features flipped" if noise == "flip" else "feature standard deviations"
        return AttackResult(
            attack=self.name,
            threat_model=self.threat_model,
            scores=scores,
            seconds=time.perf_counter() - start,
            groups=y if o["class_dependent"] else None,
            options=dict(o),
            notes=[
                f"distance to the decision boundary along {o['directions']} random {noise} directions per example, "
                f"bisection in {steps} steps up to {t_max:g} {unit} (calibrated on {where}); "
                f"{1 + o['directions'] * (steps + 1)} label queries per example"
            ],
            extras={
                "noise": noise,
                "t_max": float(t_max),
                "steps": steps,
                "queries": (1 + o["directions"] * (steps + 1)) * len(x),
                "t_max_calibration": shares,
            },
        )

    @staticmethod
    def _calibrate(
        predict: Any, x: np.ndarray, y: np.ndarray, noise: str, std: np.ndarray, rng: np.random.Generator
    ) -> tuple[float, dict[str, float]]:
        """The smallest grid size at which :data:`FLIP_SHARE` of correctly classified rows lose their label."""
        rows = rng.permutation(len(x))[:_CALIBRATION_ROWS]
        x, y = x[rows], y[rows]
        keep = predict(x) == y
        if keep.any():
            x, y = x[keep], y[keep]
        grid = FLIP_GRID if noise == "flip" else GAUSSIAN_GRID
        shares: dict[str, float] = {}
        dirs = [_Directions(x, noise, std, rng) for _ in range(_CALIBRATION_DIRECTIONS)]
        for t in grid:
            size = np.full(len(x), t)
            shares[f"{t:g}"] = float(np.mean([np.mean(predict(d.at(size)) != y) for d in dirs]))
            if shares[f"{t:g}"] >= FLIP_SHARE:
                return float(t), shares
        return float(grid[-1]), shares


ATTACKS: tuple[type[Attack], ...] = (BoundaryAttack,)
