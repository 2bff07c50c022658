"""Reference models for the attacks that compare the target with models trained like it.

One plan shared by shadow models, LiRA and RMIA (Carlini et al. 2022, arXiv 2112.03570), so the cache trains each
model once: models 2p and 2p+1 train on complementary random halves of the pooled audit examples
(:func:`privgate.training.plan.paired_masks`), drawn from the seed, never from the true membership; population rows
are never trained on (RMIA's z-samples). A recipe whose model does not have the target's parameter shapes or
classes stops the audit with a :class:`RecipeError`. Details: ``docs/attacks.md``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

import numpy as np

from privgate import outputs
from privgate.attacks.base import AttackContext, AttackResult, AttackSkipped
from privgate.errors import RecipeError, shown

if TYPE_CHECKING:  # torch and the training engine load when an attack runs, not when policies are validated
    from privgate.inputs.surface import Surface
    from privgate.training.references import Trainer
    from privgate.training.trained import TrainedReferences


@dataclass
class References:
    """K reference models and what they output on the audit examples (and on population z-samples).

    Their outputs are never held for all rows at once: :meth:`per_row` streams
    every model over the audit rows a batch at a time and keeps only the per-row
    statistic an attack asks for (LiRA's φ, RMIA's p_y: ``[K, n]``), so memory
    grows with K times the rows, not K times the rows times the classes.

    Attributes:
        inside: ``[K, n]`` whether audit example i was in model k's training set.
        ensemble: the trained models and what they cost.
        x, y: the audit examples the models are read on.
        kind: how the models' raw outputs are read (:mod:`privgate.outputs`).
        n_classes: the target's number of classes, which the models must match.
        expected: the target's output kind the models must match (``None``: a
            scikit-learn target, whose recipe's models are read on their own terms).
        z_x, z_y: population rows (never trained on), when requested.
        surface: what the target's API serves (:mod:`privgate.inputs.surface`): the models' outputs are
            read through the same transform as the target's, so an attack compares like with like.
    """

    inside: np.ndarray
    ensemble: TrainedReferences
    x: np.ndarray
    y: np.ndarray
    kind: outputs.Kind = outputs.LOGITS
    n_classes: int = 0
    expected: outputs.Kind | None = None
    recipe_name: str = ""
    z_x: np.ndarray | None = None
    z_y: np.ndarray | None = None
    notes: list[str] = field(default_factory=list)
    surface: Surface | None = None

    @property
    def k(self) -> int:
        return len(self.inside)

    def per_row(
        self, fn: Callable[[np.ndarray, np.ndarray], np.ndarray], x: np.ndarray | None = None, view: Any = None
    ) -> np.ndarray:
        """``[K, n, …]``: ``fn(log_proba, y)`` of every model on every audit row, streamed batch by batch.

        ``fn`` maps one batch's ``[rows, classes]`` float64 log-probabilities and
        labels to one value (or one vector) per row, using each row alone, so the
        result equals ``fn`` applied to the whole ``[n, classes]`` matrix. ``x``:
        the audit rows as another query shows them, in the same order; ``view``: an
        augmented view made on the models' device from each batch
        (:meth:`privgate.attacks.views.Views.query`), whose outputs later attacks share.
        """
        return self._stream(self.x if x is None else x, self.y, fn, view)

    def z_per_row(
        self, fn: Callable[[np.ndarray, np.ndarray], np.ndarray], x: np.ndarray | None = None, view: Any = None
    ) -> np.ndarray:
        """``[K, m, …]``: :meth:`per_row` on the population z-samples (``x``, ``view``: a view of them)."""
        if self.z_x is None or self.z_y is None:
            raise ValueError("no z-samples were requested from build_references")
        return self._stream(self.z_x if x is None else x, self.z_y, fn, view)

    def passes(self) -> dict[str, int]:
        """The most forward passes any of these models has made over the audit rows (and the z-samples) under one
        view in this run: 1 when every attack that read them shared one scoring pass; {} when not counted."""
        count = self.ensemble.passes(self.x)
        if count is None:
            return {}
        out = {"audit_rows": count}
        if self.z_x is not None:
            out["z_samples"] = self.ensemble.passes(self.z_x) or 0
        return out

    @cached_property
    def log_proba(self) -> np.ndarray:
        """``[K, n, classes]`` log class probabilities on the audit examples, all held at once (K·n·classes floats).

        For attacks that need every class of every row (the shadow models' and the
        learned attack's classifiers); statistics of one row use :meth:`per_row`.
        """
        return self.per_row(_identity)

    @cached_property
    def z_log_proba(self) -> np.ndarray | None:
        """``[K, m, classes]`` reference log-probabilities on the z-samples (None without z-samples)."""
        return None if self.z_x is None else self.z_per_row(_identity)

    def _stream(
        self, x: np.ndarray, y: np.ndarray, fn: Callable[[np.ndarray, np.ndarray], np.ndarray], view: Any = None
    ) -> np.ndarray:
        parts: list[list[np.ndarray]] = [[] for _ in range(self.k)]
        seen: list[set[outputs.Kind | None]] = [set() for _ in range(self.k)]
        batches = self.ensemble.output_batches(x) if view is None else self.ensemble.output_batches(x, transform=view)
        for m, start, raw in batches:
            bk = outputs.kind_of(raw)
            seen[m].add(bk)
            if self.expected is not None and not _may_be(bk, self.expected):
                self._mismatch({_whole_kind(s) for s in seen if s})
            lp = outputs.log_proba(raw, self.kind)
            if lp.shape[-1] != self.n_classes:
                raise RecipeError(
                    f"recipe '{self.recipe_name}': its model outputs {lp.shape[-1]} classes but the target "
                    f"outputs {self.n_classes}; reference models must be trained like the target."
                )
            if self.surface is not None:  # the reference models answer as the API does (not counted as queries)
                lp = self.surface.log_proba(lp)
            parts[m].append(np.asarray(fn(lp, y[start : start + len(lp)])))
        if self.expected is not None:
            kinds = {_whole_kind(s) for s in seen}
            if kinds != {self.expected}:
                self._mismatch(kinds)
        return np.stack([np.concatenate(p) for p in parts])

    def _mismatch(self, kinds: set[outputs.Kind | None]) -> None:
        raise RecipeError(
            f"recipe '{self.recipe_name}': its models output {', '.join(sorted(str(k) for k in kinds))} but "
            f"the target outputs "
            f"{self.expected}; reference models must be trained like the target."
        )


def _identity(log_proba: np.ndarray, y: np.ndarray) -> np.ndarray:
    return log_proba


def _whole_kind(batch_kinds: set[outputs.Kind | None]) -> outputs.Kind | None:
    """The kind :func:`privgate.outputs.kind_of` gives all of one model's outputs, from its batches' kinds.

    Probabilities only when every batch's rows are; one batch of logits makes the whole logits.
    """
    if None in batch_kinds:
        return None
    if outputs.BINARY in batch_kinds:
        return outputs.BINARY
    return outputs.LOGITS if outputs.LOGITS in batch_kinds else outputs.PROBABILITIES


def _may_be(batch_kind: outputs.Kind | None, expected: outputs.Kind) -> bool:
    """Whether outputs with this batch's kind can still, as a whole, be of the ``expected`` kind."""
    if batch_kind is None or (batch_kind == outputs.BINARY) != (expected == outputs.BINARY):
        return False
    return not (expected == outputs.PROBABILITIES and batch_kind == outputs.LOGITS)


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
    _check_population(ctx, k, min_population, attack)
    from privgate.training.plan import paired_masks
    from privgate.training.references import trainer_for

    trainer = trainer_for(ctx.recipe)
    trainer.check(ctx.target, ctx.recipe)
    masks = paired_masks(len(ctx.y), k, ctx.seed)
    ens = _trained_or_shared(ctx, k, trainer)
    refs = References(
        inside=masks,
        ensemble=ens,
        x=ctx.x,
        y=ctx.y,
        n_classes=int(ctx.target.log_proba(ctx.x[:1]).shape[1]),
        recipe_name=ctx.recipe.name,
        notes=list(ens.notes) + list(ens.warnings),
        surface=ctx.target.surface,
    )
    _read_as_target(refs, ctx)
    if z_samples and ctx.population is not None:
        pop = ctx.population
        rng = np.random.default_rng(np.random.SeedSequence([ctx.seed, 0x2A]))
        take = np.sort(rng.permutation(len(pop))[: min(z_samples, len(pop))])
        refs.z_x, refs.z_y = pop.x[take], pop.y[take]
    return refs


def _check_population(ctx: AttackContext, k: int, min_population: int, attack: str) -> None:
    """Skip the attack when the population has fewer than ``min_population`` rows."""
    have = 0 if ctx.population is None else len(ctx.population)
    if have < min_population:
        raise AttackSkipped(
            f"'{attack}' needs at least {min_population} population rows (known non-members, never trained on) "
            f"to compare its {k} reference models against; the audit has {have or 'none'} (give --population)"
        )


def _trained_or_shared(ctx: AttackContext, k: int, trainer: Trainer) -> TrainedReferences:
    """The first ``k`` reference models: those an earlier attack of this run trained, or trained now.

    Trained now: as many as the run's attacks will ask for (:mod:`privgate.attacks.sharing`), kept in the context.
    """
    from privgate.executors import executor_for
    from privgate.training.plan import model_seeds, paired_masks
    from privgate.training.trained import TrainSettings

    earlier = min((m for m in ctx.ensembles if m >= k), default=None)
    if earlier is not None:  # the same models (same recipe, rows, masks and seeds) an earlier attack of this run has
        return reused(ctx.ensembles[earlier].first(k), cached=ctx.run.cache is not None)
    most = max(k, ctx.planned_models)
    devices = ctx.run.resolved().device_list or (ctx.device,)  # --devices: one GPU named, or several to spread over
    settings = TrainSettings(
        cache_dir=ctx.run.cache,
        cache_key=ctx.run.cache_key,
        threads=ctx.threads,
        engine=ctx.run.engine,
        device=devices[0] if len(devices) == 1 else ctx.device,
        devices=devices,
        executor=executor_for(ctx.run) if trainer.executor else None,
        models_per_task=ctx.run.models_per_task,
        progress=ctx.run.progress,
    )
    every, seeds = paired_masks(len(ctx.y), most, ctx.seed), model_seeds(ctx.seed, most)
    ens = trainer.train(ctx.recipe, ctx.target, ctx.x, ctx.y, every, seeds, settings)
    ctx.ensembles[most] = ens
    return ens.first(k)


def _read_as_target(refs: References, ctx: AttackContext) -> None:
    """How the models' outputs are read: as the target's kind, or (a scikit-learn target) as they come; and a note
    when the recipe looks unlike the target (:func:`privgate.inputs.sanity.recipe_warning`)."""
    from privgate.inputs.sanity import recipe_warning

    expected = ctx.target.outputs if ctx.target.module is not None and ctx.target.outputs else None
    if expected is None:  # a scikit-learn target: the recipe's torch models are read on their own terms
        refs.kind = _kind_of_models(refs.ensemble, ctx.x)
    else:
        refs.kind = refs.expected = expected
    mismatch = recipe_warning(ctx.target, ctx.recipe)
    if mismatch:
        refs.notes.append(mismatch)


def _kind_of_models(ens: TrainedReferences, x: np.ndarray) -> outputs.Kind:
    """The kind all models' outputs on ``x`` share (logits when they do not share one), streamed."""
    seen: list[set[outputs.Kind | None]] = [set() for _ in range(len(ens))]
    for m, _, raw in ens.output_batches(x):
        seen[m].add(outputs.kind_of(raw))
    kinds = {_whole_kind(s) for s in seen}
    only = next(iter(kinds)) if len(kinds) == 1 else None
    return only if only is not None else outputs.LOGITS


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
            "device": refs.ensemble.device,
            **({"placement": refs.ensemble.placement} if refs.ensemble.placement else {}),
            "cache_warnings": list(refs.ensemble.warnings),
            **({"reference_passes": refs.passes()} if refs.passes() else {}),
            **extras,
        },
    )


