"""RMIA, the relative membership-inference attack (Zarifzadeh, Liu, Nasr & Shokri 2024, arXiv 2312.03262).

score(x) = Pr_z(LR(x, z) > γ), LR(x, z) = [Pr(x | θ) / Pr(x)] / [Pr(z | θ) / Pr(z)], over population samples z
known to be non-members. Offline by default: Pr(x) ≈ ½((1 + a)·Pr_OUT(x) + (1 − a)), ``a`` calibrated without true
membership (Appendix B.2); ``online: true`` uses the IN and OUT models. Ties are broken by the ratio's rank;
augmented queries average the ratio over views (:mod:`privgate.attacks.views`). Derivation:
``docs/internals-attacks-lm.md``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from privgate.attacks.base import Attack, AttackContext, AttackResult
from privgate.attacks.reference import (
    References,
    build_references,
    check_models,
    log_softmax,
    reference_result,
    true_class,
)
from privgate.attacks.views import OPTION, Views, check_option, query_views
from privgate.errors import shown

if TYPE_CHECKING:
    from privgate.attacks.budget import CostFacts

_TINY = 1e-300
#: Grid searched for ``a`` (paper: a ∈ [0, 1]).
A_GRID = np.round(np.linspace(0.0, 1.0, 21), 2)
#: How many reference models play the target when calibrating ``a``.
CALIBRATION_TARGETS = 4


def _mean_over(p: np.ndarray, use: np.ndarray) -> np.ndarray:
    cnt = use.sum(axis=0)
    return np.where(use, p, 0.0).sum(axis=0) / np.maximum(cnt, 1)


def tempered_true_class(log_proba: np.ndarray, y: np.ndarray, temperature: float) -> np.ndarray:
    """p_y of softmax(logits / T), from log-probabilities: softmax(log p / T)_y.

    Logits are log-probabilities up to a per-example constant, so a black-box
    API that returns probabilities suffices. T > 1 undoes the saturation of a
    confident model's probabilities near 1, which otherwise hides the
    difference between members and easy non-members.
    """
    return np.exp(true_class(log_softmax(np.asarray(log_proba, dtype=np.float64) / temperature), y))


def offline_px(p_out: np.ndarray, a: float) -> np.ndarray:
    """The paper's offline approximation Pr(x) ≈ ½((1 + a)·Pr_OUT(x) + (1 − a))."""
    return 0.5 * ((1.0 + a) * p_out + (1.0 - a))


def _auc(pos: np.ndarray, neg: np.ndarray) -> float:
    """Mann–Whitney AUC = P(pos > neg) + ½ P(tie) (used only to calibrate ``a`` on reference models).

    Counted against the sorted negatives (the z-samples, a few thousand), which
    gives the rank-sum statistic exactly — every term is a multiple of ½ — in
    O(n log m) rather than sorting all n + m scores.
    """
    z = np.sort(np.asarray(neg, dtype=float))
    p = np.asarray(pos, dtype=float)
    below = np.searchsorted(z, p, side="left")
    ties = np.searchsorted(z, p, side="right") - below
    return float((below.sum() + 0.5 * ties.sum()) / (len(p) * len(z)))


def calibrate_a(
    p_ref: np.ndarray, inside: np.ndarray, pz_ref: np.ndarray, grid: np.ndarray = A_GRID
) -> tuple[float, dict[float, float]]:
    """Choose ``a`` by simulating the offline attack on reference models (paper, Appendix B.2).

    Args:
        p_ref: ``[K, n]`` reference probabilities of the true label on the audit rows.
        inside: ``[K, n]`` training masks of the reference models.
        pz_ref: ``[K, m]`` reference probabilities on population rows (never trained on).

    Returns:
        The best ``a`` and the mean simulated AUC of every grid value.
    """
    k = len(p_ref)
    targets = range(min(CALIBRATION_TARGETS, k - k % 2))
    aucs = {float(a): 0.0 for a in grid}
    for j in targets:
        others = np.arange(k) != j
        members = inside[j]
        # simulated members: rows j trained on (its pair partner is always OUT for them)
        use_x = ~inside[others][:, members]
        px_out = _mean_over(p_ref[others][:, members], use_x)
        pz_out = pz_ref[others].mean(axis=0)
        lx, lz = np.log(np.clip(p_ref[j, members], _TINY, None)), np.log(np.clip(pz_ref[j], _TINY, None))
        for a in grid:
            sx = lx - np.log(offline_px(px_out, a))
            sz = lz - np.log(offline_px(pz_out, a))
            aucs[float(a)] += _auc(sx, sz) / len(targets)
    best = max(aucs, key=lambda a: (aucs[a], -a))
    return best, aucs


