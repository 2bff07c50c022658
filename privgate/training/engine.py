"""Train K models of one recipe at once, each on its own subset with its own seed, and cache them.

The reference models of shadow models (Shokri et al. 2017, arXiv 1610.05820), LiRA (Carlini et al. 2022, arXiv
2112.03570) and RMIA (Zarifzadeh et al. 2024, arXiv 2312.03262). Model ``k`` equals ``train_model(recipe, x[mask_k],
y[mask_k], seed=seeds[k])`` up to float rounding, on any device; states come back, and are cached, on the CPU.
Recipes the kernels cannot replicate train one at a time (engine ``auto``, :attr:`Ensemble.notes` says why) or are
refused (``vectorised``). Kernels: :mod:`privgate.training.kernels`; cache: :mod:`privgate.training.cache`;
threads: :mod:`privgate.threads`. How it works: ``docs/internals-training-stats.md``.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Sequence
from contextlib import nullcontext
from pathlib import Path

import numpy as np
import torch
from torch import nn

from privgate.errors import RecipeError, out_of_memory
from privgate.executors import Executor
from privgate.io.sources import key_or_warning
from privgate.recipe import OPTIMIZERS, Recipe
from privgate.threads import resolve_threads, torch_threads
from privgate.training import augment, grouped, mlp
from privgate.training.cache import ModelCache
from privgate.training.dp_step import dp_note, dp_step, dp_view
from privgate.training.ensemble import Ensemble, Trained
from privgate.training.fingerprint import data_fingerprint, model_key, recipe_fingerprint
from privgate.training.function import architecture_copy, architecture_state, check_states
from privgate.training.kernels import NotVectorisable, mlp_kernel_mismatch
from privgate.training.optimisers import optimise
from privgate.training.plan import dropout_seed, epoch_schedule
from privgate.training.sequential import own_loop_reason, train_sequential
from privgate.training.stacked import NotStackable, StackedModel, Training, random_forward, unstack
from privgate.training.tasks import train_groups

# --------------------------------------------------------------------------- training


def _check_vectorisable(recipe: Recipe) -> None:
    if recipe.own_loop:
        raise NotVectorisable(own_loop_reason(recipe))
    if not recipe.vectorisable and recipe.dp_sgd is None:
        raise NotVectorisable(f"recipe '{recipe.name}' ({type(recipe).__name__}) trains with its own loop")
    if recipe.optimizer not in OPTIMIZERS:
        raise RecipeError(
            f"recipe '{recipe.name}': unknown optimizer '{recipe.optimizer}' (use {', '.join(map(repr, OPTIMIZERS))})."
        )


KERNELS = ("auto", "mlp", "grouped", "vmap")


def _train_vectorised(
    recipe: Recipe,
    x: np.ndarray,
    y: np.ndarray,
    masks: np.ndarray,
    seeds: Sequence[int],
    kernel: str = "auto",
    device: str = "cpu",
) -> tuple[list[dict[str, torch.Tensor]], str, list[str]]:
    """Train ``len(seeds)`` models at once (see the module docstring): ``(states, kernel used, notes)``.

    ``kernel``: ``"mlp"`` — the closed-form kernel of :mod:`privgate.training.mlp`
    (plain Linear/activation stacks only); ``"grouped"`` — the grouped kernel of
    :mod:`privgate.training.grouped` (``nn.Sequential`` stacks of convolutions,
    normalisations, pooling, dropout and linear layers); ``"vmap"`` — the general
    kernel of :mod:`privgate.training.stacked` (any model ``vmap`` can map);
    ``"auto"`` — the first of these three that qualifies for the model and
    reproduces its own forward pass.
    """
    from torch.func import stack_module_state

    if kernel not in KERNELS:
        raise ValueError(f"kernel must be one of {KERNELS}, not {kernel!r}")
    _check_vectorisable(recipe)
    if recipe.dp_sgd is not None:
        recipe = dp_view(recipe)
    nets = [recipe.build(seed=s) for s in seeds]
    k = len(nets)
    dev = torch.device(device)
    xt = torch.as_tensor(np.asarray(x), dtype=torch.float32).to(dev)
    yt = torch.as_tensor(np.asarray(y), dtype=torch.long).to(dev)
    notes: list[str] = []
    rows = [torch.as_tensor(np.flatnonzero(m), dtype=torch.long) for m in masks]
    gens = [torch.Generator().manual_seed(int(s)) for s in seeds]

    def schedule() -> tuple[torch.Tensor, torch.Tensor, np.ndarray]:
        return epoch_schedule(gens, rows, int(recipe.batch_size))

    if recipe.dp_sgd is not None and kernel == "vmap":
        raise NotVectorisable("DP-SGD is vectorised for MLPs only (the vmap kernel was asked for)")
    training = _training(recipe, xt, seeds)
    mlp_plan, why = mlp.plan(nets[0]) if kernel in ("auto", "mlp") else (None, "")
    if mlp_plan is not None and (training.bf16 or training.augmenters):
        mlp_plan, why = None, "the MLP kernel trains in float32 without augmentation"
    if mlp_plan is not None:
        params, _ = stack_module_state(nets)
        names = list(params)
        p = [params[n].detach().to(dev) for n in names]
        batch = 1 if recipe.dp_sgd is not None else int(recipe.batch_size)
        engine = mlp.StackedMLP(mlp_plan, names, k, batch, xt, yt, training.label_smoothing)
        why = mlp_kernel_mismatch(engine, nets[0], engine.pack(p), xt)
        if not why:
            p = engine.pack(p)
            if recipe.dp_sgd is not None:  # DP-SGD: Poisson batches, clipping and noise per model
                grad_fn, dp_schedule = dp_step(engine, recipe.dp_sgd, rows, gens, seeds, p)
                optimise(recipe, p, grad_fn, dp_schedule)
                used = "mlp-dp"
            else:
                optimise(recipe, p, engine.grads, schedule)
                used = "mlp"
            return unstack(nets[0], dict(zip(names, engine.unpack(p))), k), used, notes
    if recipe.dp_sgd is not None:
        raise NotVectorisable(f"DP-SGD is vectorised for MLPs only ({why})")
    if kernel == "mlp":
        raise NotVectorisable(f"the MLP kernel cannot train this model: {why}")
    forward = None
    if kernel in ("auto", "grouped"):
        layout, why = grouped.plan(nets[0], tuple(x.shape[1:]))
        if layout is not None:
            why = grouped.mismatch(layout, nets[0], torch.as_tensor(x[: min(8, len(x))]))
            if not why:
                size = 2 if training.bf16 else 4
                per_call = grouped.models_per_call(nets[0], xt[:1], int(recipe.batch_size), k, dev, size)
                forward = grouped.GroupedForward(layout, per_call)
        if forward is None and kernel == "grouped":
            raise NotVectorisable(f"the grouped kernel cannot train this model: {why}")
    if training.bf16 and forward is None:  # vmap's batching rules run convolutions outside torch.autocast
        raise NotVectorisable("the general (vmap) kernel cannot run a bf16 forward pass as torch.autocast does")
    try:
        model = StackedModel(nets, xt, yt, [dropout_seed(s) for s in seeds], grouped=forward, training=training)
    except NotStackable as exc:
        raise NotVectorisable(str(exc)) from None
    del nets
    try:
        optimise(recipe, model.params, model.grads, schedule, epoch_hook=model.begin_epoch)
    except NotStackable as exc:
        raise NotVectorisable(str(exc)) from None
    return model.states([t.detach() for t in model.params]), "grouped" if forward else "vmap", notes


def _training(recipe: Recipe, xt: torch.Tensor, seeds: Sequence[int]) -> Training:
    """The recipe's label smoothing, precision and augmentation for the kernels (checked on the data first)."""
    augmenters: tuple[augment.Augmenter, ...] = ()
    if recipe.augment is not None:
        augment.check_rows(recipe.augment, xt.shape[1:], recipe.name)
        augment.check_transform(recipe.augment, xt[: min(4, len(xt))], recipe.name)
        augmenters = tuple(augment.Augmenter(recipe.augment, int(s), recipe.name) for s in seeds)
    return Training(float(recipe.label_smoothing), recipe.precision == "bf16", augmenters)


