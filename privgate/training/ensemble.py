"""K trained models of one recipe, and their outputs on the audit rows, one batch at a time.

:func:`privgate.training.engine.train_ensemble` returns an :class:`Ensemble`;
reference-model attacks (shadow models, Shokri et al. 2017, arXiv 1610.05820;
LiRA, Carlini et al. 2022, arXiv 2112.03570; RMIA, Zarifzadeh et al. 2024,
arXiv 2312.03262) read the models' outputs through :meth:`Ensemble.output_batches`,
so no ``[K, n, classes]`` matrix is ever held unless asked for.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
import torch
from torch import nn

from privgate.recipe import Recipe

#: Reference-model outputs :meth:`Ensemble.output_batches` keeps for the next attack: at least 64 MiB, more up to the
#: audit rows' own size, never more than 1 GiB (:func:`memo_bytes`).
OUTPUT_MEMO_BYTES, OUTPUT_MEMO_MAX = 64 << 20, 1 << 30


class Trained(NamedTuple):
    """What :func:`privgate.training.engine.train_models` returns: one group's states, how they were trained."""

    states: list[dict[str, torch.Tensor]]
    mode: str  # "vectorised" or "sequential"
    notes: list[str]
    kernel: str  # "mlp", "mlp-dp", "grouped", "vmap" (vectorised), "loop" or "function" (sequential)


