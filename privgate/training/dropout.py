"""Dropout masks drawn per model from the model's own generator, the same way trained one at a time or K at once.

Dropout (Srivastava et al. 2014, JMLR 15) draws from torch's global generator, which K models trained at once would
share. Here every model draws ``keep = rand(rows, *mask_shape, generator) ≥ p`` from its own CPU generator, seeded
by :func:`privgate.training.plan.dropout_seed`, per dropout call in call order; :func:`seeded_dropout` (sequential)
and :class:`DropoutPlan` / :class:`StackedDropout` (engine) draw the same masks, so a model does not depend on the
models beside it, the device or the cache. Details: ``docs/internals-training-stats.md``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import nn

from privgate.recipe.rng import seeded

#: Dropout modules whose masks this module draws, and how many trailing (spatial) dimensions share a draw.
SPATIAL: dict[type, int] = {nn.Dropout: -1, nn.Dropout1d: 1, nn.Dropout2d: 2, nn.Dropout3d: 3}


def is_dropout(module: nn.Module) -> bool:
    """A dropout module this module handles (exact types: a subclass may do anything in its forward)."""
    return type(module) in SPATIAL and "forward" not in vars(module)


def mask_shape(module: nn.Module, shape: Sequence[int]) -> tuple[int, ...] | None:
    """The shape of one row's mask for an input of ``shape`` (rows first); None when the input is not batched."""
    spatial = SPATIAL[type(module)]
    if spatial < 0:
        return tuple(shape[1:])
    if len(shape) != spatial + 2:  # an unbatched input: torch's own rules apply
        return None
    return (int(shape[1]),) + (1,) * spatial


def draw(gen: torch.Generator, rows: int, shape: Sequence[int], p: float) -> torch.Tensor:
    """``rows`` masks of ``shape``: ``(rand ≥ p) / (1 − p)`` from ``gen`` (CPU, float32); zeros when p = 1."""
    u = torch.rand((rows, *shape), generator=gen)
    if p >= 1.0:
        return torch.zeros_like(u)
    return (u >= p).to(torch.float32).div_(1.0 - p)


def _masked_forward(module: nn.Module, gen: torch.Generator, x: torch.Tensor) -> torch.Tensor:
    if not module.training or module.p == 0:
        return x
    shape = mask_shape(module, x.shape)
    if shape is None:
        return type(module).forward(module, x)
    return x * draw(gen, x.shape[0], shape, float(module.p)).to(device=x.device, dtype=x.dtype)


@contextmanager
def seeded_dropout(net: nn.Module, gen: torch.Generator) -> Iterator[None]:
    """While the block runs, ``net``'s dropout layers draw their masks from ``gen`` (see the module docstring)."""
    patched = [m for m in net.modules() if is_dropout(m)]
    for m in patched:
        m.forward = lambda x, m=m: _masked_forward(m, gen, x)  # type: ignore[method-assign]
    try:
        yield
    finally:
        for m in patched:
            del m.forward


class StackedDropout(nn.Module):
    """Dropout with its mask given as a buffer: what the vectorised engine puts in place of a dropout layer.

    In training, ``x · mask`` (``functional_call`` passes each model's
    ``[rows, *mask_shape]`` mask); in eval mode, or at p = 0, the identity.
    """

    def __init__(self, p: float) -> None:
        super().__init__()
        self.p = float(p)
        self.register_buffer("mask", torch.ones(()), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0:
            return x
        return x * self.mask.to(x.dtype)  # a bf16 forward pass multiplies in bf16, as seeded_dropout does


@dataclass(frozen=True)
class _Call:
    name: str
    p: float
    shape: tuple[int, ...]


class NotStackable(Exception):
    """The model's dropout cannot be drawn per model; the message says why."""


class DropoutPlan:
    """The dropout calls of one forward pass, in order, and per-model generators to draw their masks.

    Args:
        net: a model of the architecture (not modified).
        probe: a few input rows (a forward pass in eval mode records the calls).
        seeds: the dropout seed of each model (:func:`privgate.training.plan.dropout_seed`).

    Raises:
        NotStackable: a dropout layer called twice in one forward pass, or on unbatched inputs.
    """

    def __init__(self, net: nn.Module, probe: torch.Tensor, seeds: Sequence[int]) -> None:
        names = {id(m): n for n, m in net.named_modules() if is_dropout(m)}
        calls: list[_Call] = []
        seen: set[str] = set()
        hooks = []

        def record(module: nn.Module, args: tuple) -> None:
            name = names[id(module)]
            if name in seen:
                raise NotStackable(f"dropout layer '{name}' is called more than once in a forward pass")
            seen.add(name)
            shape = mask_shape(module, args[0].shape)
            if shape is None:
                raise NotStackable(f"dropout layer '{name}' gets unbatched inputs")
            if module.p > 0:
                calls.append(_Call(name, float(module.p), shape))

        for m in net.modules():
            if id(m) in names:
                hooks.append(m.register_forward_pre_hook(record))
        was_training = net.training
        try:
            with torch.no_grad(), seeded(None):
                net.eval()(probe)
        finally:
            net.train(was_training)
            for h in hooks:
                h.remove()
        self.calls = calls
        self.names = sorted(names.values())
        self.ps = {n: float(net.get_submodule(n).p) for n in self.names}
        self.gens = [torch.Generator().manual_seed(int(s)) for s in seeds]

    def install(self, base: nn.Module) -> None:
        """Put a :class:`StackedDropout` in place of every dropout layer of ``base`` (a copy the engine runs)."""
        for name in self.names:
            parent, _, child = name.rpartition(".")
            setattr(base.get_submodule(parent) if parent else base, child, StackedDropout(self.ps[name]))

    def masks(self, models: Sequence[int], rows: int, device: torch.device) -> dict[str, torch.Tensor]:
        """This step's masks of ``models`` with ``rows`` rows each: ``{"<layer>.mask": [len(models), rows, ...]}``.

        Each model draws from its own generator, its calls in forward order,
        exactly as :func:`seeded_dropout` draws them for that model alone.
        """
        per_model = [[draw(self.gens[k], rows, c.shape, c.p) for c in self.calls] for k in models]
        return {
            f"{c.name}.mask": torch.stack([m[j] for m in per_model]).to(device, non_blocking=True)
            for j, c in enumerate(self.calls)
        }


__all__ = ["DropoutPlan", "NotStackable", "SPATIAL", "StackedDropout", "draw", "is_dropout", "seeded_dropout"]
