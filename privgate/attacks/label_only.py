"""Label-only attack: robustness of the predicted label under noise.

Choquette-Choo, Tramèr, Carlini & Papernot 2021, arXiv 2007.14321. Needs only ``predict``: each audit example is
queried once clean and ``queries`` times perturbed (``noise``: ``gaussian``, ``flip`` for 0/1 features, or
``auto``), and the score is the fraction of predictions equal to the true label. ``sigma: auto`` picks, without
membership, the strength at which correctly classified examples keep their label in about
:data:`TARGET_ROBUSTNESS` of the queries. Details: ``docs/internals-attacks-lm.md``.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import numpy as np

from privgate.attacks.base import Attack, AttackContext, AttackResult
from privgate.errors import shown

if TYPE_CHECKING:
    from privgate.attacks.budget import CostFacts

NOISES = ("auto", "gaussian", "flip")
GAUSSIAN_GRID = (0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0)
FLIP_GRID = (0.01, 0.02, 0.05, 0.1, 0.15, 0.2, 0.3, 0.4)
#: ``sigma: auto`` aims at this mean robustness of the correctly classified audit examples.
TARGET_ROBUSTNESS = 0.7
_CALIBRATION_ROWS = 400
_CALIBRATION_QUERIES = 8


def _perturb(
    x: np.ndarray, noise: str, strength: float, scale: float, rng: np.random.Generator, std: np.ndarray | None = None
) -> np.ndarray:
    if noise == "flip":
        flips = rng.random(x.shape) < strength
        return np.where(flips, 1.0 - x, x).astype(np.float32)
    if std is not None:  # per-feature standard deviations (over the last axis)
        return (x + rng.normal(0.0, 1.0, size=x.shape) * (strength * std)).astype(np.float32)
    return (x + rng.normal(0.0, strength * scale, size=x.shape)).astype(np.float32)


def robustness(
    predict: Any,
    x: np.ndarray,
    y: np.ndarray,
    queries: int,
    noise: str,
    strength: float,
    scale: float,
    rng: np.random.Generator,
    chunk: int = 16384,
    std: np.ndarray | None = None,
) -> np.ndarray:
    """Fraction of ``queries`` perturbed copies of each row whose predicted label is ``y``.

    Gaussian noise has standard deviation ``strength · scale``, or ``strength · std`` per feature when ``std`` is given.
    """
    hits = np.zeros(len(x))
    per = max(1, chunk // max(len(x), 1))
    done = 0
    while done < queries:
        q = min(per, queries - done)
        batch = np.concatenate([_perturb(x, noise, strength, scale, rng, std) for _ in range(q)])
        pred = np.asarray(predict(batch)).reshape(q, len(x))
        hits += (pred == y[None, :]).sum(axis=0)
        done += q
    return hits / queries


class LabelOnlyAttack(Attack):
    """Label-only membership inference from label robustness (Choquette-Choo et al. 2021, arXiv 2007.14321).

    Options:
        queries: perturbed queries per example (the clean query is added).
        noise: ``auto``, ``gaussian`` or ``flip``.
        sigma: noise strength (Gaussian: in feature standard deviations; flip: probability) or ``auto``.
    """

    name = "label_only"
    threat_model = "label-only"
    numeric_rows = True  # noise or flips added to the rows

    def __init__(self, queries: int = 64, noise: str = "auto", sigma: float | str = "auto", **options: Any) -> None:
        super().__init__(**options)
        if isinstance(queries, bool) or not isinstance(queries, int) or not 1 <= queries <= 10000:
            raise ValueError(f"option queries must be an integer between 1 and 10000, got {shown(queries)}")
        if noise not in NOISES:
            raise ValueError(f"option noise must be one of {', '.join(NOISES)}, got {shown(noise)}")
        if sigma != "auto" and (isinstance(sigma, bool) or not isinstance(sigma, (int, float)) or not sigma > 0):
            raise ValueError(f"option sigma must be a positive number or auto, got {shown(sigma)}")
        if noise == "flip" and sigma != "auto" and sigma >= 1:
            raise ValueError(f"option sigma is a flip probability for noise: flip and must be below 1, got {sigma}")
        self.options = {"queries": queries, "noise": noise, "sigma": sigma if sigma == "auto" else float(sigma)}

    def estimated_seconds(self, facts: CostFacts) -> float | None:
        rows = max(facts.rows, 1)
        calibration = min(_CALIBRATION_ROWS, rows) * _CALIBRATION_QUERIES * len(GAUSSIAN_GRID) / rows
        sigma = 0 if self.options["sigma"] != "auto" else calibration
        return facts.pass_s * (1 + self.options["queries"] + sigma)

    def run(self, ctx: AttackContext) -> AttackResult:
        start = time.perf_counter()
        o = self.options
        x = np.asarray(ctx.x, dtype=np.float32)
        y = np.asarray(ctx.y)
        noise = o["noise"]
        if noise == "auto":
            noise = "flip" if np.isin(x, (0.0, 1.0)).all() else "gaussian"
        scale = float(x.reshape(len(x), -1).std()) or 1.0
        rng = np.random.default_rng(np.random.SeedSequence([ctx.seed, 0x1AB]))
        predict = ctx.target.predict
        clean = (ctx.labels == y).astype(float)
        strength, calibration = o["sigma"], {}
        if strength == "auto":
            strength, calibration = self._calibrate(predict, x, y, clean, noise, scale, rng)
        robust = robustness(predict, x, y, o["queries"], noise, float(strength), scale, rng)
        scores = (clean + o["queries"] * robust) / (o["queries"] + 1)
        what = (
            f"flip probability {strength:g}"
            if noise == "flip"
            else f"Gaussian noise σ = {strength:g} × feature std ({scale:.3g})"
        )
        return AttackResult(
            attack=self.name,
            threat_model=self.threat_model,
            scores=scores,
            seconds=time.perf_counter() - start,
            options=dict(o),
            notes=[
                f"{o['queries']} perturbed label queries per example, {what}"
                + (" (chosen without membership labels)" if calibration else "")
            ],
            extras={
                "noise": noise,
                "sigma": float(strength),
                "queries": (o["queries"] + 1) * len(x),
                "sigma_calibration": calibration,
            },
        )

    def _calibrate(
        self,
        predict: Any,
        x: np.ndarray,
        y: np.ndarray,
        clean: np.ndarray,
        noise: str,
        scale: float,
        rng: np.random.Generator,
    ) -> tuple[float, dict[str, float]]:
        """The grid strength whose mean robustness on correctly classified rows is closest to the target."""
        rows = np.flatnonzero(clean > 0)
        if len(rows) == 0:
            rows = np.arange(len(x))
        rows = rng.permutation(rows)[:_CALIBRATION_ROWS]
        grid = FLIP_GRID if noise == "flip" else GAUSSIAN_GRID
        means = {}
        for s in grid:
            means[f"{s:g}"] = float(
                robustness(predict, x[rows], y[rows], _CALIBRATION_QUERIES, noise, s, scale, rng).mean()
            )
        best = min(grid, key=lambda s: abs(means[f"{s:g}"] - TARGET_ROBUSTNESS))
        return float(best), means