def train_models(
    recipe: Recipe,
    x: np.ndarray,
    y: np.ndarray,
    masks: np.ndarray,
    seeds: Sequence[int],
    vectorise: bool = True,
    threads: int | None = None,
    kernel: str = "auto",
    strict: bool = False,
    device: str = "cpu",
) -> Trained:
    """Train one model per mask, no cache: ``(states, mode, notes, kernel)``.

    ``vectorise=False`` forces the sequential loop (the benchmark's baseline);
    ``kernel`` picks the vectorised kernel (``"auto"``, ``"mlp"``, ``"vmap"``;
    see :func:`_train_vectorised`); ``strict`` makes a model the vectorised
    engine cannot train a :class:`RecipeError` instead of a fallback to the
    sequential loop; ``threads`` defaults to one (:mod:`privgate.threads`);
    ``device`` is where the models train (``"cpu"`` or ``"cuda"``, resolved:
    :func:`privgate.device.resolve_device`); the states come back on the CPU.
    """
    with torch_threads(resolve_threads(threads)):
        return _train_models(recipe, x, y, masks, seeds, vectorise, kernel, strict, device)[0]


def train_task(
    recipe: Recipe,
    x: np.ndarray,
    y: np.ndarray,
    masks: np.ndarray,
    seeds: Sequence[int],
    vectorise: bool,
    threads: int | None,
    kernel: str,
    strict: bool,
    device: str,
) -> tuple[Trained, nn.Module | None]:
    """:func:`train_models` as one executor task (:mod:`privgate.training.tasks`): the trained models and, for a
    recipe of the user's own training function, the first model it returned (the architecture its states load into,
    :attr:`Ensemble.architecture`)."""
    with torch_threads(resolve_threads(threads)):
        return _train_models(recipe, x, y, masks, seeds, vectorise, kernel, strict, device)