def view_ratios(
    ctx: AttackContext,
    refs: References,
    views: Views,
    p_true: Callable[[np.ndarray, np.ndarray], np.ndarray],
    a: float | str,
    online: bool,
) -> tuple[np.ndarray, np.ndarray, float, dict[float, float]]:
    """log of the view-averaged Pr(·|θ)/Pr(·) of the audit rows and of the z-samples, ``a``, and its calibration AUCs.

    One view at a time: its ``[K, n]`` and ``[K, m]`` reference probabilities
    are read, and the ratios of every candidate ``a`` (the grid when ``auto``)
    are added up — for the target, and, when calibrating, for the reference
    models that play the target as in :func:`calibrate_a` — so nothing of
    size views × models × rows is held.
    """
    assert refs.z_x is not None and refs.z_y is not None
    grid = [float(g) for g in A_GRID] if a == "auto" else [float(a)]
    k = refs.k
    pseudo = list(range(min(CALIBRATION_TARGETS, k - k % 2))) if a == "auto" else []
    members = [refs.inside[j] for j in pseudo]
    rx = np.zeros((len(grid), len(ctx.y)))
    rz = np.zeros((len(grid), len(refs.z_y)))
    cx = [np.zeros((len(grid), int(m.sum()))) for m in members]
    cz = [np.zeros((len(grid), len(refs.z_y))) for _ in pseudo]
    for view in views:
        q = views.query(view)  # made on the models' device; LiRA's outputs on the audit rows are shared
        p_ref, pz_ref = refs.per_row(p_true, view=q), refs.z_per_row(p_true, view=q)
        p_t = views.target_rows(ctx.target, view, ctx.x, ctx.y, p_true)
        pz_t = views.target_rows(ctx.target, view, refs.z_x, refs.z_y, p_true)
        p_out, pz_mean = _mean_over(p_ref, ~refs.inside), pz_ref.mean(axis=0)
        for g, av in enumerate(grid):
            px = p_ref.mean(axis=0) if online else offline_px(p_out, av)
            rx[g] += p_t / np.clip(px, _TINY, None)
            rz[g] += pz_t / np.clip(offline_px(pz_mean, av), _TINY, None)
        for i, j in enumerate(pseudo):
            others, m = np.arange(k) != j, members[i]
            px_out = _mean_over(p_ref[others][:, m], ~refs.inside[others][:, m])
            pz_out = pz_ref[others].mean(axis=0)
            for g, av in enumerate(grid):
                cx[i][g] += p_ref[j, m] / np.clip(offline_px(px_out, av), _TINY, None)
                cz[i][g] += pz_ref[j] / np.clip(offline_px(pz_out, av), _TINY, None)
    aucs: dict[float, float] = {}
    if pseudo:
        logs = [(np.log(np.clip(x, _TINY, None)), np.log(np.clip(z, _TINY, None))) for x, z in zip(cx, cz)]
        aucs = {av: sum(_auc(lx[g], lz[g]) for lx, lz in logs) / len(pseudo) for g, av in enumerate(grid)}
    best = max(aucs, key=lambda v: (aucs[v], -v)) if aucs else grid[0]
    g = grid.index(best)
    v = len(views)
    return np.log(np.clip(rx[g] / v, _TINY, None)), np.log(np.clip(rz[g] / v, _TINY, None)), best, aucs


def rmia_scores(log_ratio_x: np.ndarray, log_ratio_z: np.ndarray, gamma: float) -> np.ndarray:
    """score(x) = fraction of z with LR(x, z) > γ, ties broken by the rank of LR(x).

    ``log_ratio_*`` are log(Pr(· | θ) / Pr(·)). The tie-break adds less than one
    step of the z-fraction, so the order between different fractions is kept.
    """
    from scipy.stats import rankdata

    lz = np.sort(np.asarray(log_ratio_z, dtype=float))
    frac = np.searchsorted(lz, log_ratio_x - np.log(gamma), side="left") / len(lz)
    tie = rankdata(log_ratio_x) / (len(log_ratio_x) + 1)
    return frac + tie / (len(lz) + 1)


def check_rmia_options(a: Any, gamma: Any) -> None:
    """Validate RMIA's two parameters: the offline approximation ``a`` in [0, 1] (or ``auto``) and γ ≥ 1."""
    if a != "auto" and (isinstance(a, bool) or not isinstance(a, (int, float)) or not 0.0 <= float(a) <= 1.0):
        raise ValueError(f"option a must be a number in [0, 1] or auto, got {shown(a)}")
    if isinstance(gamma, bool) or not isinstance(gamma, (int, float)) or not gamma >= 1.0:
        raise ValueError(f"option gamma must be a number ≥ 1, got {shown(gamma)}")


