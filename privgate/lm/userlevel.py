"""User-level DP fine-tuning: the unit of privacy is a user (all of a user's records), not one record.

Ponomareva et al. 2023 (arXiv 2303.00654): with a user column (``--user-field NAME``, or the recipe's
``user_field``), users are Poisson-sampled with rate q = 1/⌈U/B⌉, the gradients of a user's records are summed and
the sum clipped to C (McMahan et al. 2018, arXiv 1710.06963), then N(0, σ²C²) noise is added and the sum divided by
q·U. Membership is still evaluated per record. A step's users run in one forward pass, so memory grows with their
records. Details: ``docs/remediation.md``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from privgate.lm.batches import targets, trim


def user_index(users: Sequence[str]) -> tuple[list[str], list[torch.Tensor]]:
    """(the distinct users in order of first appearance, the record rows of each)."""
    rows: dict[str, list[int]] = {}
    for r, u in enumerate(users):
        rows.setdefault(u, []).append(r)
    return list(rows), [torch.tensor(v, dtype=torch.long) for v in rows.values()]


def _sum_by_user(params: list[nn.Parameter], owner: torch.Tensor, n_users: int) -> None:
    """Replace each parameter's per-record gradients by per-user sums (what Opacus then clips, one row a user)."""
    for p in params:
        gs = getattr(p, "grad_sample", None)
        if gs is None:
            continue
        summed = torch.zeros((n_users, *gs.shape[1:]), dtype=gs.dtype, device=gs.device)
        p.grad_sample = summed.index_add_(0, owner, gs)


class UserUnits:
    """Each user one unit of privacy (module docstring): Poisson over users, one clipped sum per user.

    Args:
        users: each record's user; x, mask: the encoded records; y: their classes (a classifier) or ``None``.
        device: where the batches go.
    """

    unit = "user"

    def __init__(
        self, users: Sequence[str], x: torch.Tensor, mask: torch.Tensor, y: torch.Tensor | None, device: torch.device
    ) -> None:
        names, self.rows = user_index(users)
        self.x, self.mask, self.y, self.device = x, mask, y, device
        self.n = len(names)
        self.dataset = torch.utils.data.TensorDataset(torch.arange(self.n))
        self._params: list[nn.Parameter] | None = None

    def step(self, module: Any, criterion: Any, batch: Any) -> float | None:
        """The summed record gradients of a step's users; their loss (``None`` when no user was sampled)."""
        if self._params is None:
            self._params = [p for p in module.parameters() if p.requires_grad]
        (picked,) = batch
        if not len(picked):  # no user this step: the noise alone
            for p in self._params:
                p.grad_sample = torch.zeros((0, *p.shape), dtype=p.dtype, device=p.device)
            return None
        owner = torch.cat([torch.full((len(self.rows[u]),), k) for k, u in enumerate(picked.tolist())])
        idx = torch.cat([self.rows[u] for u in picked.tolist()])
        xb, mb = trim(self.x[idx], self.mask[idx])
        xb, mb = xb.to(self.device), mb.to(self.device)
        yb = None if self.y is None else self.y[idx].to(self.device)
        loss = criterion(module(input_ids=xb, attention_mask=mb).logits, targets(xb, mb, yb))
        loss.backward()
        _sum_by_user(self._params, owner.to(self.device), len(picked))
        return float(loss.detach())


__all__ = ["UserUnits", "user_index"]