def _train_models(
    recipe: Recipe,
    x: np.ndarray,
    y: np.ndarray,
    masks: np.ndarray,
    seeds: Sequence[int],
    vectorise: bool,
    kernel: str = "auto",
    strict: bool = False,
    device: str = "cpu",
) -> tuple[Trained, nn.Module | None]:
    notes: list[str] = []
    ignored = dp_note(recipe)
    if recipe.own_loop:  # the user's training function: one call per model, never stacked
        if vectorise and strict:
            raise RecipeError(
                f"recipe '{recipe.name}': engine 'vectorised' cannot train this model: {own_loop_reason(recipe)} "
                "(use engine 'auto' or 'sequential')."
            )
        states, more, architecture = train_sequential(recipe, x, y, masks, seeds, device)
        return Trained(states, "sequential", [own_loop_reason(recipe)] + more, "function"), architecture
    if vectorise:
        try:
            states, used, notes = _train_vectorised(recipe, x, y, masks, seeds, kernel, device)
            return Trained(states, "vectorised", notes + ([ignored] if ignored else []), used), None
        except NotVectorisable as exc:
            why = str(exc)
        except RecipeError:
            raise
        except Exception as exc:  # an op vmap cannot map: the sequential loop is always correct
            why = (
                f"the vectorised engine failed on this model ({exc.__class__.__name__}: "
                f"{str(exc).splitlines()[0][:160]})"
            )
        if strict:
            raise RecipeError(
                f"recipe '{recipe.name}': engine 'vectorised' cannot train this model: {why} (use engine "
                f"'auto' or 'sequential')."
            )
        notes.append(f"trained {len(seeds)} reference model(s) one after another with recipe.train: {why}")
    states, more, _ = train_sequential(recipe, x, y, masks, seeds, device)
    return Trained(states, "sequential", notes + more + ([ignored] if ignored else []), "loop"), None


