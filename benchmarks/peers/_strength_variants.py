"""Scoring variants tried for attack strength at 16 reference models (``attack_peers_tables.py --variants``).

Each variant rescores the same target and reference-model outputs the
benchmark's attacks used; none changed a default (docs/attacks.md gives the
numbers). The statistics follow LiRA (Carlini et al. 2022, arXiv 2112.03570)
and RMIA (Zarifzadeh et al. 2024, arXiv 2312.03262):

* ``LiRA shrunk variance``: per-example variances pulled towards the pooled
  one with the weight of 8 models (an inverse-χ² prior);
* ``LiRA per-class variance``: LiRA's fixed variance, one per class;
* ``RMIA temperature 4``;
* ``LiRA + RMIA``: the sum of the two statistics, each standardised by the
  calibration non-members;
* ``LiRA, all classes``: the sum of every class's LiRA statistic;
* ``LiRA, 4 noise queries``: the mean LiRA statistic over x and 4 copies
  with N(0, 0.05²) added to every feature (MERLIN-like queries, Jayaraman et
  al. 2021, arXiv 2005.10881), reference models queried alike;
* ``learned_reference, logistic``: the learned attack's logistic classifier;
* ``white-box gradient norm (LiRA)``: information the black-box peers do not
  have — each row's per-example gradient norm of the loss over all weights
  (Nasr et al. 2019, arXiv 1812.00910), on the target and on the same 16
  reference models, scored by online LiRA (small norm = member);
* ``LiRA + RMIA + gradient``: that statistic added to LiRA and RMIA, each
  standardised by the calibration non-members.
"""

from __future__ import annotations

import numpy as np

from privgate.attacks.lira import lira_scores
from privgate.attacks.reference import logit_confidence


