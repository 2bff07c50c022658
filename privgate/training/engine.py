"""Train K models of one recipe at once, each on its own subset with its own seed, and cache them.

The reference models of shadow models (Shokri et al. 2017, arXiv 1610.05820), LiRA (Carlini et al. 2022, arXiv
2112.03570) and RMIA (Zarifzadeh et al. 2024, arXiv 2312.03262). Model ``k`` equals ``train_model(recipe, x[mask_k],
y[mask_k], seed=seeds[k])`` up to float rounding, on any device; states come back, and are cached, on the CPU.
Recipes the kernels (:mod:`privgate.training.vectorised`) cannot replicate train one at a time (engine ``auto``,
the notes say why) or are refused (``vectorised``). Cache: :mod:`privgate.training.cache`; threads:
:mod:`privgate.threads`. How it works: ``docs/internals-training-stats.md``.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from privgate.errors import RecipeError, out_of_memory
from privgate.io.sources import key_or_warning
from privgate.recipe import Recipe
from privgate.threads import resolve_threads, torch_threads
from privgate.training import mlp
from privgate.training.cache import ModelCache
from privgate.training.dp_step import dp_note
from privgate.training.ensemble import TorchReader, Trained
from privgate.training.fingerprint import data_fingerprint, model_key, recipe_fingerprint
from privgate.training.function import architecture_copy, architecture_state, check_states
from privgate.training.kernels import NotVectorisable
from privgate.training.sequential import own_loop_reason, train_sequential
from privgate.training.stacked import random_forward
from privgate.training.tasks import train_groups
from privgate.training.trained import TrainedReferences, TrainSettings
from privgate.training.vectorised import KERNELS, train_vectorised

# --------------------------------------------------------------------------- training


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
    see :func:`privgate.training.vectorised.train_vectorised`); ``strict`` makes a model the vectorised
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
    :attr:`TorchReader.architecture`)."""
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
            states, used, notes = train_vectorised(recipe, x, y, masks, seeds, kernel, device)
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
    settings: TrainSettings | None = None,
    *,
    architecture: nn.Module | None = None,
) -> TrainedReferences:
    """Train (or load from the cache) model k on ``x[masks[k]]`` with seed ``seeds[k]``.

    Args:
        recipe: how to train each model.
        x: all candidate training rows (float32-compatible).
        y: their integer labels.
        masks: ``[K, len(x)]`` booleans, one training subset per model.
        seeds: one seed per model (initialisation and batch order).
        settings: the cache, threads, engine, device and executor (:class:`TrainSettings`; default: no cache,
            here, on the CPU). The cache is read before and written after, here, so a cache never changes what
            a task computes; the groups of ``models_per_task`` depend only on it and K, not on the executor.
        architecture: for a recipe of the user's own training function without a
            ``model_factory``: a model of the architecture it returns (the target's),
            which cached states load into (:mod:`privgate.training.function`).

    Returns:
        A :class:`TrainedReferences` with the states in mask order and what they cost.

    Raises:
        RecipeError: the recipe cannot build or train a model on this data.
    """
    start = time.perf_counter()
    job = _Job.of(recipe, x, y, masks, seeds, settings or TrainSettings(), architecture)
    store = _Store.open(job)
    states = store.load([None] * len(job.seeds), job.like)
    fresh = _Fresh(skeleton=architecture_copy(architecture) if job.own else None, devices=_spread(job))
    if any(s is None for s in states) or (job.own and fresh.skeleton is None):
        with store.lock():
            states = store.load(states, job.like)  # another run may have trained them while we waited
            fresh = _train_missing(job, states, store, fresh.skeleton, fresh.devices)
    return TrainedReferences(
        recipe=recipe,
        models=[s for s in states if s is not None],
        masks=job.masks,
        seeds=[int(s) for s in seeds],
        reader=TorchReader(
            recipe,
            job.settings.device,
            architecture=fresh.skeleton,
            devices=fresh.devices,
            per_group=job.settings.models_per_task,
        ),
        trained=fresh.trained,
        cached=len(job.seeds) - fresh.trained if store.cache is not None else 0,
        mode=fresh.mode,
        kernel=fresh.kernel,
        threads=resolve_threads(job.settings.threads) if fresh.trained else 0,
        seconds=time.perf_counter() - start,
        notes=fresh.notes,
        warnings=store.warnings(),
        device=job.settings.device,
        placement=fresh.placement,
    )


