"""The recipe's optimiser applied to K stacked models at once, with ``torch.optim``'s exact update rules.

Adam (Kingma & Ba 2014, arXiv 1412.6980), AdamW (Loshchilov & Hutter 2017, arXiv 1711.05101) and SGD with momentum
(Nesterov's or not) and L2 weight decay, in place on stacked ``[K, ...]`` parameters: each model with its own step
count (a model without a batch stays as it was), its own learning rate (:mod:`privgate.training.schedules`) and its
gradient clipped by its own norm. No step reads a device value back to the host.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from privgate.recipe import Recipe
from privgate.training import schedules


def _per_model(values: np.ndarray, like: torch.Tensor) -> torch.Tensor:
    """``[K]`` float32 values on ``like``'s device (one small host-to-device copy, no synchronisation)."""
    return torch.as_tensor(values, dtype=torch.float32).to(like.device, non_blocking=True)


def _view(v: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    return v.view((len(v),) + (1,) * (t.dim() - 1))


def adam_update(
    p: list[torch.Tensor],
    g: list[torch.Tensor],
    m1: list[torch.Tensor],
    m2: list[torch.Tensor],
    tmp: list[torch.Tensor],
    steps: np.ndarray,
    lr: float | np.ndarray,
    b1: float,
    b2: float,
    eps: float,
    decay: float = 0.0,
    step_tensor: torch.Tensor | None = None,
) -> None:
    """``torch.optim.Adam``'s (``decay > 0``: ``AdamW``'s) update on stacked tensors, in place.

    m ← m + (1−β1)(g − m); v ← β2·v + (1−β2)·g²;
    p ← p − lr/(1−β1^t) · m / (√v / √(1−β2^t) + eps), with t each model's step
    count and any L2 penalty already added to ``g``; AdamW first decays
    p ← p·(1 − lr·decay). ``lr`` is one rate, or one per model. Nothing is
    allocated, which matters on CPU: fresh multi-megabyte tensors every step
    cost page faults. ``step_tensor``: a scalar on the device the fused kernel
    reads the step count from (filled here, never read back).
    """
    same = bool((steps == steps[0]).all())
    one_lr = np.ndim(lr) == 0
    if same and one_lr and hasattr(torch, "_fused_adam_"):
        # one pass over memory; the same arithmetic as torch.optim.Adam(fused=True) / AdamW(fused=True)
        if step_tensor is None:
            step_tensor = torch.zeros((), device=p[0].device)
        step_tensor.fill_(float(steps[0]))
        fused = torch._fused_adamw_ if decay else torch._fused_adam_
        fused(
            p, g, m1, m2, [], [step_tensor] * len(p), lr=float(lr), beta1=b1, beta2=b2, weight_decay=decay, eps=eps,
            amsgrad=False, maximize=False,
        )  # fmt: skip
        return
    lrs = np.full(len(steps), float(lr)) if one_lr else np.asarray(lr, dtype=np.float64)
    if decay:
        if one_lr:
            torch._foreach_mul_(p, 1.0 - float(lr) * decay)
        else:
            keep = _per_model(1.0 - lrs * decay, p[0])
            for pi in p:
                pi.mul_(_view(keep, pi))
    torch._foreach_lerp_(m1, g, 1 - b1)
    torch._foreach_mul_(m2, b2)
    torch._foreach_addcmul_(m2, g, g, value=1 - b2)
    for v, o in zip(m2, tmp):
        torch.sqrt(v, out=o)
    if same and one_lr:
        t = float(steps[0])
        torch._foreach_div_(tmp, math.sqrt(1 - b2**t))
        torch._foreach_add_(tmp, eps)
        torch._foreach_addcdiv_(p, m1, tmp, value=-float(lr) / (1 - b1**t))
        return
    tt = torch.as_tensor(steps, dtype=torch.float64).clamp(min=1.0)
    bc2 = (1 - b2**tt).sqrt().float().to(p[0].device, non_blocking=True)
    size = (-torch.as_tensor(lrs, dtype=torch.float64) / (1 - b1**tt)).float().to(p[0].device, non_blocking=True)
    for pi, mi, o in zip(p, m1, tmp):
        o.div_(_view(bc2, pi)).add_(eps)
        torch.div(mi, o, out=o)
        pi.addcmul_(o, _view(size, pi))


def clip_per_model(g: list[torch.Tensor], max_norm: float) -> None:
    """Scale each model's whole gradient to at most ``max_norm`` (L2), in place: ``clip_grad_norm_`` per model.

    Model k's norm is the norm of its tensors' norms and its factor
    ``min(1, max_norm / (norm + 1e-6))``, as ``torch.nn.utils.clip_grad_norm_`` computes them.
    """
    k = len(g[0])
    norms = torch.stack([torch.linalg.vector_norm(t.reshape(k, -1), dim=1) for t in g])
    coef = (max_norm / (torch.linalg.vector_norm(norms, dim=0) + 1e-6)).clamp_(max=1.0)
    for t in g:
        t.mul_(_view(coef, t))


def optimise(
    recipe: Recipe,
    p: list[torch.Tensor],
    grad_fn: Any,
    schedule: Any,
    epoch_hook: Callable[[torch.Tensor, torch.Tensor], None] | None = None,
) -> None:
    """``recipe.epochs`` epochs of the recipe's optimiser on the stacked parameters ``p``, in place.

    ``schedule()`` gives one epoch of row indices ``[S, K, B]``, row weights
    ``[S, K, B]`` (CPU tensors: each kernel moves what it needs to its device)
    and which models step ``[S, K]``; ``grad_fn(p, idx [K, B], weights [K, B])``
    returns one gradient per tensor of ``p``, on ``p``'s device, called once
    per step in order (``epoch_hook(idx, weights)`` first, once per epoch, when
    given: a kernel can move the epoch to its device at once). Models without a
    batch at a step (smaller subsets) stay exactly as they were, optimiser state
    included. Per step, as ``train_model`` does: clip each model's gradient,
    add the L2 penalty (or decay AdamW's weights), update with the rate of the
    model's own step.
    """
    k = len(p[0])
    opt = recipe.optimizer
    adam = opt in ("adam", "adamw")
    lr, wd, mom = float(recipe.lr), float(recipe.weight_decay), float(recipe.momentum)
    b1, b2 = (float(b) for b in recipe.betas)
    eps = 1e-8
    decay = wd if opt == "adamw" else 0.0
    l2 = 0.0 if opt == "adamw" else wd
    clip = None if recipe.clip_grad_norm is None else float(recipe.clip_grad_norm)
    nesterov = bool(recipe.nesterov) and not adam
    m1 = [torch.zeros_like(t) for t in p] if (adam or mom) else []
    m2 = [torch.zeros_like(t) for t in p] if adam else []
    steps = np.zeros(k)  # per-model optimiser step count
    tmp = [torch.empty_like(t) for t in p] if adam else []
    step_tensor = torch.zeros((), device=p[0].device) if adam else None
    scheduled = recipe.schedule != "constant" or bool(recipe.warmup_steps or recipe.warmup_fraction)
    totals: np.ndarray | None = None  # each model's total steps (a schedule only)
    spe: np.ndarray | None = None  # and its steps per epoch

    for _ in range(int(recipe.epochs)):
        idx, wts, active = schedule()
        if scheduled and totals is None:  # every epoch of a model has the same number of steps
            totals, spe = _schedule_lengths(recipe, active)
        if epoch_hook is not None:
            epoch_hook(idx, wts)
        for s in range(idx.shape[0]):
            act = active[s]
            # the fused and foreach kernels assume a gradient laid out like its parameter (vmap's may be transposed)
            g = [gi if gi.stride() == pi.stride() else gi.contiguous() for gi, pi in zip(grad_fn(p, idx[s], wts[s]), p)]
            with torch.no_grad():
                saved = None
                if not act.all():
                    idle = torch.as_tensor(np.flatnonzero(~act)).to(p[0].device, non_blocking=True)
                    saved = [[t[idle].clone() for t in group] for group in (p, m1, m2)]
                steps += act
                rate = lr if totals is None or spe is None else _rate(recipe, steps, totals, spe)
                if clip is not None:
                    clip_per_model(g, clip)
                if l2:
                    torch._foreach_add_(g, p, alpha=l2)
                if adam:
                    adam_update(p, g, m1, m2, tmp, steps, rate, b1, b2, eps, decay, step_tensor)
                else:
                    _sgd(p, g, m1, mom, nesterov, rate)
                if saved is not None:  # models without a batch at this step stay exactly as they were
                    for group, old in zip((p, m1, m2), saved):
                        for t, o in zip(group, old):
                            t[idle] = o


def _schedule_lengths(recipe: Recipe, active: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each model's total steps and steps per epoch (``active``: one epoch's ``[S, K]``), checked against the
    recipe's warm-up."""
    spe = active.sum(axis=0).astype(np.int64)
    totals = spe * int(recipe.epochs)
    for t_k, s_k in zip(totals, spe):
        schedules.check(recipe, int(t_k), int(s_k))
    return totals, spe


def _rate(recipe: Recipe, steps: np.ndarray, totals: np.ndarray, spe: np.ndarray) -> float | np.ndarray:
    """The scheduled learning rate of each model's current step: one float when every model has the same."""
    rates = schedules.rates(recipe, np.maximum(steps - 1, 0), totals, spe)
    return float(rates[0]) if bool((rates == rates[0]).all()) else rates


def _sgd(p: list[torch.Tensor], g: list[torch.Tensor], m1: list[torch.Tensor], mom: float, nesterov: bool,
         rate: float | np.ndarray) -> None:  # fmt: skip
    """``torch.optim.SGD``'s step (L2 already in ``g``): buf ← mom·buf + g; d = g + mom·buf (Nesterov) or buf."""
    d = g
    if mom:
        torch._foreach_mul_(m1, mom)
        torch._foreach_add_(m1, g)
        if nesterov:
            torch._foreach_add_(g, m1, alpha=mom)
        else:
            d = m1
    if np.ndim(rate) == 0:
        torch._foreach_add_(p, d, alpha=-float(rate))
        return
    neg = _per_model(-np.asarray(rate, dtype=np.float64), p[0])
    for pi, di in zip(p, d):
        pi.addcmul_(di, _view(neg, pi))


__all__ = ["adam_update", "clip_per_model", "optimise"]
