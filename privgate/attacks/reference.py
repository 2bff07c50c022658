"""Reference models for the attacks that compare the target with models trained like it.

One plan, shared by the shadow-model attack, LiRA and RMIA so that the cache
trains each model once per audit:

* **Training pool = the audit examples** (members and non-members pooled, their
  membership unknown to privgate's attacks). Reference models 2p and 2p+1 train
  on complementary random halves of the pool (:func:`privgate.training.plan.paired_masks`),
  so every audit example is IN for half of the models and OUT for the other
  half, and each model trains on about as many rows as the target's training
  set. This is the experimental design of Carlini et al. (2022, arXiv
  2112.03570): *online* attacks use the IN and OUT models of each example,
  *offline* attacks only its OUT models. Which models hold which example is
  drawn from the seed, never from the true membership.
* **Population = known non-members of everything.** Population rows are never
  trained on, by the target or by a reference model; RMIA uses them as its
  z-samples and to calibrate its ``a`` parameter.

The target must be reproducible by the recipe: when the recipe's model does not
have the target's parameter shapes, or outputs another number of classes, the
comparison is meaningless and the audit stops with a :class:`RecipeError`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from privgate.attacks.base import AttackContext, AttackResult, AttackSkipped
from privgate.errors import RecipeError, shown
from privgate.inputs import outputs

if TYPE_CHECKING:  # torch and the training engine load when an attack runs, not when policies are validated
    from privgate.training.engine import Ensemble


@dataclass
class References:
    """Outputs of K reference models on the audit examples (and on population z-samples).

    Attributes:
        log_proba: ``[K, n, classes]`` log class probabilities on the audit examples.
        inside: ``[K, n]`` whether audit example i was in model k's training set.
        z_x, z_y: population rows (never trained on), when requested.
        z_log_proba: ``[K, m, classes]`` reference log-probabilities on them.
        ensemble: the trained models and what they cost.
    """

    log_proba: np.ndarray
    inside: np.ndarray
    ensemble: Ensemble
    z_x: np.ndarray | None = None
    z_y: np.ndarray | None = None
    z_log_proba: np.ndarray | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def k(self) -> int:
        return len(self.inside)


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """:func:`privgate.inputs.target.log_softmax`, imported when first used (the target module loads torch)."""
    from privgate.inputs.target import log_softmax as _log_softmax

    return _log_softmax(logits)


def true_class(values: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The true class's entry: ``[n, C] -> [n]`` and ``[K, n, C] -> [K, n]``."""
    rows = np.arange(len(y))
    return values[rows, y] if values.ndim == 2 else values[:, rows, y]


def logit_confidence(log_proba: np.ndarray, y: np.ndarray) -> np.ndarray:
    """LiRA's statistic φ = log(p_y / (1 − p_y)) (Carlini et al. 2022, arXiv 2112.03570, §IV-C).

    From log-probabilities: φ = log p_y − log Σ_{k≠y} p_k, the second term a
    log-sum-exp over the other classes, so a confident p_y that would round to 1
    keeps its value. Works on ``[n, C]`` and ``[K, n, C]``.
    """
    lp = np.asarray(log_proba, dtype=np.float64)
    others = lp.copy()
    rows = np.arange(len(y))
    if lp.ndim == 2:
        others[rows, y] = -np.inf
    else:
        others[:, rows, y] = -np.inf
    m = others.max(axis=-1)
    rest = m + np.log(np.exp(others - m[..., None]).sum(axis=-1))
    return true_class(lp, y) - rest


def check_models(k: int, minimum: int = 2, name: str = "models") -> int:
    """Validate a reference-model budget: an even integer (models come in complementary pairs)."""
    if isinstance(k, bool) or not isinstance(k, int):
        raise TypeError(f"option {name} must be an integer, got {shown(k)}")
    if k < minimum:
        raise ValueError(f"option {name} must be at least {minimum}, got {k}")
    if k > 1024:
        raise ValueError(f"option {name} must be at most 1024, got {k}")
    if k % 2:
        raise ValueError(
            f"option {name} must be even (reference models train on complementary halves in pairs), got {k}"
        )
    return k


def _check_recipe_matches(ctx: AttackContext) -> None:
    """The recipe's model must have the target's parameters (when the target exposes them)."""
    import torch

    recipe = ctx.recipe
    assert recipe is not None
    net = recipe.build()
    model = ctx.target.model
    target_state = model.state_dict() if hasattr(model, "state_dict") and callable(model.state_dict) else None
    if not isinstance(target_state, dict) or not target_state:
        return
    mine = {k: tuple(v.shape) for k, v in net.state_dict().items()}
    theirs = {k: tuple(v.shape) for k, v in target_state.items() if isinstance(v, torch.Tensor)}
    if mine == theirs:
        return
    missing = sorted(set(theirs) - set(mine))
    extra = sorted(set(mine) - set(theirs))
    shapes = [f"{k} {mine[k]} vs {theirs[k]}" for k in sorted(set(mine) & set(theirs)) if mine[k] != theirs[k]]
    detail = "; ".join(
        part
        for part in (
            f"target parameters the recipe's model lacks: {', '.join(missing[:3])}" if missing else "",
            f"recipe parameters the target lacks: {', '.join(extra[:3])}" if extra else "",
            f"different shapes: {', '.join(shapes[:3])}" if shapes else "",
        )
        if part
    )
    raise RecipeError(
        f"recipe '{recipe.name}': its model does not match the target's parameters ({detail}); "
        "reference models must be trained like the target."
    )


