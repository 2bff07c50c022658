"""Trained torch reference models' outputs on the audit rows, one batch at a time.

:func:`privgate.training.engine.train_ensemble` returns a :class:`~privgate.training.trained.TrainedReferences`
read through a :class:`TorchReader`; reference-model attacks (shadow models, Shokri et al. 2017, arXiv 1610.05820;
LiRA, Carlini et al. 2022, arXiv 2112.03570; RMIA, Zarifzadeh et al. 2024, arXiv 2312.03262) read the models'
outputs through :meth:`TorchReader.output_batches`, so no ``[K, n, classes]`` matrix is ever held unless asked for.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
import torch
from torch import nn

from privgate.recipe import Recipe
from privgate.training.trained import memo_bytes


class Trained(NamedTuple):
    """What :func:`privgate.training.engine.train_models` returns: one group's states, how they were trained."""

    states: list[dict[str, torch.Tensor]]
    mode: str  # "vectorised" or "sequential"
    notes: list[str]
    kernel: str  # "mlp", "mlp-dp", "grouped", "vmap" (vectorised), "loop" or "function" (sequential)


@dataclass
class TorchReader:
    """How torch reference models are read: each ``state_dict`` loaded into one model of the recipe's architecture.

    Attributes:
        recipe: the recipe the models were trained with.
        device: where :meth:`output_batches` runs (``"cpu"``, ``"cuda"``).
        architecture: for a recipe of the user's own training function without a
            ``model_factory`` (:mod:`privgate.training.function`), a model the
            states load into (one it returned, or a copy of the target); None:
            ``recipe.build()``.
        devices: with more than one, the models are read a group at a time on these, group g on
            ``devices[g % N]`` as they trained (:class:`~privgate.executors.devices.DevicePool`).
        per_group: models per group (``models_per_task``; None: all in one).
    """

    recipe: Recipe
    device: str = "cpu"
    architecture: nn.Module | None = field(default=None, repr=False, compare=False)
    devices: tuple[str, ...] = ()
    per_group: int | None = None
    #: raw outputs kept by :meth:`output_batches` and its pass counts (shared by every copy of the models)
    _outputs: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def _model(self, device: str | None = None) -> nn.Module:
        """A model of the models' architecture on ``device`` (default :attr:`device`), to load each state into; on
        another device than :attr:`device`, a copy of :attr:`architecture` (each worker its own)."""
        on = device or self.device
        if self.architecture is None:
            return self.recipe.build().to(on)
        import copy
        import warnings

        with warnings.catch_warnings():  # moving a TorchScript module reads .grad of its non-leaf parameters
            warnings.simplefilter("ignore", UserWarning)
            return (self.architecture if on == self.device else copy.deepcopy(self.architecture)).to(on)

    def module(self, state: dict[str, torch.Tensor]) -> nn.Module:
        """A model of the architecture on :attr:`device` with ``state`` loaded, in eval mode (the same module
        may come back for the next state: use it before asking for another)."""
        net = self._model()
        net.load_state_dict(state)
        return net.eval()

    def output_batches(
        self,
        states: list[dict[str, torch.Tensor]],
        x: np.ndarray,
        batch: int = 4096,
        transform: Callable[[torch.Tensor], torch.Tensor] | None = None,
    ) -> Iterator[tuple[int, int, np.ndarray]]:
        """``(model k, first row, raw outputs)`` of every model on ``x``, ``batch`` rows at a time, model after model.

        The outputs are float64 (the forward pass's float32, cast). ``transform``: a hashable
        function of a batch on the device (an augmented view, :class:`privgate.attacks.views.Query`),
        applied to each batch where it already is. Each model runs once over ``x`` per call: its
        forward passes go a byte-bounded number of rows at a time
        (:func:`privgate.training.augment.slab_rows`), their outputs stay on the device and cross
        back once per model. On a GPU the rows stay there while every model runs.

        Every model's outputs on ``(x, transform)`` are kept for the next call on the same array
        while all outputs kept take no more than :func:`memo_bytes` of ``x`` — so
        LiRA, RMIA and the learned attack, which share these models, run each model's forward passes once per view;
        :meth:`passes` counts them.
        """
        from privgate.training.augment import slab_rows

        kept, seen = self._kept(x, transform)
        rows = slab_rows(np.shape(x)[1:], getattr(transform, "shift", 0), most=batch)
        if len(self.devices) > 1 and sum(k not in kept for k in range(len(states))) > 1:
            yield from self._spread(states, x, batch, transform, rows, kept, seen)
            return
        runner: _Runner | None = None
        with torch.no_grad():
            for k, state in enumerate(states):
                fresh = None
                if k not in kept:
                    runner = runner or _Runner.on(self._model(), x, self.device)
                    fresh = runner.run(state, rows, transform)
                yield from self._emit(k, fresh, x, batch, transform, kept, seen)

    def _emit(
        self,
        k: int,
        fresh: torch.Tensor | None,
        x: np.ndarray,
        batch: int,
        transform: Any,
        kept: dict[int, torch.Tensor],
        seen: dict[Any, int],
    ) -> Iterator[tuple[int, int, np.ndarray]]:
        """Model ``k``'s outputs in batches: ``fresh`` ones (a forward pass just made: counted and kept), else the
        kept ones."""
        if fresh is not None:
            seen[(transform, k)] = seen.get((transform, k), 0) + 1
            self._keep(kept, k, fresh, x)
        whole = kept[k] if fresh is None else fresh
        for i in range(0, len(whole), batch):
            yield k, i, whole[i : i + batch].double().numpy()

    def _spread(
        self,
        states: list[dict[str, torch.Tensor]],
        x: np.ndarray,
        batch: int,
        transform: Any,
        rows: int,
        kept: dict[int, torch.Tensor],
        seen: dict[Any, int],
    ) -> Iterator[tuple[int, int, np.ndarray]]:
        """:meth:`output_batches` over :attr:`devices`: one group per device at a time, yielded in model order."""
        from privgate.executors import task_groups
        from privgate.executors.devices import DevicePool

        pool, groups, runners = DevicePool(self.devices), task_groups(len(states), self.per_group), {}
        n = len(self.devices)
        for first in range(0, len(groups), n):  # a wave: group first + j on devices[j], as group g trained
            wave = [[k for k in g if k not in kept] for g in groups[first : first + n]]
            tasks = [(states, todo, x, rows, transform, on, runners) for todo, on in zip(wave, pool.place(len(wave)))]
            outputs = pool.map(self._read_group, tasks)
            for group, todo, got in zip(groups[first : first + n], wave, outputs):
                fresh = dict(zip(todo, got))
                for k in group:
                    yield from self._emit(k, fresh.get(k), x, batch, transform, kept, seen)

    def _read_group(
        self,
        states: list[dict[str, torch.Tensor]],
        todo: list[int],
        x: np.ndarray,
        rows: int,
        transform: Any,
        device: str,
        runners: dict[str, _Runner],
    ) -> list[torch.Tensor]:
        """Models ``todo``'s outputs on ``x``, on ``device`` (a worker of :meth:`_spread`; its runner kept there)."""
        if not todo:
            return []
        with torch.no_grad():  # grad mode is per thread
            runner = runners.get(device)
            if runner is None:
                runner = runners[device] = _Runner.on(self._model(device), x, device)
            return [runner.run(states[k], rows, transform) for k in todo]

    def _kept(self, x: np.ndarray, transform: Any) -> tuple[dict[int, torch.Tensor], dict[Any, int]]:
        """The outputs kept of each model on ``(x, transform)``, and the pass counts on ``x`` (both by reference)."""
        memo, counts = self._outputs.setdefault("memo", {}), self._outputs.setdefault("passes", {})
        key = (id(x), transform)
        entry = memo.get(key)
        if entry is None or entry[0] is not x:
            entry = memo[key] = (x, {})
        seen = counts.get(id(x))
        if seen is None or seen[0] is not x:
            seen = counts[id(x)] = (x, {})
        return entry[1], seen[1]

    def _keep(self, kept: dict[int, torch.Tensor], k: int, whole: torch.Tensor, x: np.ndarray) -> None:
        """Keep model ``k``'s outputs while all kept stay within :func:`memo_bytes` of ``x``."""
        held = self._outputs.get("held", 0)
        size = whole.element_size() * whole.numel()
        if held + size <= memo_bytes(x):
            kept[k] = whole
            self._outputs["held"] = held + size

    def passes(self, states: list[Any], x: np.ndarray) -> int:
        """The most forward passes over ``x`` any of these models has made under one transform (0: none yet)."""
        seen = self._outputs.get("passes", {}).get(id(x))
        if seen is None or seen[0] is not x:
            return 0
        mine = [n for (_, k), n in seen[1].items() if k < len(states)]
        return max(mine, default=0)


