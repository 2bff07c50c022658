"""The general kernel: K models of any stackable architecture trained at once with ``torch.func``.

Parameters and buffers are stacked on a leading axis (``torch.func.stack_module_state``); the forward pass is
``vmap(functional_call(base, (params_k, buffers_k), x_k))`` and one autograd backward pass of the summed losses gives
every model's gradient. BatchNorm keeps per-model running statistics (short last batches run on their real rows);
dropout and augmentation draw from each model's own generators, so models equal ``train_model``'s up to float
rounding. Any other random draw in ``forward`` is refused (:class:`NotStackable`) and the engine trains that recipe
one model at a time. Details: ``docs/internals-training-stats.md``.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from privgate import outputs
from privgate.recipe.rng import seeded
from privgate.training import augment
from privgate.training.dropout import DropoutPlan
from privgate.training.dropout import NotStackable as _DropoutNotStackable
from privgate.training.grouped import GroupedForward


class NotStackable(Exception):
    """This kernel cannot train the model K at a time; the message says why."""


@dataclass(frozen=True)
class Training:
    """What a step does beyond the plain loss of the batch: the recipe's label smoothing, precision, augmentation.

    ``augmenters``: one :class:`~privgate.training.augment.Augmenter` per model (its own generators), or empty.
    """

    label_smoothing: float = 0.0
    bf16: bool = False
    augmenters: tuple[augment.Augmenter, ...] = ()


def _aliases(net: nn.Module) -> dict[str, str]:
    """Every parameter and buffer name of ``net`` (tied ones included) → the name ``stack_module_state`` keeps."""
    out: dict[str, str] = {}
    first: dict[int, str] = {}
    for name, t in [*net.named_parameters(remove_duplicate=False), *net.named_buffers(remove_duplicate=False)]:
        out[name] = first.setdefault(id(t), name)
    return out


def unstack(template: nn.Module, stacked: dict[str, torch.Tensor], k: int) -> list[dict[str, torch.Tensor]]:
    """One ``state_dict`` per model (CPU tensors, ``template.state_dict()``'s keys) from stacked tensors."""
    alias = _aliases(template)
    keys = list(template.state_dict())
    return [{key: stacked[alias[key]][i].detach().cpu().clone() for key in keys} for i in range(k)]


def _functional_call_matches(base: nn.Module, other: nn.Module, rows: torch.Tensor) -> bool:
    """Whether ``base`` run with ``other``'s parameters and buffers gives ``other``'s output (eval mode)."""
    from torch.func import functional_call

    try:
        with torch.no_grad(), seeded(None):
            state = {**dict(other.named_parameters()), **dict(other.named_buffers())}
            mine = functional_call(base.eval(), state, (rows,))
            theirs = other.eval()(rows)
    except Exception:  # noqa: BLE001 - the training attempt reports the real error
        return True
    return bool(mine.shape == theirs.shape and torch.allclose(mine, theirs, rtol=1e-4, atol=1e-5))


def batch_lengths(w: torch.Tensor) -> np.ndarray:
    """Rows per model in one step of a schedule: the count of ``w[k] > 0`` (``w`` on the CPU)."""
    return np.count_nonzero(w.numpy() > 0, axis=1)


class StackedModel:
    """K models of one architecture, stacked: their parameters (what the optimiser updates) and buffers.

    Args:
        nets: the K freshly built models (same architecture), on the CPU.
        x: all training rows on the training device.
        y: their labels on the same device.
        dropout_seeds: one dropout seed per model (:func:`privgate.training.plan.dropout_seed`).
        grouped: run the K models with this forward pass of the grouped kernel
            (:mod:`privgate.training.grouped`) instead of ``vmap``.
        training: the recipe's label smoothing, precision and augmentation (default: none of them).

    Raises:
        NotStackable: running the model with another model's parameters does
            not reproduce that model (a ``forward`` patched on the instance), or
            its dropout cannot be drawn per model.
    """

    def __init__(
        self,
        nets: Sequence[nn.Module],
        x: torch.Tensor,
        y: torch.Tensor,
        dropout_seeds: Sequence[int],
        grouped: GroupedForward | None = None,
        training: Training | None = None,
    ):
        from torch.func import stack_module_state, vmap

        template = nets[0]
        self.k = len(nets)
        self.device = x.device
        self.x, self.y = x, y
        probe = x[: min(4, len(x))].cpu()
        if self.k > 1 and not _functional_call_matches(copy.deepcopy(template), copy.deepcopy(nets[-1]), probe):
            raise NotStackable(
                "calling the model with another model's parameters (torch.func.functional_call) does not reproduce "
                "that model's output, e.g. because its forward is patched on the instance"
            )
        base = copy.deepcopy(template)
        try:
            self.dropout = DropoutPlan(base, probe, dropout_seeds)
        except _DropoutNotStackable as exc:
            raise NotStackable(str(exc)) from None
        # vmap allows no data-dependent branch: every model's outputs are read as the first's (privgate.outputs)
        with torch.no_grad(), seeded(None):
            self.kind = outputs.kind_of(copy.deepcopy(template).eval()(x[: min(64, len(x))].cpu())) or outputs.LOGITS
        self.dropout.install(base)
        self.base = base.to("meta").train()
        params, buffers = stack_module_state(list(nets))
        self.names = list(params)
        self.params = [params[n].detach().to(self.device).requires_grad_(True) for n in self.names]
        self.buffers = {n: b.detach().to(self.device) for n, b in buffers.items()}
        self._template = template
        self._vmapped = vmap(self._call, randomness="error")
        self._grouped = grouped
        self.training = training or Training()
        self._epoch: tuple[torch.Tensor, torch.Tensor] | None = None  # this epoch's schedule on the device
        self._step = 0

    def begin_epoch(self, idx: torch.Tensor, w: torch.Tensor) -> None:
        """Move one epoch's schedule (:func:`privgate.training.plan.epoch_schedule`) to the device at once.

        On a GPU the steps then read their rows and weights from the device (one transfer per epoch instead
        of two per step); :meth:`grads` must then be called once per step, in order.
        """
        if self.device.type == "cpu":
            return
        pin = torch.cuda.is_available() and self.device.type == "cuda"
        self._epoch = tuple(  # type: ignore[assignment]
            (t.pin_memory() if pin else t).to(self.device, non_blocking=True) for t in (idx, w)
        )
        self._step = 0

    def _call(
        self, params: dict[str, torch.Tensor], buffers: dict[str, torch.Tensor], xb: torch.Tensor
    ) -> torch.Tensor:
        from torch.func import functional_call

        out = functional_call(self.base, (params, buffers), (xb,))
        return out[0] if isinstance(out, (tuple, list)) else out

    def grads(self, p: list[torch.Tensor], idx: torch.Tensor, w: torch.Tensor) -> list[torch.Tensor]:
        """Gradient of ``Σ_b w[k, b] · loss(model_k(x[idx[k, b]]), y[idx[k, b]])`` for every model k.

        ``idx``/``w`` are one step of :func:`privgate.training.plan.epoch_schedule`
        (CPU): model k's batch is its first ``L_k`` rows with ``w > 0`` (``L_k = 0``:
        it sits the step out). Models are run in groups of equal ``L_k`` on those
        rows only (the grouped kernel: at most its ``per_call`` models per call,
        :func:`privgate.training.grouped.models_per_call`), and their buffers
        (BatchNorm statistics) are updated in place.
        """
        epoch, step = self._epoch, self._step
        self._step += 1
        calls = self._calls(batch_lengths(w))
        pieces = self._pieces(p, [models for _, models in calls]) if len(calls) > 1 else {}
        loss = torch.zeros((), device=self.device)
        written: list[tuple[list[int], dict[str, torch.Tensor]]] = []
        # calls on pieces of the stacks: each call's backward pass right after its forward pass, while its
        # activations are still in the cache (one backward pass over the summed loss reads every call's back from
        # memory); the same gradients, bit for bit: each call's loss enters the sum with derivative 1
        each = bool(pieces)
        piece_grads: dict[int, tuple[torch.Tensor | None, ...]] = {}
        for n, models in calls:
            part, buffers, copies = self._call_loss(p, pieces, models, n, idx, w, epoch, step)
            if each:
                piece_grads[models[0]] = torch.autograd.grad(part, pieces[models[0]], allow_unused=True)
            else:
                loss = loss + part
            if copies:
                written.append((models, buffers))
        if each:
            grads = self._join(p, piece_grads, {models[0]: len(models) for _, models in calls})
        else:
            grads = torch.autograd.grad(loss, p, allow_unused=True)
        with torch.no_grad():
            for sel, buffers in written:
                for name, b in buffers.items():
                    self.buffers[name][sel] = b
        return [torch.zeros_like(t) if g is None else g for t, g in zip(p, grads)]

    def _calls(self, lengths: np.ndarray) -> list[tuple[int, list[int]]]:
        """The step's forward calls: ``(L, models)`` for the models of equal batch length ``L > 0``, at most the
        grouped kernel's ``per_call`` models per call."""
        groups: dict[int, list[int]] = {}
        for k, n in enumerate(lengths):
            if n:
                groups.setdefault(int(n), []).append(k)
        per_call = (self._grouped.per_call if self._grouped is not None else 0) or self.k
        return [(n, ms[i : i + per_call]) for n, ms in groups.items() for i in range(0, len(ms), per_call)]

    def _call_loss(
        self,
        p: list[torch.Tensor],
        pieces: dict[int, list[torch.Tensor]],
        models: list[int],
        n: int,
        idx: torch.Tensor,
        w: torch.Tensor,
        epoch: tuple[torch.Tensor, torch.Tensor] | None,
        step: int,
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor], bool]:
        """One call's weighted loss, the buffers it ran with, and whether they are copies to write back."""
        every = len(models) == self.k
        # the grouped kernel on consecutive models: views of the stacks (its BatchNorm updates them in place)
        run = self._grouped is not None and models[-1] - models[0] + 1 == len(models)
        sel = slice(models[0], models[-1] + 1) if run else models
        if models[0] in pieces:
            params = dict(zip(self.names, pieces[models[0]]))
        else:
            params = dict(zip(self.names, p if every else [t[sel] for t in p]))
        buffers = self.buffers if every else {name: b[sel] for name, b in self.buffers.items()}
        on_device = epoch is not None and (every or run)
        span = slice(None) if every else sel
        if on_device:
            rows = epoch[0][step, span, :n]  # type: ignore[index]
        else:
            rows = idx[models, :n].to(self.device, non_blocking=True)
        out = self._forward(params, buffers, models, n, rows)
        if on_device:
            weights = epoch[1][step, span, :n].reshape(-1)  # type: ignore[index]
        else:
            weights = w[models, :n].to(self.device, non_blocking=True).reshape(-1)
        flat = out.float().reshape(len(models) * n, *out.shape[2:])
        losses = outputs.nll(flat, self.y[rows].reshape(-1), self.kind, "none", self.training.label_smoothing)
        return (losses * weights).sum(), buffers, not every and not run

    def _forward(
        self,
        params: dict[str, torch.Tensor],
        buffers: dict[str, torch.Tensor],
        models: list[int],
        n: int,
        rows: torch.Tensor,
    ) -> torch.Tensor:
        """``models``' outputs on their ``rows`` (``[models, n, …]``), with their dropout masks and augmentation."""
        tr = self.training
        masks = self.dropout.masks(models, n, self.device)
        xb = self.x[rows]
        if tr.augmenters:
            xb = augment.stacked(tr.augmenters, models, xb)
        try:
            with torch.autocast(self.device.type, dtype=torch.bfloat16) if tr.bf16 else nullcontext():
                if self._grouped is not None:
                    return self._grouped(params, buffers, masks, xb)
                return self._vmapped(params, {**buffers, **masks}, xb)
        except RuntimeError as exc:
            if "randomness" in str(exc):
                raise NotStackable(
                    "the model draws random numbers in training outside nn.Dropout layers (e.g. F.dropout in its "
                    "forward), which would be shared by the models trained at once"
                ) from None
            raise

    @staticmethod
    def _join(
        p: list[torch.Tensor], piece_grads: dict[int, tuple[torch.Tensor | None, ...]], sizes: dict[int, int]
    ) -> list[torch.Tensor]:
        """The stacks' gradients from the calls' (``{first model: gradients of its piece}``); zero elsewhere."""
        out = []
        for i, t in enumerate(p):
            parts, at = [], 0
            for first in sorted(piece_grads):
                if first > at:
                    parts.append(t.new_zeros(first - at, *t.shape[1:]))
                g = piece_grads[first][i]
                parts.append(t.new_zeros(sizes[first], *t.shape[1:]) if g is None else g)
                at = first + sizes[first]
            if at < t.shape[0]:
                parts.append(t.new_zeros(t.shape[0] - at, *t.shape[1:]))
            out.append(torch.cat(parts))
        return out

    def _pieces(self, p: list[torch.Tensor], calls: list[list[int]]) -> dict[int, list[torch.Tensor]]:
        """``{first model of a call: its parameters}`` from one ``split`` of each stack, when every call's models
        are consecutive (else empty). One split's backward writes the gradient once; a slice per call would
        allocate a zero gradient of the whole stack per call and add them up."""
        if self._grouped is None or any(m[-1] - m[0] + 1 != len(m) for m in calls):
            return {}
        bounds, sizes, at = sorted((m[0], len(m)) for m in calls), [], 0
        for first, size in bounds:
            if first < at:
                return {}
            sizes += [first - at, size] if first > at else [size]
            at = first + size
        if at < self.k:
            sizes.append(self.k - at)
        split = [t.split(sizes) for t in p]
        starts = np.cumsum([0, *sizes[:-1]]).tolist()
        return {first: [s[starts.index(first)] for s in split] for first, _ in bounds}

    def states(self, p: list[torch.Tensor]) -> list[dict[str, torch.Tensor]]:
        """One CPU ``state_dict`` per model: trained parameters ``p`` and the updated buffers."""
        return unstack(self._template, {**dict(zip(self.names, p)), **self.buffers}, self.k)


def random_forward(net: nn.Module, rows: torch.Tensor) -> bool:
    """Whether ``net``'s training-mode forward pass draws random numbers besides its dropout layers' masks.

    Runs a copy twice on ``rows`` with the same dropout masks
    (:func:`~privgate.training.dropout.seeded_dropout`) under two different
    seeds of torch's generator; different outputs mean another random draw. A
    forward pass that fails (e.g. BatchNorm on one row) counts as not random.
    """
    from privgate.training.dropout import seeded_dropout

    outs = []
    try:
        for seed in (1, 2):
            probe = copy.deepcopy(net).train()
            with torch.no_grad(), seeded(seed), seeded_dropout(probe, torch.Generator().manual_seed(0)):
                out = probe(rows)
            outs.append(out[0] if isinstance(out, (tuple, list)) else out)
    except Exception:  # noqa: BLE001 - training reports the real error
        return False
    return not torch.equal(outs[0], outs[1])


__all__ = ["NotStackable", "StackedModel", "Training", "batch_lengths", "random_forward", "unstack"]