def reused(ens: TrainedReferences, cached: bool) -> TrainedReferences:
    """``ens`` as a later attack of the same run gets it: nothing trained, no cost, its outputs shared.

    With a cache the attack would have loaded these very models from it, and is
    told so (``mode`` ``cache``); without one, ``mode`` is ``shared``.
    """
    import dataclasses

    return dataclasses.replace(
        ens,
        trained=0,
        cached=len(ens) if cached else 0,
        mode="cache" if cached else "shared",
        kernel="",
        threads=0,
        seconds=0.0,
        notes=[],
        warnings=[],
    )


def cost_notes(refs: References) -> list[str]:
    """One sentence on how the reference models were obtained."""
    ens = refs.ensemble
    if ens.mode == "shared":
        how = f"all {len(ens)} reference models were trained earlier in this run (no cache) and reused"
    elif ens.trained == 0:
        how = f"all {len(ens)} reference models came from the cache"
        if getattr(ens.recipe, "own_loop", False):  # a torch recipe of the user's own training function
            from privgate.training.sequential import own_loop_reason

            how += f"; {own_loop_reason(ens.recipe)}"
    else:
        kernel = {
            "mlp": "MLP kernel",
            "mlp-dp": "MLP kernel, DP-SGD",
            "grouped": "grouped kernel",  # privgate.training.grouped
            "vmap": "torch.func/vmap",  # privgate.training.stacked
            "loop": "recipe.train",
            "function": "the recipe's own training function",  # privgate.training.function
        }.get(ens.kernel, ens.kernel)
        where = f", {ens.device}" if ens.device != "cpu" else ""
        if ens.placement:  # groups spread over several devices, one worker each
            where = f", {len(ens.placement)} groups over {', '.join(dict.fromkeys(p['device'] for p in ens.placement))}"
        how = (
            f"trained {ens.trained} reference model(s) {ens.mode} ({kernel}{where}, {ens.threads} "
            f"thread{'s' if ens.threads != 1 else ''}"
            f", {ens.seconds:.1f} s)" + (f", {ens.cached} from the cache" if ens.cached else "")
        )
        if ens.trained + ens.cached > len(ens):  # privgate.attacks.sharing
            how += f" for this run's attacks, which share them; this attack reads the first {len(ens)}"
    return [how] + refs.notes
