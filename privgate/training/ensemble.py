"""K trained models of one recipe, and their outputs on the audit rows, one batch at a time.

:func:`privgate.training.engine.train_ensemble` returns an :class:`Ensemble`;
reference-model attacks (shadow models, Shokri et al. 2017, arXiv 1610.05820;
LiRA, Carlini et al. 2022, arXiv 2112.03570; RMIA, Zarifzadeh et al. 2024,
arXiv 2312.03262) read the models' outputs through :meth:`Ensemble.output_batches`,
so no ``[K, n, classes]`` matrix is ever held unless asked for.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from privgate.recipe import Recipe

#: Most bytes of reference-model outputs :meth:`Ensemble.output_batches` keeps for the next attack (64 MiB).
OUTPUT_MEMO_BYTES = 64 << 20


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
            ``"loop"`` (``recipe.train`` per model) or ``""`` (nothing trained).
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
    #: raw outputs kept by :meth:`output_batches` (shared by copies made with ``dataclasses.replace``)
    _outputs: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def __len__(self) -> int:
        return len(self.states)

    def first(self, k: int) -> Ensemble:
        """The first ``k`` models (all of them: ``self``), with what training them all cost.

        Reference-model plans are prefix-stable (:mod:`privgate.attacks.sharing`),
        so an attack asking for ``k`` models reads the first ``k`` of a larger
        set. Kept outputs of those models come along.
        """
        if k >= len(self.states):
            return self
        import dataclasses

        memo = self._outputs.get("x")
        kept = {} if memo is None else {"x": (memo[0], memo[1], [m for m in memo[2] if m[0] < k])}
        return dataclasses.replace(
            self, states=self.states[:k], masks=self.masks[:k], seeds=self.seeds[:k], _outputs=kept
        )

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

    def output_batches(self, x: np.ndarray, batch: int = 4096) -> Iterator[tuple[int, int, np.ndarray]]:
        """``(model k, first row, raw outputs)`` of every model on ``x``, one batch of rows at a time.

        The outputs are float64 (the forward pass's float32, cast), model after
        model in state order, ``batch`` rows at a time in row order: the pieces of
        :meth:`logits`, without ever holding more than one batch of one model
        (on a GPU, where the rows stay on the device while every model runs,
        one model's outputs: one transfer back per model instead of per batch).

        When all K models' raw outputs on ``x`` fit in :data:`OUTPUT_MEMO_BYTES`
        (in the forward pass's own dtype, so keeping them loses nothing), they are
        kept for the next call on the same array — the attacks that share these
        models (RMIA, LiRA, the learned attack) run the forward passes once.
        """
        memo = self._outputs.get("x")
        if memo is not None and memo[0] is x and memo[1] == batch:
            for k, i, out in memo[2]:
                yield k, i, out.double().numpy()
            return
        kept: list[tuple[int, int, torch.Tensor]] | None = []
        size = 0
        net = self._model()
        xt = torch.as_tensor(np.asarray(x), dtype=torch.float32)
        resident = self.device != "cpu" and _fits(xt, self.device)
        layout = torch.channels_last if self.device.startswith("cuda") and xt.dim() == 4 else torch.contiguous_format
        if resident:  # on a GPU: the rows cross once, not once per model; channels-last convolutions
            xt = xt.to(self.device).contiguous(memory_format=layout)
            net = net.to(memory_format=layout)
        with torch.no_grad():
            for k, state in enumerate(self.states):
                net.load_state_dict(state)
                net.eval()
                pieces: Any
                if resident:  # one transfer back per model
                    whole = torch.cat([net(xt[i : i + batch]) for i in range(0, len(xt), batch)]).cpu()
                    pieces = [whole[i : i + batch] for i in range(0, len(xt), batch)]
                else:
                    pieces = (net(xt[i : i + batch].to(self.device)).cpu() for i in range(0, len(xt), batch))
                for i, out in zip(range(0, len(xt), batch), pieces):
                    if kept is not None:
                        size += out.element_size() * out.numel()
                        # the whole set would be about K times the first model's: decide early
                        kept = kept if size * (len(self.states) if k == 0 else 1) <= OUTPUT_MEMO_BYTES else None
                        if kept is not None:
                            kept.append((k, i, out))
                    yield k, i, out.double().numpy()
        if kept is not None:
            self._outputs["x"] = (x, batch, kept)


def _fits(xt: torch.Tensor, device: str) -> bool:
    """Whether ``xt`` may stay on ``device`` while the models run: a quarter of its free memory at most."""
    if not device.startswith("cuda"):
        return False
    free, _ = torch.cuda.mem_get_info(torch.device(device))
    return xt.element_size() * xt.numel() <= free // 4


__all__ = ["OUTPUT_MEMO_BYTES", "Ensemble"]