class RMIAAttack(Attack):
    """Relative membership-inference attack (Zarifzadeh et al. 2024, arXiv 2312.03262).

    Options:
        models: reference models (even, ≥ 2; the paper's attack is strong with few).
        a: the offline approximation parameter in [0, 1], or ``auto`` (calibrated).
        gamma: the pairwise likelihood-ratio threshold γ ≥ 1.
        z_samples: most population rows used as z.
        min_population: fewest population rows to run at all.
        online: use IN and OUT models for Pr(x) (no approximation).
        temperature: T of the softmax behind Pr(x | θ) (1 = the model's own probabilities).
        augmented_queries: average the likelihood ratio over fixed augmentations of each
            row when the recipe crops or flips images: 2, 18, 50 or false (as LiRA's).
    """

    name = "rmia"
    threat_model = "black-box"
    needs_recipe = True

    def __init__(
        self,
        models: int = 4,
        a: float | str = "auto",
        gamma: float = 1.0,
        z_samples: int = 2000,
        min_population: int = 100,
        online: bool = False,
        temperature: float = 2.0,
        augmented_queries: bool | int = True,
        **options: Any,
    ) -> None:
        super().__init__(**options)
        check_models(models, 2)
        check_rmia_options(a, gamma)
        for opt, v, lo in (("z_samples", z_samples, 10), ("min_population", min_population, 10)):
            if isinstance(v, bool) or not isinstance(v, int) or v < lo:
                raise ValueError(f"option {opt} must be an integer ≥ {lo}, got {shown(v)}")
        if not isinstance(online, bool):
            raise TypeError("option online must be true or false")
        if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not temperature > 0:
            raise ValueError(f"option temperature must be a positive number, got {shown(temperature)}")
        self.options = {
            "models": models,
            "a": a if a == "auto" else float(a),
            "gamma": float(gamma),
            "z_samples": z_samples,
            "min_population": min_population,
            "online": online,
            "temperature": float(temperature),
        }
        if check_option(augmented_queries) is not True:  # listed only when set: reports without it stay comparable
            self.options[OPTION] = augmented_queries

    def estimated_seconds(self, facts: CostFacts) -> float | None:
        from privgate.attacks.budget import reference_seconds

        return reference_seconds(facts, self.options["models"])

    def run(self, ctx: AttackContext) -> AttackResult:
        start = time.perf_counter()
        o = self.options
        refs = build_references(
            ctx, o["models"], z_samples=o["z_samples"], min_population=o["min_population"], attack=self.name
        )
        assert refs.z_x is not None and refs.z_y is not None
        t = o["temperature"]

        def p_true(log_proba: np.ndarray, y: np.ndarray) -> np.ndarray:
            return tempered_true_class(log_proba, y, t)

        views, notes = query_views(ctx.recipe, ctx.x, o.get(OPTION, True))
        if views is not None:
            lx, lz, a, grid = view_ratios(ctx, refs, views, p_true, o["a"], o["online"])
        else:
            p_ref = refs.per_row(p_true)  # [K, n], streamed: the models' [n, classes] outputs are never held
            pz_ref = refs.z_per_row(p_true)  # [K, m]
            if o["a"] == "auto":
                a, grid = calibrate_a(p_ref, refs.inside, pz_ref)
            else:
                a, grid = float(o["a"]), {}
            if o["online"]:
                px = p_ref.mean(axis=0)
            else:
                px = offline_px(_mean_over(p_ref, ~refs.inside), a)
            pz = offline_px(pz_ref.mean(axis=0), a)
            p_target_x = ctx.per_row(p_true)
            p_target_z = tempered_true_class(ctx.target.log_proba(refs.z_x), refs.z_y, t)
            lx = np.log(np.clip(p_target_x, _TINY, None)) - np.log(np.clip(px, _TINY, None))
            lz = np.log(np.clip(p_target_z, _TINY, None)) - np.log(np.clip(pz, _TINY, None))
        scores = rmia_scores(lx, lz, o["gamma"])
        how = (
            "online (IN and OUT models)"
            if o["online"]
            else f"offline, a = {a:g}" + (" (calibrated on the reference models)" if grid else "")
        )
        return reference_result(
            self,
            refs,
            scores,
            start,
            o,
            [f"RMIA {how}, γ = {o['gamma']:g}, temperature {t:g}, {len(lz)} population z-samples"]
            + (
                [
                    f"the target and every reference model queried on {views.describe()} (the z-samples too), "
                    "the likelihood ratio Pr(x | θ)/Pr(x) averaged over them"
                ]
                if views is not None
                else []
            )
            + notes,
            reference_models=o["models"],
            a=a,
            a_calibration_auc={str(k): round(v, 4) for k, v in grid.items()},
            z_samples=len(lz),
            **({"augmented_queries": views.names} if views is not None else {}),
        )