def build_references(
    ctx: AttackContext, k: int, *, z_samples: int = 0, min_population: int = 0, attack: str = ""
) -> References:
    """Train (or load) ``k`` reference models on the audit pool and score the audit examples.

    Args:
        ctx: the attack context (must carry a recipe; the gate checks it).
        k: number of reference models.
        z_samples: how many population rows to return as z-samples (0 = none).
        min_population: skip the attack when the population has fewer rows.
        attack: the calling attack's name, for messages.

    Raises:
        AttackSkipped: too little population data for the request.
        RecipeError: the recipe does not build, train or match the target.
    """
    if ctx.recipe is None:  # the gate skips needs_recipe attacks first; keep the contract explicit
        raise AttackSkipped(f"'{attack}' trains reference models and needs a recipe (--recipe module:attr)")
    if min_population:
        have = 0 if ctx.population is None else len(ctx.population)
        if have < min_population:
            raise AttackSkipped(
                f"'{attack}' needs at least {min_population} population rows (known non-members, never trained on) "
                f"to compare its {k} reference models against; the audit has {have or 'none'} (give --population)"
            )
    from privgate.inputs.sanity import recipe_warning
    from privgate.training.engine import train_ensemble
    from privgate.training.plan import model_seeds, paired_masks

    _check_recipe_matches(ctx)
    n = len(ctx.y)
    masks = paired_masks(n, k, ctx.seed)
    seeds = model_seeds(ctx.seed, k)
    ens = train_ensemble(
        ctx.recipe, ctx.x, ctx.y, masks, seeds, cache_dir=ctx.run.cache, threads=ctx.threads, engine=ctx.run.engine
    )
    n_classes = ctx.log_proba.shape[1]
    log_proba = _reference_log_proba(ctx, ens.logits(ctx.x), n_classes)
    refs = References(log_proba=log_proba, inside=masks, ensemble=ens, notes=list(ens.notes) + list(ens.warnings))
    mismatch = recipe_warning(ctx.target, ctx.recipe)
    if mismatch:
        refs.notes.append(mismatch)
    if z_samples and ctx.population is not None:
        pop = ctx.population
        rng = np.random.default_rng(np.random.SeedSequence([ctx.seed, 0x2A]))
        take = np.sort(rng.permutation(len(pop))[: min(z_samples, len(pop))])
        refs.z_x, refs.z_y = pop.x[take], pop.y[take]
        refs.z_log_proba = _reference_log_proba(ctx, ens.logits(refs.z_x), n_classes)
    return refs


def _reference_log_proba(ctx: AttackContext, raw: np.ndarray, n_classes: int) -> np.ndarray:
    """``[K, n, classes]`` log-probabilities of the reference models, their outputs read like the target's.

    A reference model is "like the target" only when its outputs are of the
    same kind (:mod:`privgate.inputs.outputs`: logits, one logit, probabilities) and
    count the same classes.
    """
    assert ctx.recipe is not None
    kind = ctx.target.outputs if ctx.target.module is not None and ctx.target.outputs else None
    kinds = {outputs.kind_of(r) for r in raw}
    if kind is None:  # a scikit-learn target: the recipe's torch models are read on their own terms
        kind = next(iter(kinds)) if len(kinds) == 1 and None not in kinds else outputs.LOGITS
    elif kinds != {kind}:
        raise RecipeError(
            f"recipe '{ctx.recipe.name}': its models output {', '.join(sorted(str(k) for k in kinds))} but "
            f"the target outputs "
            f"{kind}; reference models must be trained like the target."
        )
    log_proba = np.stack([outputs.log_proba(r, kind) for r in raw])
    if log_proba.shape[-1] != n_classes:
        raise RecipeError(
            f"recipe '{ctx.recipe.name}': its model outputs {log_proba.shape[-1]} classes but the target "
            f"outputs {n_classes}; "
            "reference models must be trained like the target."
        )
    return log_proba


def reference_result(
    attack: Any,
    refs: References,
    scores: np.ndarray,
    start: float,
    options: dict[str, Any],
    notes: list[str],
    **extras: Any,
) -> AttackResult:
    """The AttackResult of a reference-model attack: its scores plus what the reference models cost."""
    return AttackResult(
        attack=attack.name,
        threat_model=attack.threat_model,
        scores=scores,
        seconds=time.perf_counter() - start,
        models_trained=refs.ensemble.trained,
        options=dict(options),
        notes=cost_notes(refs) + notes,
        extras={
            "models_from_cache": refs.ensemble.cached,
            "engine": refs.ensemble.mode,
            "kernel": refs.ensemble.kernel,
            "threads": refs.ensemble.threads,
            "cache_warnings": list(refs.ensemble.warnings),
            **extras,
        },
    )


def cost_notes(refs: References) -> list[str]:
    """One sentence on how the reference models were obtained."""
    ens = refs.ensemble
    if ens.trained == 0:
        how = f"all {len(ens)} reference models came from the cache"
    else:
        kernel = {
            "mlp": "MLP kernel",
            "mlp-dp": "MLP kernel, DP-SGD",
            "vmap": "torch.func/vmap",
            "loop": "recipe.train",
        }.get(ens.kernel, ens.kernel)
        how = (
            f"trained {ens.trained} reference model(s) {ens.mode} ({kernel}, {ens.threads} "
            f"thread{'s' if ens.threads != 1 else ''}"
            f", {ens.seconds:.1f} s)" + (f", {ens.cached} from the cache" if ens.cached else "")
        )
    return [how] + refs.notes