def train_ensemble(
    recipe: Recipe,
    x: np.ndarray,
    y: np.ndarray,
    masks: np.ndarray,
    seeds: Sequence[int],
    *,
    cache_dir: str | Path | None = None,
    cache_key: bytes | None = None,
    vectorise: bool = True,
    threads: int | None = None,
    engine: str = "auto",
    device: str = "cpu",
    executor: Executor | None = None,
    models_per_task: int | None = None,
    architecture: nn.Module | None = None,
) -> Ensemble:
    """Train (or load from the cache) model k on ``x[masks[k]]`` with seed ``seeds[k]``.

    Args:
        recipe: how to train each model.
        x: all candidate training rows (float32-compatible).
        y: their integer labels.
        masks: ``[K, len(x)]`` booleans, one training subset per model.
        seeds: one seed per model (initialisation and batch order).
        cache_dir: cache folder, or None for no cache.
        cache_key: the secret key that tags the cache's entries (:class:`ModelCache`; None: this process's).
        vectorise: train the missing models at once when the recipe allows it.
        threads: torch threads while training (default one, :mod:`privgate.threads`).
        engine: ``auto`` (vectorised when possible, else one model after
            another), ``vectorised`` (a model the engine cannot stack is a
            RecipeError) or ``sequential`` (``train_model`` per model), as
            :attr:`privgate.options.RunOptions.engine`.
        device: where to train and score (``"cpu"`` or ``"cuda"``, resolved by
            :func:`privgate.device.resolve_device`); states are kept on the CPU.
        executor: where the groups of models train (:mod:`privgate.executors`;
            default: here, one after another). The cache is read before and
            written after, here, so a cache never changes what a task computes.
        models_per_task: most models one task trains at once (default: all);
            the groups depend only on this and K, not on the executor.
        architecture: for a recipe of the user's own training function without a
            ``model_factory``: a model of the architecture it returns (the target's),
            which cached states load into (:mod:`privgate.training.function`).

    Returns:
        An :class:`Ensemble` with the states in mask order and what it cost.

    Raises:
        RecipeError: the recipe cannot build or train a model on this data.
    """
    start = time.perf_counter()
    masks = np.asarray(masks, dtype=bool)
    x = np.ascontiguousarray(x, dtype=np.float32)
    y = np.ascontiguousarray(y, dtype=np.int64)
    if masks.ndim != 2 or masks.shape[1] != len(x) or len(seeds) != len(masks):
        raise ValueError(f"masks must be [K, {len(x)}] with one seed per row; got {masks.shape} and {len(seeds)} seeds")
    if not masks.any(axis=1).all():
        raise ValueError("every model needs at least one training row")
    own = recipe.own_loop and recipe.model_factory is None  # nothing to build: the user's function makes the models
    probe = None if own else _probe(recipe, x)
    like = probe.state_dict() if probe is not None else architecture_state(architecture)

    k = len(seeds)
    states: list[dict[str, torch.Tensor] | None] = [None] * k
    rfp, unkeyed = key_or_warning(recipe_fingerprint, recipe) if cache_dir is not None else ("", [])
    cache = ModelCache(cache_dir, cache_key) if rfp else None
    keys: list[str] = []
    vectorise = vectorise and engine != "sequential"
    if cache is not None:
        dfp = data_fingerprint(x, y)
        fn = recipe.own_loop  # the user's function: one call per model, its own random draws (its key says which)
        stacks = vectorise and not fn and probe is not None and _stacks_dp(recipe, probe)
        planned = "vectorised" if stacks else "sequential"
        stream = "" if fn or probe is None else training_stream(recipe, probe, x, planned, device)

        def keys_of(stream: str) -> list[str]:
            return [model_key(rfp, dfp, m, s, stream) for m, s in zip(masks, seeds)]

        keys = keys_of(stream)
        states = [cache.load(key, like) for key in keys]
    notes: list[str] = []
    mode, kernel = "cache", ""
    trained = 0
    skeleton = architecture_copy(architecture) if own else None
    if any(s is None for s in states) or (own and skeleton is None):
        lock_name = hashlib.sha256("".join(keys).encode()).hexdigest()[:24] if keys else ""
        with cache.lock(lock_name) if cache is not None else nullcontext():
            if cache is not None:  # another run may have trained them while we waited
                states = [s if s is not None else cache.load(key, like) for s, key in zip(states, keys)]
            todo = [i for i, s in enumerate(states) if s is None]
            if not todo and own and skeleton is None:  # every state cached, but no model of theirs to load them into
                todo = [0]
                notes.append(
                    "model 0 was trained again for its architecture (no model_factory, and the target has none)"
                )
            if todo:
                (new, mode, more, kernel), returned = train_groups(
                    executor, train_task, models_per_task, recipe, x, y, masks[todo], [seeds[i] for i in todo],
                    vectorise, threads, engine == "vectorised", device,
                )  # fmt: skip
                notes += more
                if recipe.own_loop:
                    of = "model_factory's model" if probe is not None else "the target's model"
                    check_states(recipe, new, *((like, of) if like is not None else (new[0], "the first one")))
                skeleton = returned if own and returned is not None else skeleton
                trained = len(todo)
                # a DP recipe the MLP kernel declined: stored as trained
                if cache is not None and mode != planned and probe is not None:
                    keys = keys_of(training_stream(recipe, probe, x, mode, device))
                for i, st in zip(todo, new):
                    states[i] = st
                    if cache is not None:
                        cache.store(keys[i], st)
    return Ensemble(
        recipe=recipe,
        states=[s for s in states if s is not None],
        masks=masks,
        seeds=[int(s) for s in seeds],
        trained=trained,
        cached=k - trained if cache is not None else 0,
        mode=mode,
        kernel=kernel,
        threads=resolve_threads(threads) if trained else 0,
        seconds=time.perf_counter() - start,
        notes=notes,
        warnings=(list(cache.warnings) if cache is not None else []) + unkeyed,
        device=device,
        architecture=skeleton,
    )


