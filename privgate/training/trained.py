"""Trained reference models of any recipe kind, one result type: the models, the plan they follow, what they cost.

Torch models (:mod:`privgate.training.engine`), boosters (:mod:`privgate.training.trees`) and scikit-learn clones
(:mod:`privgate.training.sklearn_models`) come back as a :class:`TrainedReferences`; each kind reads its models'
outputs through its own :class:`Reader`. :class:`TrainSettings` holds the run's settings for training them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

#: Reference-model outputs a reader (:meth:`privgate.training.ensemble.TorchReader.output_batches`, a scikit-learn
#: clone's) keeps for the next attack: at least 64 MiB, more up to the audit rows' own size (torch models'), never
#: more than 1 GiB (:func:`memo_bytes`).
OUTPUT_MEMO_BYTES, OUTPUT_MEMO_MAX = 64 << 20, 1 << 30


def memo_bytes(x: np.ndarray) -> int:
    """The most bytes of outputs kept for later attacks: as many as the audit rows take, within the two bounds."""
    return int(min(max(OUTPUT_MEMO_BYTES, np.asarray(x).nbytes), OUTPUT_MEMO_MAX))


@dataclass(frozen=True)
class TrainSettings:
    """Where and how reference models train: the run's settings, which change what training costs, not the models.

    Attributes:
        cache_dir: cache folder, or None for no cache.
        cache_key: the secret key that tags the cache's entries (None: this process's).
        threads: threads while training (None: the default, :mod:`privgate.threads`).
        engine: ``auto`` (vectorised when possible, else one model after another), ``vectorised`` (a model the
            engine cannot stack is a RecipeError) or ``sequential``, as :attr:`privgate.options.RunOptions.engine`.
        device: where torch models train and are read (``"cpu"`` or ``"cuda"``, resolved).
        devices: the devices groups of torch models spread over, one worker each (:attr:`privgate.options.RunOptions
            .device_list`; one or none: all on ``device``).
        executor: where groups of models train (:mod:`privgate.executors`; None: here, one after another).
        models_per_task: most torch models one task trains at once (None: all).
        progress: where a line on what is being trained goes (None: nowhere).
    """

    cache_dir: str | Path | None = None
    cache_key: bytes | None = None
    threads: int | None = None
    engine: str = "auto"
    device: str = "cpu"
    devices: tuple[str, ...] = ()
    executor: Any = None
    models_per_task: int | None = None
    progress: Callable[[str], None] | None = None


class Reader(Protocol):
    """How one kind of reference model is read: raw outputs of the models on rows, a batch at a time."""

    def output_batches(
        self, models: list[Any], x: np.ndarray, batch: int, transform: Any = None
    ) -> Iterator[tuple[int, int, np.ndarray]]: ...

    def passes(self, models: list[Any], x: np.ndarray) -> int | None: ...


@dataclass
class TrainedReferences:
    """K trained reference models of one recipe, in mask order, and what obtaining them cost.

    Attributes:
        recipe: the recipe they were trained with.
        models: one per mask: a torch ``state_dict`` (CPU tensors), a booster or a fitted scikit-learn estimator.
        masks: ``[K, n]`` booleans, row k = the training rows of model k.
        seeds: the seed of each model.
        reader: how the models are read (:class:`Reader`; shared by the copies :meth:`first` makes).
        trained: how many models this call trained (0 when all came from the cache).
        cached: how many models came from the cache.
        mode: how they were obtained: ``"vectorised"``, ``"sequential"``, ``"cache"`` (nothing trained), or a
            phrase for the scikit-learn clones (``"sequentially"``, ``"as 4 Ray tasks"``, …).
        seconds: wall time of the call.
        notes: sentences for the report (fallbacks, what the models are).
        kernel: how the trained models were trained (torch: ``"mlp"``, ``"mlp-dp"``, ``"grouped"``, ``"vmap"``,
            ``"loop"``, ``"function"``; boosters: their library; ``""``: nothing trained).
        threads: threads used for training (0 when nothing was trained).
        warnings: cache problems for the report (entries that failed their integrity check, an unusable folder).
        device: where they were trained and are read (``"cpu"``, ``"cuda"``).
        placement: where each group this call trained ran, when groups spread over several devices
            (``[{"device": "cuda:1", "models": [16, …, 31]}]``, models by index); empty otherwise.
    """

    recipe: Any
    models: list[Any]
    masks: np.ndarray
    seeds: list[int]
    reader: Reader = field(repr=False, compare=False)
    trained: int = 0
    cached: int = 0
    mode: str = "cache"
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)
    kernel: str = ""
    threads: int = 0
    warnings: list[str] = field(default_factory=list)
    device: str = "cpu"
    placement: list[dict[str, Any]] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.models)

    def first(self, k: int) -> TrainedReferences:
        """The first ``k`` models (all of them: ``self``), with what training them all cost.

        Reference-model plans are prefix-stable (:mod:`privgate.attacks.sharing`), so an attack asking for ``k``
        models reads the first ``k`` of a larger set; the outputs kept of those models are shared.
        """
        if k >= len(self.models):
            return self
        return dataclasses.replace(self, models=self.models[:k], masks=self.masks[:k], seeds=self.seeds[:k])

    def output_batches(
        self, x: np.ndarray, batch: int = 4096, transform: Any = None
    ) -> Iterator[tuple[int, int, np.ndarray]]:
        """``(model k, first row, raw outputs)`` of every model on ``x``, ``batch`` rows at a time, model after model.

        ``transform``: an augmented view of each batch (torch models only, :class:`privgate.attacks.views.Query`).
        """
        return self.reader.output_batches(self.models, x, batch, transform)

    def logits(self, x: np.ndarray, batch: int = 4096) -> np.ndarray:
        """``[K, n, …]`` raw outputs of every model on ``x``, all held at once (:meth:`output_batches` streams)."""
        out: list[list[np.ndarray]] = [[] for _ in self.models]
        for k, _, raw in self.output_batches(x, batch):
            out[k].append(raw)
        return np.stack([np.concatenate(parts) for parts in out])

    def passes(self, x: np.ndarray) -> int | None:
        """The most forward passes over ``x`` any of these models has made under one view (None: not counted)."""
        return self.reader.passes(self.models, x)


__all__ = ["OUTPUT_MEMO_BYTES", "OUTPUT_MEMO_MAX", "Reader", "TrainSettings", "TrainedReferences", "memo_bytes"]
