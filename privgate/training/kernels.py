"""Gradient kernels: how K stacked models compute their gradients, each on its own mini-batch, in one step.

:func:`gradient_kernel` chooses the **MLP kernel** (:mod:`privgate.training.mlp`) for an ``nn.Sequential`` of Linear
layers and Tanh/ReLU/Sigmoid/LeakyReLU, else the **vmap kernel** for a model without buffers: ``torch.func.vmap`` over
``torch.func.grad`` of a ``functional_call``. Used by the engine (:mod:`privgate.training.engine`) and the federated
simulation (:mod:`privgate.audits.federated.simulate`).
"""

from __future__ import annotations

import copy
from typing import Any, NamedTuple

import torch
from torch import nn

from privgate import outputs
from privgate.recipe.rng import seeded
from privgate.training import mlp


class NotVectorisable(Exception):
    """The vectorised engine cannot train this recipe; the message says why."""


class Kernel(NamedTuple):
    """How a stack of models computes its gradients (see :func:`gradient_kernel`).

    Attributes:
        params: the stacked parameters in the kernel's layout (train these in place).
        grads: ``grads(params, idx [K, B], weights [K, B])`` → one gradient per tensor of ``params``.
        name: ``"mlp"`` or ``"vmap"``.
        unpack: ``unpack(params)`` → the parameters in ``stack_module_state``'s layout again.
    """

    params: list[torch.Tensor]
    grads: Any
    name: str
    unpack: Any


def gradient_kernel(
    first: nn.Module,
    last: nn.Module,
    p: list[torch.Tensor],
    names: list[str],
    xt: torch.Tensor,
    yt: torch.Tensor,
    batch: int,
    kernel: str = "auto",
    label_smoothing: float = 0.0,
) -> Kernel:
    """The kernel that computes the gradients of K stacked models, each on its own mini-batch.

    ``first`` and ``last`` are the first and last of the K freshly built models
    (``p``: their parameters stacked, in ``names`` order); ``xt``/``yt`` all
    training rows and labels; ``batch`` the rows per model per step. ``kernel``:
    ``"mlp"`` — the closed-form kernel of :mod:`privgate.training.mlp` (plain
    Linear/activation stacks only); ``"vmap"`` — ``torch.func`` on any model
    without buffers; ``"auto"`` — the MLP kernel when the model qualifies and
    reproduces the model's own forward pass, else vmap. Raises
    :class:`NotVectorisable` when neither can train the model. ``label_smoothing``:
    the recipe's ε (both kernels train on the label-smoothed cross-entropy).
    """
    from torch.func import functional_call, grad, vmap

    k = len(p[0])
    if kernel in ("auto", "mlp"):
        mlp_plan, why = mlp.plan(first)
        if mlp_plan is not None:
            engine = mlp.StackedMLP(mlp_plan, names, k, batch, xt, yt, label_smoothing)
            why = mlp_kernel_mismatch(engine, first, engine.pack(p), xt)
            if not why:
                return Kernel(engine.pack(p), engine.grads, "mlp", engine.unpack)
        if kernel == "mlp":
            raise NotVectorisable(f"the MLP kernel cannot train this model: {why}")
    base = copy.deepcopy(first)
    base.train()
    if k > 1 and not _functional_call_matches(base, last, [t[-1] for t in p], names, xt):
        raise NotVectorisable(
            "calling the model with another model's parameters (torch.func.functional_call) does not reproduce "
            "that model's output, e.g. because its forward is patched on the instance"
        )
    # vmap allows no data-dependent branch: every model's outputs are read as the first's (privgate.outputs)
    with torch.no_grad(), seeded(None):
        kind = outputs.kind_of(base(xt[: min(64, len(xt))])) or outputs.LOGITS
    base = base.to("meta")

    def loss_of(theta: list[torch.Tensor], xb: torch.Tensor, yb: torch.Tensor, wb: torch.Tensor) -> torch.Tensor:
        out = functional_call(base, dict(zip(names, theta)), (xb,))
        return (outputs.nll(out, yb, kind, "none", label_smoothing) * wb).sum()

    step_grads = vmap(grad(loss_of), randomness="different")

    def grad_fn(theta: list[torch.Tensor], b: torch.Tensor, wb: torch.Tensor) -> list[torch.Tensor]:
        return list(step_grads(theta, xt[b], yt[b], wb))

    return Kernel(p, grad_fn, "vmap", lambda q: q)


def check_stackable(recipe: Any) -> None:
    """For :func:`gradient_kernel`'s callers: a known optimiser, and nothing its kernels do not replicate.

    Raises :class:`~privgate.errors.RecipeError` for an unknown optimiser and :class:`NotVectorisable`
    for a recipe that trains in bf16 or with augmentation (trained by ``train_model`` instead).
    """
    from privgate.errors import RecipeError
    from privgate.recipe import OPTIMIZERS

    if recipe.optimizer not in OPTIMIZERS:
        raise RecipeError(
            f"recipe '{recipe.name}': unknown optimizer '{recipe.optimizer}' (use {', '.join(map(repr, OPTIMIZERS))})."
        )
    if recipe.precision != "fp32" or recipe.augment is not None:
        raise NotVectorisable("the recipe trains in bf16 or with augmentation, which these kernels do not replicate")


def mlp_kernel_mismatch(engine: Any, net: nn.Module, p: list[torch.Tensor], xt: torch.Tensor) -> str:
    """Empty when the MLP kernel's forward pass equals ``net``'s own on a few rows; else why not."""
    rows = min(4, len(xt), engine.batch)
    idx = torch.zeros((engine.k, engine.batch), dtype=torch.long)
    idx[:, :rows] = torch.arange(rows)
    try:
        with torch.no_grad():
            mine = engine.logits(p, idx)[0, :rows].cpu()
            net.train()
            theirs = net(xt[:rows].cpu())
    except Exception as exc:  # noqa: BLE001 - any failure means: use the general kernel
        return f"its forward pass failed ({exc.__class__.__name__})"
    if theirs.shape != mine.shape or not torch.allclose(mine, theirs, rtol=1e-4, atol=1e-5):
        return "its forward pass differs from the model's own"
    return ""


def _functional_call_matches(
    base: nn.Module, other: nn.Module, theta: list[torch.Tensor], names: list[str], xt: torch.Tensor
) -> bool:
    """Whether ``base`` run with ``other``'s parameters gives ``other``'s output on a few rows."""
    from torch.func import functional_call

    rows = xt[: min(4, len(xt))]
    try:
        with torch.no_grad():
            other.train()
            mine = functional_call(base, dict(zip(names, theta)), (rows,))
            theirs = other(rows)
    except Exception:  # noqa: BLE001 - the vmap attempt will report the real error
        return True
    return bool(mine.shape == theirs.shape and torch.allclose(mine, theirs, rtol=1e-4, atol=1e-5))


__all__ = ["Kernel", "NotVectorisable", "check_stackable", "gradient_kernel", "mlp_kernel_mismatch"]
