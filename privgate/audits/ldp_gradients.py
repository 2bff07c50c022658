"""Gradients of a real model on real data, as the LDP game needs them: per example, per trial, batched.

A :class:`FunctionalModel` views an ``nn.Module`` as a function of one flat parameter vector θ
(``torch.func.functional_call``): per-example gradients, gradients at per-example parameters and input
gradients come from chunked ``vmap(grad(...))`` calls, and the losses of K trials at their own updated models
are one batched call in float64 (one LDP-SGD step moves θ so little that float32 would blur the sign the
distinguisher reads). The loss is :func:`privgate.outputs.nll`, its output kind fixed once from a probe
batch (``vmap`` allows no data-dependent branch).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable

import torch
from torch import nn
from torch.func import functional_call, grad, vmap

from privgate.outputs import LOGITS, kind_of, nll

#: Most tensor elements one batched call materialises (trials × d or rows × d), about 64 MiB of float32.
CHUNK_ELEMENTS = 1 << 24


def rows_per_chunk(d: int, elements: int = CHUNK_ELEMENTS) -> int:
    """Rows of d values that fit in ``elements``: at least 16."""
    return max(16, elements // max(1, d))


class FunctionalModel:
    """An ``nn.Module`` (eval mode, no gradient hooks) as f(x; θ) of a flat θ, in float32 and float64."""

    def __init__(self, module: nn.Module, probe: torch.Tensor) -> None:
        self.module = copy.deepcopy(module).float().eval()
        self.module64 = copy.deepcopy(module).double().eval()
        named = [(n, p) for n, p in self.module.named_parameters() if p.requires_grad]
        self.names = [n for n, _ in named]
        self.shapes = [tuple(p.shape) for _, p in named]
        self.numels = [p.numel() for _, p in named]
        self.d = int(sum(self.numels))
        self.buffers = {n: b for n, b in self.module.named_buffers()}
        self.buffers64 = {n: b for n, b in self.module64.named_buffers()}
        with torch.no_grad():
            out = self.module(probe[: min(len(probe), 64)].float())
        self.kind = kind_of(out) or LOGITS
        self.frozen = {n: p.detach() for n, p in self.module.named_parameters() if not p.requires_grad}
        self.frozen64 = {n: p.detach() for n, p in self.module64.named_parameters() if not p.requires_grad}

    def flat(self) -> torch.Tensor:
        """θ: the trainable parameters as one float32 vector of length d."""
        params = dict(self.module.named_parameters())
        return torch.cat([params[n].detach().reshape(-1) for n in self.names])

    def unflatten(self, theta: torch.Tensor) -> dict[str, torch.Tensor]:
        """``[..., d]`` → {name: ``[..., *shape]``}."""
        lead = theta.shape[:-1]
        parts = torch.split(theta, self.numels, dim=-1)
        return {n: p.reshape(*lead, *s) for n, p, s in zip(self.names, parts, self.shapes)}

    def _loss_fn(self, double: bool) -> Callable[[dict[str, torch.Tensor], torch.Tensor, torch.Tensor], torch.Tensor]:
        module = self.module64 if double else self.module
        state = {**(self.buffers64 if double else self.buffers), **(self.frozen64 if double else self.frozen)}
        kind = self.kind

        def loss(params: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            out = functional_call(module, {**params, **state}, (x.unsqueeze(0),))
            return nll(out, y.unsqueeze(0), kind=kind)

        return loss

    def grads(self, theta: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """``[P, d]``: ∇_θ f(xᵢ; θ) for every row of x at one θ ``[d]``."""
        loss = self._loss_fn(False)
        params = self.unflatten(theta.float())
        fn = vmap(grad(loss), in_dims=(None, 0, 0))
        return self._chunked(lambda sl: self._flatten_grads(fn(params, x[sl], y[sl])), len(y))

    def grads_at(self, thetas: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """``[P, d]``: ∇_θ f(xᵢ; θᵢ), each row at its own parameters ``thetas[i]``."""
        loss = self._loss_fn(False)
        fn = vmap(grad(loss), in_dims=(0, 0, 0))
        return self._chunked(
            lambda sl: self._flatten_grads(fn(self.unflatten(thetas[sl].float()), x[sl], y[sl])), len(y)
        )

    def input_grads(self, theta: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """``[P, ...]``: ∇_x f(xᵢ; θ), the gradient FGSM follows."""
        loss = self._loss_fn(False)
        params = self.unflatten(theta.float())
        fn = vmap(grad(loss, argnums=1), in_dims=(None, 0, 0))
        return torch.cat([fn(params, x[sl], y[sl]) for sl in self._slices(len(y))])

    def losses(self, theta: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """``[P]`` float64: f(xᵢ; θ) at one θ."""
        loss = self._loss_fn(True)
        params = self.unflatten(theta.double())
        fn = vmap(loss, in_dims=(None, 0, 0))
        with torch.no_grad():
            return torch.cat([fn(params, x[sl].double(), y[sl]) for sl in self._slices(len(y))])

    def losses_at(self, thetas: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """``[K]`` float64: f(xₖ; θₖ), trial k at its own model ``thetas[k]`` (float64)."""
        loss = self._loss_fn(True)
        fn = vmap(loss, in_dims=(0, 0, 0))
        with torch.no_grad():
            return fn(self.unflatten(thetas.double()), x.double(), y)

    def _flatten_grads(self, g: dict[str, torch.Tensor]) -> torch.Tensor:
        return torch.cat([g[n].reshape(g[n].shape[0], -1) for n in self.names], dim=1).detach()

    def _slices(self, n: int) -> list[slice]:
        step = rows_per_chunk(self.d)
        return [slice(i, min(n, i + step)) for i in range(0, n, step)]

    def _chunked(self, fn: Callable[[slice], torch.Tensor], n: int) -> torch.Tensor:
        return torch.cat([fn(sl) for sl in self._slices(n)])


def pool_size(rows: int, d: int, cap: int = 2048, elements: int = CHUNK_ELEMENTS) -> int:
    """How many examples to precompute gradients for: all rows up to ``cap``, fewer for very wide models."""
    return int(max(1, min(rows, cap, max(16, elements // max(1, d)))))


def radius_for(theta: torch.Tensor) -> float:
    """‖C‖₂ of the parameter ball C: twice ‖θ_t‖ (1 for θ_t = 0), so θ_t lies well inside and Π_C rarely acts."""
    n = float(theta.norm())
    return 2.0 * n if n > 0 and math.isfinite(n) else 1.0


__all__ = ["CHUNK_ELEMENTS", "FunctionalModel", "pool_size", "radius_for", "rows_per_chunk"]