@dataclass
class _Runner:
    """One model of the architecture and the rows on the device, run for one state after another."""

    net: nn.Module
    xt: torch.Tensor
    device: str
    layout: torch.memory_format = torch.contiguous_format

    @classmethod
    def on(cls, net: nn.Module, x: np.ndarray, device: str) -> _Runner:
        """The rows as a float32 tensor; on a GPU, channels-last images, and the rows resident when they fit."""
        xt = torch.as_tensor(np.asarray(x), dtype=torch.float32)
        layout = torch.contiguous_format
        if device.startswith("cuda") and xt.dim() == 4:
            layout = torch.channels_last  # channels-last convolutions on a GPU
            net = net.to(memory_format=layout)
        if device != "cpu" and _fits(xt, device):  # on a GPU: the rows cross once, not once per model
            xt = xt.to(device).contiguous(memory_format=layout)
        return cls(net, xt, device, layout)

    def run(self, state: dict[str, torch.Tensor], rows: int, transform: Any) -> torch.Tensor:
        """The model with ``state`` on every row, ``rows`` at a time, back on the CPU in one transfer."""
        self.net.load_state_dict(state)
        self.net.eval()
        outs = []
        for i in range(0, len(self.xt), rows):
            xb = self.xt[i : i + rows].to(self.device, non_blocking=True)
            if transform is not None:
                xb = transform(xb).contiguous(memory_format=self.layout)
            outs.append(self.net(xb))
        return (torch.cat(outs) if outs else torch.zeros((0,))).cpu()


def _fits(xt: torch.Tensor, device: str) -> bool:
    """Whether ``xt`` may stay on ``device`` while the models run: a quarter of its free memory at most."""
    if not device.startswith("cuda"):
        return False
    free, _ = torch.cuda.mem_get_info(torch.device(device))
    return xt.element_size() * xt.numel() <= free // 4


__all__ = ["TorchReader", "Trained"]
