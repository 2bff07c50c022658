"""Reference-model attacks on a federation's nodes: RMIA and LiRA with reference models trained like a node.

The attacker's **population** (rows no node trains on, not the audit's non-members) trains K reference models
like a node that does not federate (the recipe, ``local_epochs × rounds`` epochs, paired halves as in Carlini
et al. 2022, arXiv 2112.03570), so both attacks run **offline**: RMIA (Zarifzadeh, Liu, Nasr & Shokri 2024,
arXiv 2312.03262; :func:`privgate.attacks.rmia.calibrate_a`) and LiRA's fixed-variance test
(:func:`privgate.attacks.lira.lira_scores`). They mimic local training, not the averaging: against federated
models an attacker's best guess, not a replication (Gao 2024, §6.3). Details: ``docs/internals-dp-audits.md``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from privgate.attacks.lira import lira_scores
from privgate.attacks.reference import logit_confidence
from privgate.attacks.rmia import _TINY, calibrate_a, offline_px, rmia_scores, tempered_true_class
from privgate.errors import PrivgateError
from privgate.options import RunOptions
from privgate.recipe import Recipe

#: Fewest population rows to train reference models on and draw z-samples from.
MIN_POPULATION = 40
TEMPERATURE = 2.0
GAMMA = 1.0


@dataclass
class ReferenceScorer:
    """Scores rows for RMIA and LiRA from K reference models' outputs on every row (and on the z rows).

    Attributes:
        ref_log_proba: ``[K, n, C]`` reference log-probabilities on every audited row.
        z: indices (into the audited rows) of the z-samples.
        a: RMIA's offline parameter, calibrated on the reference models.
        models: K.
        notes: how the reference models were obtained.
    """

    ref_log_proba: np.ndarray
    y: np.ndarray
    z: np.ndarray
    a: float
    models: int
    notes: list[str]

    def __call__(self, attack: str, log_proba: np.ndarray, y: np.ndarray) -> np.ndarray:
        """One attacker model's scores on every row (``log_proba``: its ``[n, C]`` log-probabilities)."""
        if attack == "lira":
            phi_ref = logit_confidence(self.ref_log_proba, y)
            inside = np.zeros(phi_ref.shape, dtype=bool)
            return lira_scores(logit_confidence(log_proba, y), phi_ref, inside, online=False, fixed_variance=True)
        if attack == "rmia":
            p_ref = tempered_true_class(self.ref_log_proba, y, TEMPERATURE).mean(axis=0)
            px = offline_px(p_ref, self.a)
            p_t = tempered_true_class(log_proba, y, TEMPERATURE)
            ratio = np.log(np.clip(p_t, _TINY, None)) - np.log(np.clip(px, _TINY, None))
            return rmia_scores(ratio, ratio[self.z], GAMMA)
        raise ValueError(f"unknown reference attack {attack!r}")


def reference_scorer(
    recipe: Recipe,
    x: np.ndarray,
    y: np.ndarray,
    population: np.ndarray,
    *,
    epochs: int,
    models: int,
    seed: int,
    run: RunOptions,
) -> ReferenceScorer:
    """Train K reference models on the population (module docstring) and return the scorer.

    Args:
        recipe: the nodes' recipe.
        x, y: every audited row (the scorer scores these).
        population: indices of the attacker's population rows among them.
        epochs: a node's total epochs (local epochs × rounds).
        models: K, even.
        seed: the run's seed.
        run: the run's settings (cache, threads, engine).
    """
    from privgate.executors import executor_for
    from privgate.training.engine import train_ensemble
    from privgate.training.plan import model_seeds, paired_masks
    from privgate.training.trained import TrainSettings

    if len(population) < MIN_POPULATION:
        raise PrivgateError(
            f"the reference attacks need at least {MIN_POPULATION} population rows (known non-members that no node "
            f"trains on); the split left {len(population)} (raise --population)."
        )
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), 0x2EF]))
    order = rng.permutation(np.asarray(population))
    n_z = max(len(order) // 3, 10)
    z, train = np.sort(order[:n_z]), np.sort(order[n_z:])
    like_node = dataclasses.replace(recipe, epochs=int(epochs))
    masks = paired_masks(len(train), models, seed)
    settings = TrainSettings(
        cache_dir=run.cache, cache_key=run.cache_key, threads=run.threads, engine=run.engine,
        executor=executor_for(run), models_per_task=run.models_per_task,
    )  # fmt: skip
    ens = train_ensemble(like_node, x[train], y[train], masks, model_seeds(seed, models), settings)
    from privgate import outputs

    raw = ens.logits(x)
    log_proba = np.stack([outputs.log_proba(r, outputs.kind_of(r) or outputs.LOGITS) for r in raw])
    p_train = tempered_true_class(log_proba[:, train], y[train], TEMPERATURE)
    p_z = tempered_true_class(log_proba[:, z], y[z], TEMPERATURE)
    a, _ = calibrate_a(p_train, masks, p_z)
    how = "from the cache" if ens.trained == 0 else f"trained {ens.mode} ({ens.kernel}, {ens.seconds:.1f} s)"
    notes = (
        [
            f"{models} reference models like a node ({epochs} epochs on {int(masks[0].sum())} population rows each) "
            f"{how}; RMIA offline a = {a:g}, {len(z)} z-samples; LiRA offline, fixed variance"
        ]
        + list(ens.notes)
        + list(ens.warnings)
    )
    return ReferenceScorer(log_proba, y, z, float(a), models, notes)


__all__ = ["MIN_POPULATION", "ReferenceScorer", "reference_scorer"]