def _shrunk_lira(phi_t: np.ndarray, phi_r: np.ndarray, inside: np.ndarray, prior: float) -> np.ndarray:
    def gauss(use: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        cnt = use.sum(0)
        mu = np.where(use, phi_r, 0.0).sum(0) / np.maximum(cnt, 1)
        sq = np.where(use, (phi_r - mu) ** 2, 0.0).sum(0)
        dof = np.maximum(cnt - 1, 0)
        pooled = sq.sum() / max(int(dof.sum()), 1)
        return mu, np.sqrt((sq + prior * pooled) / (dof + prior))

    (mi, si), (mo, so) = gauss(inside), gauss(~inside)
    return (-0.5 * ((phi_t - mi) / si) ** 2 - np.log(si)) - (-0.5 * ((phi_t - mo) / so) ** 2 - np.log(so))


def _lira(phi_t: np.ndarray, phi_r: np.ndarray, inside: np.ndarray) -> np.ndarray:
    return lira_scores(phi_t, phi_r, inside, online=True, fixed_variance=True)


def _phi_all(lp: np.ndarray) -> np.ndarray:
    lp = np.maximum(lp, -60.0)
    return lp - np.log(np.maximum(-np.expm1(lp), 1e-30))


def _gradient_norms(model, x: np.ndarray, y: np.ndarray, batch: int = 1000) -> np.ndarray:  # noqa: ANN001
    """log ‖∇_θ ℓ(x_i, y_i)‖ per row (``torch.func``: one vmapped gradient per row, a batch at a time)."""
    import torch
    from torch.func import functional_call, grad, vmap

    params = {k: v.detach() for k, v in model.named_parameters()}

    def loss(p: dict, xi: torch.Tensor, yi: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.cross_entropy(functional_call(model, p, (xi[None],)), yi[None])

    per_row = vmap(grad(loss), in_dims=(None, 0, 0))
    xs, ys = torch.as_tensor(x, dtype=torch.float32), torch.as_tensor(y, dtype=torch.long)
    out = []
    for i in range(0, len(x), batch):
        g = per_row(params, xs[i : i + batch], ys[i : i + batch])
        out.append(torch.sqrt(sum((g[k].flatten(1) ** 2).sum(1) for k in g)).numpy())
    return np.log(np.concatenate(out) + 1e-12)


def variants(a, ensembles: dict, cache: str, threads: int) -> dict[str, np.ndarray]:  # noqa: ANN001
    """name -> scores of every audit row, on the benchmark's shared 16 reference models."""
    from privgate.attacks import get_attack
    from privgate.attacks.reference import build_references
    from privgate.attacks.rmia import _mean_over, calibrate_a, offline_px, rmia_scores, tempered_true_class
    from privgate.gate import final_scores
    from privgate.threads import limit_threads

    ctx = a.context(cache, threads, ensembles=ensembles)
    out: dict[str, np.ndarray] = {}
    with limit_threads(threads):
        refs = build_references(ctx, 16, z_samples=2000, min_population=10)
        y, inside = a.y, refs.inside
        t_lp, r_lp = a.target.log_proba(a.x), refs.log_proba
        phi_t, phi_r = logit_confidence(t_lp, y), logit_confidence(r_lp, y)
        out["LiRA shrunk variance"] = _shrunk_lira(phi_t, phi_r, inside, 8.0)
        per_class = np.empty_like(phi_t)
        for c in np.unique(y):
            rows = y == c
            per_class[rows] = _lira(phi_t[rows], phi_r[:, rows], inside[:, rows])
        out["LiRA per-class variance"] = per_class
        p_ref, pz_ref = tempered_true_class(r_lp, y, 4.0), tempered_true_class(refs.z_log_proba, refs.z_y, 4.0)
        off_a, _ = calibrate_a(p_ref, inside, pz_ref)
        lx = np.log(tempered_true_class(t_lp, y, 4.0)) - np.log(offline_px(_mean_over(p_ref, ~inside), off_a))
        pz_t = tempered_true_class(a.target.log_proba(refs.z_x), refs.z_y, 4.0)
        lz = np.log(pz_t) - np.log(offline_px(pz_ref.mean(0), off_a))
        out["RMIA temperature 4"] = rmia_scores(lx, lz, 1.0)
        ref_out = a.calibration & ~a.membership  # standardised by the calibration non-members only

        def std(s: np.ndarray) -> np.ndarray:
            return (s - s[ref_out].mean()) / s[ref_out].std()

        p2, p2r = tempered_true_class(t_lp, y, 2.0), tempered_true_class(r_lp, y, 2.0)
        lira, rmia2 = _lira(phi_t, phi_r, inside), np.log(p2) - np.log(p2r.mean(0))  # LiRA online, RMIA at T = 2
        out["LiRA + RMIA"] = std(lira) + std(rmia2)
        pa, pra = _phi_all(t_lp), _phi_all(r_lp)
        out["LiRA, all classes"] = sum(_lira(pa[:, c], pra[:, :, c], inside) for c in range(pa.shape[1]))
        rng = np.random.default_rng(a.seed)
        noisy = [lira]
        for _ in range(4):
            xq = (a.x + 0.05 * rng.standard_normal(a.x.shape)).astype(a.x.dtype)
            noisy.append(
                _lira(logit_confidence(a.target.log_proba(xq), y), refs._stream(xq, y, logit_confidence), inside)
            )
        out["LiRA, 4 noise queries"] = np.mean(noisy, axis=0)
        ctx.options = {"models": 16, "classifier": "logistic"}
        result = get_attack("learned_reference")(models=16, classifier="logistic").run(ctx)
        out["learned_reference, logistic"] = final_scores(result, a.calibration, a.membership)
        g_t = _gradient_norms(a.target.module, a.x, y)
        g_r = []
        for state in refs.ensemble.models[: refs.k]:
            m = a.recipe.model_factory()
            m.load_state_dict(state)
            g_r.append(_gradient_norms(m.eval(), a.x, y))
        grad_lira = _lira(-g_t, -np.stack(g_r), inside)
        out["white-box gradient norm (LiRA)"] = grad_lira
        out["LiRA + RMIA + gradient"] = std(lira) + std(rmia2) + std(grad_lira)
    return out
