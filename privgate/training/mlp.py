"""A closed-form training step for K stacked MLPs: the reference-model engine's fast kernel.

For an ``nn.Sequential`` of ``nn.Linear`` layers and Tanh/ReLU/Sigmoid/LeakyReLU: backpropagation (Rumelhart, Hinton &
Williams 1986) written out with batched matrix products (``baddbmm``) into buffers allocated once, the cross-entropy
(or BCE-with-logits) gradient in closed form with the per-row weights of
:func:`privgate.training.plan.epoch_schedule`. The same arithmetic as autograd, so models agree with the sequential
loop up to float rounding. :func:`plan` decides whether a model qualifies; anything else goes to the ``vmap`` kernel.
Formulas and why it is faster: ``docs/internals-training-stats.md``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

# activation module -> (name used by the kernel, parameter read from the module)
_ACTIVATIONS: dict[type, str] = {nn.Tanh: "tanh", nn.ReLU: "relu", nn.Sigmoid: "sigmoid", nn.LeakyReLU: "leaky_relu"}
# modules that are the identity in training mode
_NO_OPS = (nn.Identity,)


@dataclass(frozen=True)
class Layer:
    """One ``nn.Linear`` of the stack and the activation that follows it (None: none, i.e. logits)."""

    weight: str
    bias: str | None
    activation: str | None = None
    slope: float = 0.0  # LeakyReLU negative slope


@dataclass(frozen=True)
class Plan:
    """The model as the kernel runs it: flatten the input (or not), then the layers in order."""

    layers: tuple[Layer, ...]
    in_features: int
    flatten: bool


def _leaves(net: nn.Module) -> list[tuple[str, nn.Module]] | None:
    """The modules ``net`` applies, in order, when it is a plain (possibly nested) ``nn.Sequential``."""
    if type(net).forward is not nn.Sequential.forward:
        return None
    out: list[tuple[str, nn.Module]] = []
    for name, child in net.named_children():
        if isinstance(child, nn.Sequential):
            sub = _leaves(child)
            if sub is None:
                return None
            out += [(f"{name}.{n}", m) for n, m in sub]
        else:
            out.append((name, child))
    return out


def plan(net: nn.Module) -> tuple[Plan | None, str]:
    """How the kernel would run ``net``, or ``(None, why not)``.

    Qualifies: an ``nn.Sequential`` (nested ones allowed) of an optional leading
    ``nn.Flatten()``, then ``nn.Linear`` layers, each followed by at most one of
    Tanh, ReLU, Sigmoid or LeakyReLU (``nn.Identity`` and ``nn.Dropout(p=0)``
    are skipped), the last Linear followed by nothing: its output are the
    logits. No buffers, no hooks, no parameters outside the Linear layers.
    """
    leaves = _leaves(net)
    if leaves is None:
        return None, "the model is not a plain nn.Sequential"
    if any(True for _ in net.buffers()):
        return None, "the model has buffers"
    for m in net.modules():
        if m._forward_hooks or m._forward_pre_hooks or m._backward_hooks or getattr(m, "_backward_pre_hooks", None):
            return None, "the model has hooks"
    leaves = [(n, m) for n, m in leaves if not isinstance(m, _NO_OPS) and not (isinstance(m, nn.Dropout) and m.p == 0)]
    flatten = False
    if leaves and isinstance(leaves[0][1], nn.Flatten):
        fl = leaves[0][1]
        if (fl.start_dim, fl.end_dim) != (1, -1):
            return None, "nn.Flatten with non-default dimensions"
        flatten, leaves = True, leaves[1:]
    layers: list[Layer] = []
    covered: set[str] = set()
    i = 0
    while i < len(leaves):
        name, m = leaves[i]
        if not isinstance(m, nn.Linear):
            return None, f"module '{name}' ({type(m).__name__}) is not supported by the MLP kernel"
        act, slope = None, 0.0
        if i + 1 < len(leaves) and type(leaves[i + 1][1]) in _ACTIVATIONS:
            am = leaves[i + 1][1]
            act = _ACTIVATIONS[type(am)]
            if act == "leaky_relu":
                slope = float(am.negative_slope)
                if slope <= 0:
                    return None, "LeakyReLU with a non-positive slope"
            i += 1
        layers.append(Layer(f"{name}.weight", f"{name}.bias" if m.bias is not None else None, act, slope))
        covered |= {f"{name}.weight"} | ({f"{name}.bias"} if m.bias is not None else set())
        i += 1
    if not layers:
        return None, "the model has no nn.Linear layer"
    if layers[-1].activation is not None:
        return None, "the last Linear layer is followed by an activation (the kernel expects logits)"
    if set(dict(net.named_parameters())) != covered:
        return None, "the model has parameters outside its Linear layers"
    for a, b in zip(layers, layers[1:]):
        if net.get_parameter(a.weight).shape[0] != net.get_parameter(b.weight).shape[1]:
            return None, "consecutive Linear layers do not fit"
    return Plan(tuple(layers), int(net.get_parameter(layers[0].weight).shape[1]), flatten), ""


class StackedMLP:
    """Gradients of K stacked MLPs on their own mini-batches, into buffers allocated once.

    Args:
        plan: from :func:`plan`.
        names: the stacked parameters' names, in the order of the tensors
            :meth:`grads` receives and returns.
        k: number of models.
        batch: mini-batch size (rows per model per step).
        x: all training rows, float32 ``[n, ...]``, on the device the kernel runs on.
        y: their labels, int64 ``[n]``, on the same device.
        label_smoothing: ε of the recipe's label-smoothed cross-entropy (0: none).
    """

    def __init__(
        self,
        plan: Plan,
        names: list[str],
        k: int,
        batch: int,
        x: torch.Tensor,
        y: torch.Tensor,
        label_smoothing: float = 0.0,
    ) -> None:
        self.plan = plan
        self.smoothing = float(label_smoothing)
        self.x = x.reshape(len(x), -1) if plan.flatten else x
        if self.x.dim() != 2 or self.x.shape[1] != plan.in_features:
            raise ValueError(f"rows of shape {tuple(x.shape[1:])} do not fit an MLP with {plan.in_features} inputs")
        self.y = y
        pos = {n: i for i, n in enumerate(names)}
        self.w_at = [pos[layer.weight] for layer in plan.layers]
        self.b_at = [pos[layer.bias] if layer.bias else None for layer in plan.layers]
        self.k, self.batch = k, batch
        self.device = x.device
        self.h0 = torch.empty(k, batch, plan.in_features, device=self.device)
        self.out: list[torch.Tensor] = []  # output of layer j (after its activation)
        self.delta: list[torch.Tensor] = []  # dLoss/d(pre-activation) of layer j
        self.grad_buf: list[torch.Tensor | None] = [None] * len(names)
        self.red = torch.empty(k, batch, 1, device=self.device)
        self._shapes_known = False

    def pack(self, p: list[torch.Tensor]) -> list[torch.Tensor]:
        """The stacked parameters in the kernel's layout: weights as ``[K, in, out]`` (contiguous).

        ``x @ W`` with a contiguous ``W`` is measurably faster on CPU than with
        the transposed view of ``nn.Linear``'s ``[out, in]`` weight, and the
        weight gradient ``aᵀ δ`` comes out in the same layout; the optimiser
        is elementwise and does not care.
        """
        out = list(p)
        for wi in self.w_at:
            out[wi] = p[wi].transpose(1, 2).contiguous()
        return out

    def unpack(self, p: list[torch.Tensor]) -> list[torch.Tensor]:
        """The inverse of :meth:`pack` (the same transposition): ``nn.Linear``'s ``[K, out, in]`` weights again."""
        return self.pack(p)

    def _allocate(self, p: list[torch.Tensor]) -> None:
        for wi, bi in zip(self.w_at, self.b_at):
            width = p[wi].shape[2]
            self.out.append(torch.empty(self.k, self.batch, width, device=self.device))
            self.delta.append(torch.empty(self.k, self.batch, width, device=self.device))
            self.grad_buf[wi] = torch.empty_like(p[wi])
            if bi is not None:
                self.grad_buf[bi] = torch.empty_like(p[bi])
        self._shapes_known = True

    def logits(self, p: list[torch.Tensor], idx: torch.Tensor) -> torch.Tensor:
        """Forward pass of every model (parameters ``p`` packed) on its rows ``idx`` ``[K, B]``.

        Returns the last layer's buffer (valid until the next call).
        """
        idx = idx.to(self.device, non_blocking=True)
        if not self._shapes_known:
            self._allocate(p)
        torch.index_select(self.x, 0, idx.reshape(-1), out=self.h0.view(-1, self.plan.in_features))
        h = self.h0
        for j, layer in enumerate(self.plan.layers):
            z, w = self.out[j], p[self.w_at[j]]
            if self.b_at[j] is not None:
                torch.baddbmm(p[self.b_at[j]].unsqueeze(1), h, w, out=z)
            else:
                torch.bmm(h, w, out=z)
            if layer.activation == "tanh":
                z.tanh_()
            elif layer.activation == "relu":
                z.relu_()
            elif layer.activation == "sigmoid":
                z.sigmoid_()
            elif layer.activation == "leaky_relu":
                torch.nn.functional.leaky_relu_(z, layer.slope)
            h = z
        return h

    def resize(self, batch: int) -> None:
        """Use mini-batches of ``batch`` rows from now on (buffers are reallocated when it changes)."""
        if batch != self.batch:
            self.batch = batch
            self.h0 = torch.empty(self.k, batch, self.plan.in_features, device=self.device)
            self.red = torch.empty(self.k, batch, 1, device=self.device)
            for j, t in enumerate(self.out):
                self.out[j] = torch.empty(self.k, batch, t.shape[2], device=self.device)
                self.delta[j] = torch.empty(self.k, batch, t.shape[2], device=self.device)

    def clipped_grads(
        self, p: list[torch.Tensor], idx: torch.Tensor, w: torch.Tensor, clip: float, scale: torch.Tensor
    ) -> list[torch.Tensor]:
        """DP-SGD's clipped gradient sum for every model, before noise (Abadi et al. 2016, arXiv 1607.00133).

        ``scale[k] · Σ_b w[k, b] · min(1, clip / (‖∇ℓ_b‖ + 1e-6)) · ∇ℓ_b`` with
        ``∇ℓ_b`` the gradient of row b's own cross-entropy and ``w`` 1 for drawn
        rows, 0 for padding. A row's gradient norm comes without materialising
        its gradient: for a Linear layer the per-row weight gradient is the outer
        product ``δ_b a_bᵀ``, so ``‖·‖² = ‖δ_b‖² ‖a_b‖²`` (plus ``‖δ_b‖²`` for the
        bias) — the "ghost norm" (Goodfellow 2015, arXiv 1510.01799; Li et al.
        2021, arXiv 2110.05679). Every δ of a row is linear in its output δ, so
        scaling the rows' δ by their clip factors after the backward pass and
        only then forming ``aᵀ δ`` gives the clipped sum. Same clip factor as
        Opacus (``clip / (norm + 1e-6)``, at most 1).
        """
        last = len(self.plan.layers) - 1
        w, scale = w.to(self.device, non_blocking=True), scale.to(self.device, non_blocking=True)
        d = self._output_delta(p, idx, w)
        sq = torch.zeros(self.k, self.batch, device=self.device)
        for j in range(last, -1, -1):
            a2 = self._input_of(j).square().sum(-1)
            if self.b_at[j] is not None:
                a2 += 1.0
            sq.addcmul_(d.square().sum(-1), a2)
            if j > 0:
                d = self._backprop(p, j, d)
        factor = (clip / (sq.sqrt_() + 1e-6)).clamp_(max=1.0).mul_(w).mul_(scale.unsqueeze(1)).unsqueeze(-1)
        for j in range(last + 1):
            self._layer_grads(j, self.delta[j].mul_(factor))
        return self.grad_buf  # type: ignore[return-value]

    def _output_delta(self, p: list[torch.Tensor], idx: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        """Forward pass, then ``δ = (softmax(z) − onehot(y)) · w`` into the last layer's δ buffer.

        A single output is one logit (:mod:`privgate.outputs`): cross-entropy on
        ``[0, z]`` is BCE-with-logits, whose gradient is ``δ = (σ(z) − y) · w``. With
        label smoothing ε the one-hot target is ``(1 − ε)·one-hot + ε/K`` (K = 2 for one
        logit: ``y(1 − ε) + ε/2``), as ``F.cross_entropy(label_smoothing=ε)``'s.
        """
        z = self.logits(p, idx)
        idx, w = idx.to(self.device, non_blocking=True), w.to(self.device, non_blocking=True)
        d, red = self.delta[len(self.plan.layers) - 1], self.red
        wk = w.unsqueeze(-1)
        eps = self.smoothing
        if z.shape[-1] == 1:
            torch.sigmoid(z, out=d)
            target = self.y[idx].unsqueeze(-1).to(d.dtype)
            if eps:
                target = target * (1 - eps) + eps / 2
            return d.sub_(target).mul_(wk)
        torch.amax(z, -1, keepdim=True, out=red)
        torch.sub(z, red, out=d)
        d.exp_()
        torch.sum(d, -1, keepdim=True, out=red)
        red.reciprocal_().mul_(wk)
        d.mul_(red)
        if eps:
            d.sub_(wk * (eps / z.shape[-1]))
            d.scatter_add_(-1, self.y[idx].unsqueeze(-1), wk * -(1 - eps))
            return d
        d.scatter_add_(-1, self.y[idx].unsqueeze(-1), wk.neg())
        return d

    @staticmethod
    def _activation_backward(layer: Layer, g: torch.Tensor, a: torch.Tensor) -> None:
        """``g ← g ⊙ act'`` in place, the derivative taken from the activation's output ``a``."""
        if layer.activation == "tanh":
            torch.ops.aten.tanh_backward.grad_input(g, a, grad_input=g)
        elif layer.activation == "sigmoid":
            torch.ops.aten.sigmoid_backward.grad_input(g, a, grad_input=g)
        elif layer.activation == "relu":
            torch.ops.aten.threshold_backward.grad_input(g, a, 0.0, grad_input=g)
        elif layer.activation == "leaky_relu":
            torch.ops.aten.leaky_relu_backward.grad_input(g, a, layer.slope, True, grad_input=g)

    def grads(self, p: list[torch.Tensor], idx: torch.Tensor, w: torch.Tensor) -> list[torch.Tensor]:
        """Gradient of ``sum_b w[k, b] · CE(model_k(x[idx[k, b]]), y[idx[k, b]])`` for every model k.

        ``p`` and the gradients are in the packed layout (:meth:`pack`). The
        returned tensors are the kernel's buffers: valid until the next call.
        """
        d = self._output_delta(p, idx, w)
        for j in range(len(self.plan.layers) - 1, -1, -1):
            self._layer_grads(j, d)
            if j > 0:
                d = self._backprop(p, j, d)
        return self.grad_buf  # type: ignore[return-value]

    def _input_of(self, j: int) -> torch.Tensor:
        """What layer j multiplies: the input rows for the first layer, else the previous layer's output."""
        return self.out[j - 1] if j > 0 else self.h0

    def _layer_grads(self, j: int, d: torch.Tensor) -> None:
        """Layer j's weight gradient ``aᵀ δ`` and bias gradient ``Σ_b δ`` into their buffers."""
        torch.bmm(self._input_of(j).transpose(1, 2), d, out=self.grad_buf[self.w_at[j]])
        if self.b_at[j] is not None:
            torch.sum(d, 1, out=self.grad_buf[self.b_at[j]])

    def _backprop(self, p: list[torch.Tensor], j: int, d: torch.Tensor) -> torch.Tensor:
        """δ of layer j − 1 from layer j's: ``(δ Wᵀ) ⊙ act'``, into its buffer."""
        below = self.delta[j - 1]
        torch.bmm(d, p[self.w_at[j]].transpose(1, 2), out=below)
        self._activation_backward(self.plan.layers[j - 1], below, self.out[j - 1])
        return below


__all__ = ["Layer", "Plan", "StackedMLP", "plan"]
