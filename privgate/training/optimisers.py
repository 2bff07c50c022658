"""The recipe's optimiser applied to K stacked models at once, with ``torch.optim``'s exact update rules.

Adam (Kingma & Ba 2014, arXiv 1412.6980) and SGD with momentum and L2 weight
decay, in place on stacked ``[K, ...]`` parameters, each model with its own
step count (a model without a batch at a step stays exactly as it was).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from privgate.recipe import Recipe


def adam_update(
    p: list[torch.Tensor],
    g: list[torch.Tensor],
    m1: list[torch.Tensor],
    m2: list[torch.Tensor],
    tmp: list[torch.Tensor],
    steps: np.ndarray,
    lr: float,
    b1: float,
    b2: float,
    eps: float,
) -> None:
    """``torch.optim.Adam``'s update on stacked tensors, in place (Kingma & Ba 2014, arXiv 1412.6980).

    m ← m + (1−β1)(g − m); v ← β2·v + (1−β2)·g²;
    p ← p − lr/(1−β1^t) · m / (√v / √(1−β2^t) + eps), with t each model's step
    count and any L2 penalty already added to ``g``. Nothing is allocated, which
    matters on CPU: fresh multi-megabyte tensors every step cost page faults.
    """
    same = bool((steps == steps[0]).all())
    if same and hasattr(torch, "_fused_adam_"):
        # one pass over memory; the same arithmetic as torch.optim.Adam(fused=True)
        t = [torch.tensor(float(steps[0]))] * len(p)
        torch._fused_adam_(
            p, g, m1, m2, [], t, lr=lr, beta1=b1, beta2=b2, weight_decay=0.0, eps=eps, amsgrad=False, maximize=False
        )
        return
    torch._foreach_lerp_(m1, g, 1 - b1)
    torch._foreach_mul_(m2, b2)
    torch._foreach_addcmul_(m2, g, g, value=1 - b2)
    for v, o in zip(m2, tmp):
        torch.sqrt(v, out=o)
    if same:
        t = float(steps[0])
        torch._foreach_div_(tmp, math.sqrt(1 - b2**t))
        torch._foreach_add_(tmp, eps)
        torch._foreach_addcdiv_(p, m1, tmp, value=-lr / (1 - b1**t))
        return
    tt = torch.as_tensor(steps, dtype=torch.float64).clamp(min=1.0)
    bc2 = (1 - b2**tt).sqrt().float()
    size = (-lr / (1 - b1**tt)).float()
    for pi, mi, o in zip(p, m1, tmp):
        shape = (len(tt),) + (1,) * (pi.dim() - 1)
        o.div_(bc2.view(shape)).add_(eps)
        torch.div(mi, o, out=o)
        pi.addcmul_(o, size.view(shape))


def optimise(recipe: Recipe, p: list[torch.Tensor], grad_fn: Any, schedule: Any) -> None:
    """``recipe.epochs`` epochs of the recipe's optimiser on the stacked parameters ``p``, in place.

    ``schedule()`` gives one epoch of row indices ``[S, K, B]``, row weights
    ``[S, K, B]`` and which models step ``[S, K]``; ``grad_fn(p, idx [K, B],
    weights [K, B])`` returns one gradient per tensor of ``p``. Models without
    a batch at a step (smaller subsets) stay exactly as they were, optimiser
    state included.
    """
    k = len(p[0])
    adam = recipe.optimizer == "adam"
    lr, wd, mom = float(recipe.lr), float(recipe.weight_decay), float(recipe.momentum)
    b1, b2, eps = 0.9, 0.999, 1e-8
    m1 = [torch.zeros_like(t) for t in p] if (adam or mom) else []
    m2 = [torch.zeros_like(t) for t in p] if adam else []
    steps = np.zeros(k)  # per-model optimiser step count
    tmp = [torch.empty_like(t) for t in p] if adam else []

    for _ in range(int(recipe.epochs)):
        idx, wts, active = schedule()
        for s in range(idx.shape[0]):
            act = active[s]
            g = grad_fn(p, idx[s], wts[s])
            with torch.no_grad():
                saved = None
                if not act.all():
                    idle = torch.as_tensor(np.flatnonzero(~act))
                    saved = [[t[idle].clone() for t in group] for group in (p, m1, m2)]
                steps += act
                if wd:
                    torch._foreach_add_(g, p, alpha=wd)
                if adam:
                    adam_update(p, g, m1, m2, tmp, steps, lr, b1, b2, eps)
                else:
                    if mom:
                        torch._foreach_mul_(m1, mom)
                        torch._foreach_add_(m1, g)
                    torch._foreach_add_(p, m1 if mom else g, alpha=-lr)
                if saved is not None:  # models without a batch at this step stay exactly as they were
                    for group, old in zip((p, m1, m2), saved):
                        for t, o in zip(group, old):
                            t[idle] = o


__all__ = ["adam_update", "optimise"]