@dataclass
class _Job:
    """What one :func:`train_ensemble` call trains: the recipe, the checked plan and data, the model they build."""

    recipe: Recipe
    x: np.ndarray
    y: np.ndarray
    masks: np.ndarray
    seeds: Sequence[int]
    settings: TrainSettings
    own: bool  # the user's training function makes the models: nothing to build
    probe: nn.Module | None  # a fresh build under seed 0, run on two rows (None when nothing builds)
    like: dict[str, torch.Tensor] | None  # the state every model's must match (the probe's, or the target's)

    @classmethod
    def of(
        cls,
        recipe: Recipe,
        x: np.ndarray,
        y: np.ndarray,
        masks: np.ndarray,
        seeds: Sequence[int],
        settings: TrainSettings,
        architecture: nn.Module | None,
    ) -> _Job:
        masks = np.asarray(masks, dtype=bool)
        x = np.ascontiguousarray(x, dtype=np.float32)
        y = np.ascontiguousarray(y, dtype=np.int64)
        if masks.ndim != 2 or masks.shape[1] != len(x) or len(seeds) != len(masks):
            raise ValueError(
                f"masks must be [K, {len(x)}] with one seed per row; got {masks.shape} and {len(seeds)} seeds"
            )
        if not masks.any(axis=1).all():
            raise ValueError("every model needs at least one training row")
        own = recipe.own_loop and recipe.model_factory is None
        probe = None if own else _probe(recipe, x)
        like = probe.state_dict() if probe is not None else architecture_state(architecture)
        return cls(recipe, x, y, masks, seeds, settings, own, probe, like)

    @property
    def vectorise(self) -> bool:
        return self.settings.engine != "sequential"

    def stream(self, mode: str) -> str:
        """The training stream of models trained in ``mode`` (:func:`training_stream`; none for the user's function,
        which makes its own random draws, its key says which)."""
        if self.recipe.own_loop or self.probe is None:
            return ""
        return training_stream(self.recipe, self.probe, self.x, mode, self.settings.device)


@dataclass
class _Store:
    """The model cache as one call sees it: each model's key (no cache: none) and the mode the keys assume."""

    cache: ModelCache | None
    keys: list[str] = field(default_factory=list)
    planned: str = ""
    fingerprints: tuple[str, str] = ("", "")
    unkeyed: list[str] = field(default_factory=list)

    @classmethod
    def open(cls, job: _Job) -> _Store:
        """The cache of ``job.settings`` with every model's key (no cache when the recipe cannot be keyed)."""
        if job.settings.cache_dir is None:
            return cls(None)
        rfp, unkeyed = key_or_warning(recipe_fingerprint, job.recipe)
        if not rfp:
            return cls(None, unkeyed=unkeyed)
        stacks = (
            job.vectorise and not job.recipe.own_loop and job.probe is not None and _stacks_dp(job.recipe, job.probe)
        )
        store = cls(ModelCache(job.settings.cache_dir, job.settings.cache_key), unkeyed=unkeyed)
        store.planned = "vectorised" if stacks else "sequential"
        store.fingerprints = (rfp, data_fingerprint(job.x, job.y))
        store.rekey(job, job.stream(store.planned))
        return store

    def rekey(self, job: _Job, stream: str) -> None:
        """Every model's key for states of this training stream."""
        self.keys = [model_key(*self.fingerprints, m, s, stream) for m, s in zip(job.masks, job.seeds)]

    def load(self, states: list[Any], like: dict[str, torch.Tensor] | None) -> list[Any]:
        """``states`` with each missing one loaded from the cache where it holds it."""
        if self.cache is None:
            return states
        return [s if s is not None else self.cache.load(key, like) for s, key in zip(states, self.keys)]

    def lock(self) -> AbstractContextManager[Any]:
        """The cache's lock on this set of models while they train (none without a cache)."""
        if self.cache is None:
            return nullcontext()
        return self.cache.lock(hashlib.sha256("".join(self.keys).encode()).hexdigest()[:24] if self.keys else "")

    def store(self, i: int, state: dict[str, torch.Tensor]) -> None:
        if self.cache is not None:
            self.cache.store(self.keys[i], state)

    def warnings(self) -> list[str]:
        return (list(self.cache.warnings) if self.cache is not None else []) + self.unkeyed