def _probe(recipe: Recipe, x: np.ndarray) -> nn.Module:
    """A fresh build of the recipe's model under seed 0, run on two rows (one sentence when it cannot run on them)."""
    probe = recipe.build(seed=0)
    try:
        with torch.no_grad():
            probe.eval()(torch.as_tensor(x[:2]))
    except Exception as exc:
        if out_of_memory(exc):
            raise
        msg = str(exc).strip().splitlines()[-1][:200] if str(exc).strip() else exc.__class__.__name__
        raise RecipeError(
            f"recipe '{recipe.name}': its model cannot run on the audit data (rows of shape {x.shape[1:]}): {msg}."
        ) from None
    return probe


def _stacks_dp(recipe: Recipe, net: nn.Module) -> bool:
    """For a DP-SGD recipe, whether the MLP kernel will train it (True for any other recipe: it does not matter)."""
    return recipe.dp_sgd is None or mlp.plan(net)[0] is not None


def training_stream(recipe: Recipe, net: nn.Module, x: np.ndarray, mode: str, device: str) -> str:
    """What decides a trained model beyond its recipe, data, mask and seed: part of its cache key.

    Empty when the vectorised engine and ``train_model`` give the same model
    up to float rounding on any device — plain recipes, dropout included
    (:mod:`privgate.training.dropout` draws the same masks both ways) — so a
    model trained one way is loaded for the other. Otherwise the random draws
    differ, and entries are kept apart:

    * a DP-SGD recipe (:attr:`~privgate.recipe.Recipe.dp_sgd`): the MLP kernel
      draws Poisson batches and noise from per-model CPU generators
      (``dp:engine``), Opacus from its own CPU generators, its noise included
      (:mod:`privgate.dpsgd.noise`), on any device (``dp:recipe.train``);
    * a model whose forward pass draws other random numbers (trained by
      ``train_model`` only, from torch's generator on the training device):
      ``rng:<device>``;
    * a recipe that trains in bf16: ``bf16:<device type>`` (the same model both
      ways up to bf16's rounding, which differs between CPUs and GPUs).
    """
    if recipe.dp_sgd is not None:
        return "dp:engine" if mode == "vectorised" else "dp:recipe.train"
    if random_forward(net, torch.as_tensor(x[: min(4, len(x))])):
        return f"rng:{device}"
    if recipe.precision == "bf16":  # bf16 rounds differently on each kind of device, by more than float32 does
        return f"bf16:{torch.device(device).type}"
    return ""


__all__ = [
    "KERNELS",
    "Ensemble",
    "Trained",
    "train_ensemble",
    "train_models",
    "train_task",
    "training_stream",
]
