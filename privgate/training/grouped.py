"""The grouped kernel: a stack of convolutions, normalisations and linear layers run as one K-times-wider network.

K convolutions with the same hyper-parameters are one grouped convolution (Krizhevsky et al. 2012), ``groups=K·g``;
BatchNorm (Ioffe & Szegedy 2015, arXiv 1502.03167), GroupNorm, pooling and activations then act per model; linear
layers are one ``baddbmm`` on ``[K, B, F]``, LayerNorm per model (Ba et al. 2016, arXiv 1607.06450). Autograd computes
the backward pass. :func:`plan` decides whether a model qualifies (an ``nn.Sequential`` of :data:`SUPPORTED` layers,
no hooks) and the engine compares the kernel's forward pass with the model's own before using it.
Details: ``docs/internals-training-stats.md``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from privgate.recipe.rng import seeded
from privgate.training.dropout import SPATIAL as DROPOUTS

#: Layers that act on each channel or element alone: applied as they are, whatever the model axis.
ELEMENTWISE = (
    nn.ReLU, nn.ReLU6, nn.LeakyReLU, nn.ELU, nn.SELU, nn.CELU, nn.GELU, nn.SiLU, nn.Mish, nn.Tanh, nn.Sigmoid,
    nn.Hardtanh, nn.Hardswish, nn.Hardsigmoid, nn.Softplus, nn.Softsign, nn.Tanhshrink,
)  # fmt: skip
POOLS = (
    nn.MaxPool1d, nn.MaxPool2d, nn.AvgPool1d, nn.AvgPool2d, nn.AdaptiveAvgPool1d, nn.AdaptiveAvgPool2d,
    nn.AdaptiveMaxPool1d, nn.AdaptiveMaxPool2d, nn.LPPool1d, nn.LPPool2d,
)  # fmt: skip
MAX_POOLS = (nn.MaxPool1d, nn.MaxPool2d)
CONVS = (nn.Conv1d, nn.Conv2d)
NORMS = (nn.BatchNorm1d, nn.BatchNorm2d, nn.GroupNorm, nn.LayerNorm)
LAST_AXIS = (nn.Softmax, nn.LogSoftmax)  # outputs read as probabilities (privgate.outputs)
SUPPORTED = (
    *CONVS, *NORMS, nn.Linear, nn.Flatten, nn.Unflatten, nn.Identity, *ELEMENTWISE, *POOLS, *DROPOUTS, *LAST_AXIS,
)  # fmt: skip

SPATIAL, FLAT = "spatial", "flat"  # [B, K·C, *s] and [K, B, F]


@dataclass(frozen=True)
class Layer:
    """One module of the stack, the layout it gets, and how it runs on K models at once."""

    name: str
    module: nn.Module
    layout: str


@dataclass(frozen=True)
class Plan:
    """The model as the kernel runs it."""

    layers: tuple[Layer, ...]
    input_layout: str


def _no_hooks(net: nn.Module) -> bool:
    return not any(
        m._forward_hooks or m._forward_pre_hooks or m._backward_hooks or getattr(m, "_backward_pre_hooks", None)
        for m in net.modules()
    )


def plan(net: nn.Module, row_shape: tuple[int, ...]) -> tuple[Plan | None, str]:
    """How the kernel would run ``net`` on rows of ``row_shape``, or ``(None, why not)``."""
    from privgate.training.mlp import _leaves

    leaves = _leaves(net)
    if leaves is None:
        return None, "the model is not a plain nn.Sequential"
    if not _no_hooks(net):
        return None, "the model has hooks"
    layout = SPATIAL if len(row_shape) >= 2 else FLAT
    dims = len(row_shape) - 1  # spatial dimensions of the current tensor (when spatial)
    first = layout
    covered: set[str] = set()
    layers: list[Layer] = []
    for name, m in leaves:
        kind, before = type(m), layout
        if kind not in SUPPORTED:
            return None, f"module '{name}' ({kind.__name__}) is not supported by the grouped kernel"
        if isinstance(m, CONVS):
            if layout != SPATIAL or dims != (1 if kind is nn.Conv1d else 2) or m.padding_mode != "zeros":
                return None, f"convolution '{name}' does not fit the kernel (input layout or padding mode)"
        elif isinstance(m, (nn.BatchNorm1d, nn.BatchNorm2d)):
            if m.momentum is None or (kind is nn.BatchNorm2d and (layout != SPATIAL or dims != 2)):
                return None, f"BatchNorm '{name}' without momentum or on another input shape"
            if kind is nn.BatchNorm1d and layout == SPATIAL and dims != 1:
                return None, f"BatchNorm1d '{name}' on a {dims}-D input"
        elif kind is nn.LayerNorm:
            if layout != FLAT or len(m.normalized_shape) != 1:
                return None, f"LayerNorm '{name}' over more than the last axis of flat features"
        elif kind is nn.GroupNorm and layout == FLAT:
            return None, f"GroupNorm '{name}' on flat features"
        elif kind is nn.Linear and layout != FLAT:
            return None, f"linear layer '{name}' on unflattened inputs"
        elif isinstance(m, POOLS):
            if layout != SPATIAL or getattr(m, "return_indices", False):
                return None, f"pooling '{name}' on flat features or returning indices"
        elif kind is nn.Flatten:
            if (m.start_dim, m.end_dim) != (1, -1):
                return None, f"nn.Flatten '{name}' with non-default dimensions"
            layout, dims = FLAT, 0
        elif kind is nn.Unflatten:
            if layout != FLAT or m.dim not in (1, -1) or len(m.unflattened_size) < 2:
                return None, f"nn.Unflatten '{name}' does not make images of flat features"
            layout, dims = SPATIAL, len(m.unflattened_size) - 1
        elif kind in DROPOUTS and DROPOUTS[kind] >= 0 and (layout != SPATIAL or dims != DROPOUTS[kind]):
            return None, f"{kind.__name__} '{name}' on inputs of another shape"
        elif kind in LAST_AXIS and (layout != FLAT or m.dim not in (1, -1)):
            return None, f"{kind.__name__} '{name}' not over the classes of flat outputs"
        if isinstance(m, POOLS) and kind.__name__.endswith("2d") != (dims == 2):
            return None, f"pooling '{name}' on inputs of another shape"
        if kind is not nn.Identity:
            layers.append(Layer(name, m, before))
        covered |= {f"{name}.{n}" for n, _ in m.named_parameters()} | {f"{name}.{n}" for n, _ in m.named_buffers()}
    every = {n for n, _ in net.named_parameters()} | {n for n, _ in net.named_buffers()}
    if every != covered:
        return None, "the model has parameters or buffers outside its layers"
    return Plan(tuple(layers), first), ""


#: On the CPU, how many bytes one layer's activations of the models run in one call may take: about a core's
#: L2 cache. K models' activations of a batch soon outgrow the caches, and then every per-channel layer
#: (BatchNorm, ReLU, pooling, their backward passes) waits on memory. Measured on the 12×12 two-conv
#: network of ``benchmarks/engine/cnn_engine.py`` (1.2 MB per model): with one backward pass over all calls, 4
#: models per call took 0.85-0.9 of the CPU time of all 16 at once, 2 per call about the same as 4, 1 per
#: call 1.3x; since each call's backward pass follows its forward pass (:mod:`privgate.training.stacked`),
#: 2 per call took 0.94 of the CPU time of 4 (median of 6 alternating runs, faster in all 6), 8 per call 1.2x.
CALL_BYTES = 3 << 20
#: The fewest models one call runs (when there are as many): one model per call loses the grouped layers' gain.
MIN_PER_CALL = 2
#: On a GPU, the share of its free memory the activations of the models run in one call may take.
GPU_SHARE = 0.5


def models_per_call(
    net: nn.Module, rows: torch.Tensor, batch: int, k: int, device: str | torch.device, value_bytes: int = 4
) -> int:
    """How many of the ``k`` models one forward pass of the kernel runs (:data:`CALL_BYTES` on the CPU).

    The largest activation of ``net`` (a plain ``nn.Sequential``, as :func:`plan` requires) on one of
    ``rows``, times ``batch`` rows, times 4 bytes, is one model's share. On a GPU all ``k`` at once, unless
    their activations (every layer's output, kept for the backward pass: :data:`GPU_SHARE` of the free
    memory at most; ``value_bytes`` 2 for a bf16 forward pass) would not fit. The result does not change a
    model: every layer of the kernel keeps the models apart, and the loss is their sum.
    """
    import copy

    from privgate.training.mlp import _leaves

    dev = torch.device(device)
    if k <= MIN_PER_CALL or dev.type not in ("cpu", "cuda"):
        return k
    largest = total = 0
    with torch.no_grad(), seeded(None):
        h = rows[:1].cpu()
        for _, m in _leaves(copy.deepcopy(net).eval()) or []:
            h = m(h)
            largest = max(largest, h.numel())
            total += h.numel()
    if dev.type == "cuda":
        free, _ = torch.cuda.mem_get_info(dev)
        per_model = max(1, 2 * total * batch * value_bytes)  # outputs and what their backward passes keep
        return max(1, min(k, int(GPU_SHARE * free) // per_model))
    share = max(1, largest * batch * 4)
    per_call = MIN_PER_CALL
    while per_call < k and per_call * 2 * share <= CALL_BYTES:
        per_call *= 2
    return min(per_call, k)


class GroupedForward:
    """The forward pass of G stacked models of one :class:`Plan` (see the module docstring).

    Called with the stacked parameters and buffers (``{name: [G, …]}``; BatchNorm
    statistics updated in place), this step's dropout masks (``{"<layer>.mask":
    [G, rows, …]}``) and the rows ``[G, rows, *row_shape]``; returns ``[G, rows, outputs]``.
    """

    def __init__(self, plan: Plan, per_call: int = 0) -> None:
        self.plan = plan
        self.per_call = per_call  # models per call (0: all; :func:`models_per_call`)
        self._ops: dict[type, Callable] = {
            nn.Conv1d: self._conv,
            nn.Conv2d: self._conv,
            nn.BatchNorm1d: self._batch_norm,
            nn.BatchNorm2d: self._batch_norm,
            nn.GroupNorm: self._group_norm,
            nn.LayerNorm: self._layer_norm,
            nn.Linear: self._linear,
            nn.Flatten: self._flatten,
            nn.Unflatten: self._unflatten,
            nn.Softmax: self._last_axis,
            nn.LogSoftmax: self._last_axis,
        }

    def __call__(
        self,
        params: dict[str, torch.Tensor],
        buffers: dict[str, torch.Tensor],
        masks: dict[str, torch.Tensor],
        x: torch.Tensor,
    ) -> torch.Tensor:
        g, rows = x.shape[0], x.shape[1]
        if self.plan.input_layout == SPATIAL:
            if x.dim() == 5:  # oneDNN's and cuDNN's grouped 2-d convolutions are faster on NHWC (channels-last)
                # [G, B, C, H, W] → [B, G·C, H, W] laid out channels-last: one copy
                hh, ww = x.shape[3], x.shape[4]
                h = x.permute(1, 3, 4, 0, 2).contiguous().view(rows, hh, ww, g * x.shape[2]).permute(0, 3, 1, 2)
            else:
                h = x.transpose(0, 1).reshape(rows, g * x.shape[2], *x.shape[3:])
        else:
            h = x
        state = {**params, **buffers}
        layers = self.plan.layers
        for i, layer in enumerate(layers):
            kind = type(layer.module)
            if kind is nn.ReLU and i + 1 < len(layers) and isinstance(layers[i + 1].module, MAX_POOLS):
                continue  # applied after the max-pooling, on fewer values (module docstring)
            if isinstance(layer.module, MAX_POOLS) and i and type(layers[i - 1].module) is nn.ReLU:
                h = F.relu(layer.module(h))
            elif kind is nn.ReLU and i and isinstance(layers[i - 1].module, (nn.BatchNorm1d, nn.BatchNorm2d)):
                h = torch.relu_(h)  # in place: BatchNorm's backward pass needs its input, not its output
            elif kind in DROPOUTS:
                h = self._dropout(layer, h, masks.get(f"{layer.name}.mask"), g)
            elif kind in self._ops:
                h = self._ops[kind](layer, h, state, g)
            else:  # elementwise and pooling: channels stay apart
                h = layer.module(h)
        if h.dim() != 3 or h.shape[0] != g:
            raise RuntimeError(f"the grouped kernel ended with a tensor of shape {tuple(h.shape)}")
        return h

    @staticmethod
    def _get(state: dict[str, torch.Tensor], layer: Layer, what: str) -> torch.Tensor | None:
        return state.get(f"{layer.name}.{what}")

    def _conv(self, layer: Layer, h: torch.Tensor, state: dict[str, torch.Tensor], g: int) -> torch.Tensor:
        m = layer.module
        w = self._get(state, layer, "weight")
        b = self._get(state, layer, "bias")
        conv = F.conv2d if isinstance(m, nn.Conv2d) else F.conv1d
        return conv(
            h,
            w.reshape(-1, *w.shape[2:]),
            None if b is None else b.reshape(-1),
            m.stride,
            m.padding,
            m.dilation,
            m.groups * g,
        )

    @staticmethod
    def _to_channels(h: torch.Tensor, g: int) -> torch.Tensor:
        """Flat ``[G, B, C]`` → ``[B, G·C]`` (a per-channel layer's input)."""
        return h.transpose(0, 1).reshape(h.shape[1], g * h.shape[2])

    @staticmethod
    def _from_channels(h: torch.Tensor, g: int) -> torch.Tensor:
        return h.reshape(h.shape[0], g, -1).transpose(0, 1)

    def _batch_norm(self, layer: Layer, h: torch.Tensor, state: dict[str, torch.Tensor], g: int) -> torch.Tensor:
        m = layer.module
        flat = layer.layout == FLAT
        x = self._to_channels(h, g) if flat else h
        w, b = self._get(state, layer, "weight"), self._get(state, layer, "bias")
        mean, var = self._get(state, layer, "running_mean"), self._get(state, layer, "running_var")
        tracked = self._get(state, layer, "num_batches_tracked")
        if tracked is not None:
            tracked.add_(1)
        out = F.batch_norm(
            x,
            None if mean is None else mean.view(-1),  # views of the stacked buffers: updated in place
            None if var is None else var.view(-1),
            None if w is None else w.reshape(-1),
            None if b is None else b.reshape(-1),
            True,
            float(m.momentum),
            m.eps,
        )
        return self._from_channels(out, g) if flat else out

    def _group_norm(self, layer: Layer, h: torch.Tensor, state: dict[str, torch.Tensor], g: int) -> torch.Tensor:
        m = layer.module
        w, b = self._get(state, layer, "weight"), self._get(state, layer, "bias")
        return F.group_norm(
            h, m.num_groups * g, None if w is None else w.reshape(-1), None if b is None else b.reshape(-1), m.eps
        )

    def _layer_norm(self, layer: Layer, h: torch.Tensor, state: dict[str, torch.Tensor], g: int) -> torch.Tensor:
        m = layer.module
        out = F.layer_norm(h, m.normalized_shape, None, None, m.eps)
        w, b = self._get(state, layer, "weight"), self._get(state, layer, "bias")
        if w is not None:
            out = out * w.unsqueeze(1)
        if b is not None:
            out = out + b.unsqueeze(1)
        return out

    def _linear(self, layer: Layer, h: torch.Tensor, state: dict[str, torch.Tensor], g: int) -> torch.Tensor:
        w, b = self._get(state, layer, "weight"), self._get(state, layer, "bias")
        if b is None:
            return torch.bmm(h, w.transpose(1, 2))
        return torch.baddbmm(b.unsqueeze(1), h, w.transpose(1, 2))

    def _flatten(self, layer: Layer, h: torch.Tensor, state: dict[str, torch.Tensor], g: int) -> torch.Tensor:
        if layer.layout == FLAT:
            return h
        if h.dim() == 4 and h.is_contiguous(memory_format=torch.channels_last) and not h.is_contiguous():
            # [B, H, W, G·C] in memory → [G, B, C·H·W]: one copy, whose backward hands the layers before a
            # channels-last gradient (a plain reshape's gives them NCHW, and each converts it back: two copies
            # of the largest activation per step, and slower pooling, ReLU and BatchNorm backward passes)
            b, gc, hh, ww = h.shape
            return h.permute(0, 2, 3, 1).reshape(b, hh * ww, g, gc // g).permute(2, 0, 3, 1).reshape(g, b, -1)
        return h.reshape(h.shape[0], g, -1).transpose(0, 1)

    def _unflatten(self, layer: Layer, h: torch.Tensor, state: dict[str, torch.Tensor], g: int) -> torch.Tensor:
        size = tuple(layer.module.unflattened_size)
        return h.transpose(0, 1).reshape(h.shape[1], g * size[0], *size[1:])

    @staticmethod
    def _last_axis(layer: Layer, h: torch.Tensor, state: dict[str, torch.Tensor], g: int) -> torch.Tensor:
        return F.softmax(h, -1) if isinstance(layer.module, nn.Softmax) else F.log_softmax(h, -1)

    @staticmethod
    def _dropout(layer: Layer, h: torch.Tensor, mask: torch.Tensor | None, g: int) -> torch.Tensor:
        if mask is None:  # p = 0
            return h
        mask = mask.to(h.dtype)  # a bf16 forward pass multiplies in bf16, as seeded_dropout does
        if layer.layout == FLAT:
            return h * mask
        # [G, B, C, …] → [B, G·C, …]
        return h * mask.transpose(0, 1).reshape(mask.shape[1], g * mask.shape[2], *mask.shape[3:])


def mismatch(plan: Plan, net: nn.Module, rows: torch.Tensor) -> str:
    """Empty when the kernel's training-mode forward pass equals ``net``'s own on ``rows``; else why not.

    Both run on copies in training mode — BatchNorm on the batch's statistics,
    updating its running ones, which must agree too — with the same dropout
    masks (:mod:`privgate.training.dropout`).
    """
    import copy

    from privgate.training.dropout import DropoutPlan, seeded_dropout

    if len(rows) < 2:
        return "too few rows to compare its forward pass with the model's own"
    own, mine = copy.deepcopy(net).train(), copy.deepcopy(net).train()
    try:
        with torch.no_grad(), seeded(None):
            with seeded_dropout(own, torch.Generator().manual_seed(0)):
                theirs = own(rows)
            params = {n: t.unsqueeze(0) for n, t in mine.named_parameters()}
            buffers = {n: t.unsqueeze(0).clone() for n, t in mine.named_buffers()}
            masks = DropoutPlan(mine, rows, [0]).masks([0], len(rows), rows.device)
            out = GroupedForward(plan)(params, buffers, masks, rows.unsqueeze(0))[0]
    except Exception as exc:  # noqa: BLE001 - any failure means: use the general kernel
        return f"its forward pass failed ({exc.__class__.__name__}: {str(exc)[:120]})"
    if theirs.shape != out.shape or not torch.allclose(out, theirs, rtol=1e-4, atol=1e-5):
        return "its forward pass differs from the model's own"
    for name, b in own.named_buffers():
        if not torch.allclose(buffers[name][0].to(b.dtype), b, rtol=1e-4, atol=1e-5):
            return f"its running statistics differ from the model's own ({name})"
    return ""


__all__ = ["GroupedForward", "Plan", "SUPPORTED", "mismatch", "plan"]