@dataclass
class Ensemble:
    """K trained models of one recipe.

    Attributes:
        recipe: the recipe they were trained with.
        states: one ``state_dict`` per model (CPU tensors).
        masks: ``[K, n]`` booleans, row k = the training rows of model k.
        seeds: the seed of each model.
        trained: how many models this call trained (0 when all came from the cache).
        cached: how many models came from the cache.
        mode: ``"vectorised"``, ``"sequential"`` or ``"cache"`` (nothing trained).
        threads: torch threads used for training (0 when nothing was trained).
        kernel: how the trained models were trained: ``"mlp"`` (the closed-form
            kernel of :mod:`privgate.training.mlp`), ``"mlp-dp"`` (the same kernel
            running DP-SGD for a recipe with :attr:`~privgate.recipe.Recipe.dp_sgd`),
            ``"grouped"`` (a stack of convolutions, normalisations and linear layers run
            as one K-times-wider network, :mod:`privgate.training.grouped`),
            ``"vmap"`` (``torch.func``, :mod:`privgate.training.stacked`),
            ``"loop"`` (``train_model`` per model) or ``""`` (nothing trained).
        device: where they were trained and where :meth:`logits` runs (``"cpu"``, ``"cuda"``).
        seconds: wall time of the call.
        notes: sentences for the report (fallbacks).
        warnings: cache problems for the report: entries that failed their
            integrity check and were retrained, a cache folder that could not be used.
        architecture: for a recipe of the user's own training function without a
            ``model_factory`` (:mod:`privgate.training.function`), a model the
            states load into (one it returned, or a copy of the target); None:
            ``recipe.build()``.
    """

    recipe: Recipe
    states: list[dict[str, torch.Tensor]]
    masks: np.ndarray
    seeds: list[int]
    trained: int = 0
    cached: int = 0
    mode: str = "cache"
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)
    kernel: str = ""
    threads: int = 0
    warnings: list[str] = field(default_factory=list)
    device: str = "cpu"
    architecture: nn.Module | None = field(default=None, repr=False, compare=False)
    #: raw outputs kept by :meth:`output_batches` and its pass counts (shared by copies: ``dataclasses.replace``)
    _outputs: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def __len__(self) -> int:
        return len(self.states)

    def first(self, k: int) -> Ensemble:
        """The first ``k`` models (all of them: ``self``), with what training them all cost.

        Reference-model plans are prefix-stable (:mod:`privgate.attacks.sharing`),
        so an attack asking for ``k`` models reads the first ``k`` of a larger
        set; the outputs kept of those models are shared (the same dictionary).
        """
        if k >= len(self.states):
            return self
        import dataclasses

        return dataclasses.replace(self, states=self.states[:k], masks=self.masks[:k], seeds=self.seeds[:k])

    def logits(self, x: np.ndarray, batch: int = 4096) -> np.ndarray:
        """Logits of every model on ``x``: float64 array ``[K, n, classes]`` (eval mode, no grad, on :attr:`device`).

        Holds all K models' outputs at once; :meth:`output_batches` streams them.
        """
        out: list[list[np.ndarray]] = [[] for _ in self.states]
        for k, _, raw in self.output_batches(x, batch):
            out[k].append(raw)
        return np.stack([np.concatenate(parts) for parts in out])

    def _model(self) -> nn.Module:
        """A model of the ensemble's architecture on :attr:`device`, to load each state into."""
        if self.architecture is None:
            return self.recipe.build().to(self.device)
        import warnings

        with warnings.catch_warnings():  # moving a TorchScript module reads .grad of its non-leaf parameters
            warnings.simplefilter("ignore", UserWarning)
            return self.architecture.to(self.device)

    def output_batches(
        self, x: np.ndarray, batch: int = 4096, transform: Callable[[torch.Tensor], torch.Tensor] | None = None
    ) -> Iterator[tuple[int, int, np.ndarray]]:
        """``(model k, first row, raw outputs)`` of every model on ``x``, ``batch`` rows at a time, model after model.

        The outputs are float64 (the forward pass's float32, cast). ``transform``: a hashable
        function of a batch on the device (an augmented view, :class:`privgate.attacks.views.Query`),
        applied to each batch where it already is. Each model runs once over ``x`` per call: its
        forward passes go a byte-bounded number of rows at a time
        (:func:`privgate.training.augment.slab_rows`), their outputs stay on the device and cross
        back once per model. On a GPU the rows stay there while every model runs.

        Every model's outputs on ``(x, transform)`` are kept for the next call on the same array
        while all outputs kept take no more than :func:`memo_bytes` of ``x`` — so LiRA, RMIA and the
        learned attack, which share these models, run each model's forward passes once per view;
        :meth:`passes` counts them.
        """
        from privgate.training.augment import slab_rows

        memo, counts = self._outputs.setdefault("memo", {}), self._outputs.setdefault("passes", {})
        key = (id(x), transform)
        entry = memo.get(key)
        if entry is None or entry[0] is not x:
            entry = memo[key] = (x, {})
        kept: dict[int, torch.Tensor] = entry[1]
        seen = counts.get(id(x))
        if seen is None or seen[0] is not x:
            seen = counts[id(x)] = (x, {})
        net: nn.Module | None = None
        xt: torch.Tensor | None = None
        resident = False
        layout = torch.contiguous_format
        rows = slab_rows(np.shape(x)[1:], getattr(transform, "shift", 0), most=batch)
        with torch.no_grad():
            for k, state in enumerate(self.states):
                whole = kept.get(k)
                if whole is None:
                    if net is None:
                        net = self._model()
                        xt = torch.as_tensor(np.asarray(x), dtype=torch.float32)
                        resident = self.device != "cpu" and _fits(xt, self.device)
                        if self.device.startswith("cuda") and xt.dim() == 4:
                            layout = torch.channels_last  # channels-last convolutions on a GPU
                            net = net.to(memory_format=layout)
                        if resident:  # on a GPU: the rows cross once, not once per model
                            xt = xt.to(self.device).contiguous(memory_format=layout)
                    assert xt is not None
                    net.load_state_dict(state)
                    net.eval()
                    outs = []
                    for i in range(0, len(xt), rows):
                        xb = xt[i : i + rows].to(self.device, non_blocking=True)
                        if transform is not None:
                            xb = transform(xb).contiguous(memory_format=layout)
                        outs.append(net(xb))
                    whole = (torch.cat(outs) if outs else torch.zeros((0,))).cpu()  # one transfer back per model
                    seen[1][(transform, k)] = seen[1].get((transform, k), 0) + 1
                    held = self._outputs.get("held", 0)
                    if held + whole.element_size() * whole.numel() <= memo_bytes(x):
                        kept[k] = whole
                        self._outputs["held"] = held + whole.element_size() * whole.numel()
                for i in range(0, len(whole), batch):
                    yield k, i, whole[i : i + batch].double().numpy()

    def passes(self, x: np.ndarray) -> int:
        """The most forward passes over ``x`` any of these models has made under one transform (0: none yet)."""
        seen = self._outputs.get("passes", {}).get(id(x))
        if seen is None or seen[0] is not x:
            return 0
        mine = [n for (_, k), n in seen[1].items() if k < len(self.states)]
        return max(mine, default=0)


def memo_bytes(x: np.ndarray) -> int:
    """The most bytes of outputs kept for later attacks: as many as the audit rows take, within the two bounds."""
    return int(min(max(OUTPUT_MEMO_BYTES, np.asarray(x).nbytes), OUTPUT_MEMO_MAX))


def _fits(xt: torch.Tensor, device: str) -> bool:
    """Whether ``xt`` may stay on ``device`` while the models run: a quarter of its free memory at most."""
    if not device.startswith("cuda"):
        return False
    free, _ = torch.cuda.mem_get_info(torch.device(device))
    return xt.element_size() * xt.numel() <= free // 4


__all__ = ["OUTPUT_MEMO_BYTES", "OUTPUT_MEMO_MAX", "Ensemble", "Trained", "memo_bytes"]