@dataclass
class _Fresh:
    """What :func:`_train_missing` trained: how many, how, its notes, and the model the states load into."""

    trained: int = 0
    mode: str = "cache"
    kernel: str = ""
    notes: list[str] = field(default_factory=list)
    skeleton: nn.Module | None = None
    devices: tuple[str, ...] = ()  # where the models' groups train and are read, one worker each
    placement: list[dict[str, Any]] = field(default_factory=list)


def _train_missing(
    job: _Job, states: list[Any], store: _Store, skeleton: nn.Module | None, devices: tuple[str, ...]
) -> _Fresh:
    """Train the models ``states`` lacks (in place), and store them; ``skeleton``: a model of the user's function;
    ``devices``: where the groups spread (:func:`_spread`, decided once by the caller)."""
    fresh = _Fresh(skeleton=skeleton, devices=devices)
    todo = [i for i, s in enumerate(states) if s is None]
    if not todo and job.own and skeleton is None:  # every state cached, but no model of theirs to load them into
        todo = [0]
        fresh.notes.append("model 0 was trained again for its architecture (no model_factory, and the target has none)")
    if not todo:
        return fresh
    settings = job.settings
    (new, fresh.mode, more, fresh.kernel), returned, placed = train_groups(
        settings.executor, train_task, settings.models_per_task, job.recipe, job.x, job.y, job.masks[todo],
        [job.seeds[i] for i in todo], job.vectorise, settings.threads, settings.engine == "vectorised",
        settings.device, fresh.devices,
    )  # fmt: skip
    if len({p["device"] for p in placed}) > 1:
        fresh.placement = [{"device": p["device"], "models": [todo[i] for i in p["models"]]} for p in placed]
    if len(settings.devices) > 1 and not fresh.devices:
        fresh.notes.append(f"reference models trained and were read on one device: {_unspread_reason(job)}")
    fresh.notes += more
    if job.recipe.own_loop:
        of = "model_factory's model" if job.probe is not None else "the target's model"
        check_states(job.recipe, new, *((job.like, of) if job.like is not None else (new[0], "the first one")))
    fresh.skeleton = returned if job.own and returned is not None else skeleton
    fresh.trained = len(todo)
    if store.cache is not None and fresh.mode != store.planned and job.probe is not None:
        store.rekey(job, job.stream(fresh.mode))  # a DP recipe the MLP kernel declined: stored as trained
    for i, st in zip(todo, new):
        states[i] = st
        store.store(i, st)
    return fresh


def _unspread_reason(job: _Job) -> str:
    """Why ``job``'s models cannot spread over several devices (one worker thread each), or ``""`` when they can.

    The threads share torch's global CPU generator: models that draw from it while they train — a user's training
    function, a recipe's own ``train`` (Opacus), a forward pass with random draws of its own — would draw each
    other's numbers.
    """
    from privgate.recipe import own_train

    if job.recipe.own_loop:
        return f"{own_loop_reason(job.recipe)}, whose random draws the threads of one process would share"
    if own_train(job.recipe):
        return f"{type(job.recipe).__name__} trains with its own train method, whose random draws would be shared"
    if job.probe is not None and job.stream("sequential").startswith("rng:"):
        return "the model draws random numbers in its forward pass from torch's generator, which threads share"
    return ""


def _spread(job: _Job) -> tuple[str, ...]:
    """The devices ``job``'s groups spread over: the run's, where the models can (:func:`_unspread_reason`)."""
    devices = job.settings.devices
    return tuple(devices) if len(devices) > 1 and not _unspread_reason(job) else ()


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
    "Trained",
    "TrainSettings",
    "TrainedReferences",
    "train_ensemble",
    "train_models",
    "train_task",
    "training_stream",
]
