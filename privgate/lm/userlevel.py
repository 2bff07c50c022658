"""User-level DP fine-tuning: the unit of privacy is a user (all of a user's records), not one record.

Ponomareva et al. 2023 ("How to DP-fy ML", arXiv 2303.00654, §"unit of
privacy"): when one person wrote many records, record-level DP protects that
person only as a group of k records (roughly k·ε). With a user column
(``--user-field NAME`` for ``.jsonl``/``.csv``, or ``user_field`` in the
language-model recipe) DP fine-tuning instead

* samples **users** at each step by Poisson sampling with rate q = 1/⌈U/B⌉
  over the U users (B: the expected number of users per step), so the
  accountant composes (σ, q over users, T);
* takes each record's gradient (Opacus' per-example hooks), **sums the
  gradients of a user's records** and clips the sum to C: one user is one
  contribution of norm ≤ C, whatever their number of records (the
  user-level DP-SGD of McMahan et al. 2018, "Learning differentially private
  recurrent language models", arXiv 1710.06963, with the per-user sum);
* adds N(0, σ²C²) noise and divides by the expected number of users, q·U.

The membership evaluation stays per record (an attacker still asks about one
record). A step's users are processed in one forward pass (no physical
batching), so memory grows with the records of a step's users.
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn


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


def private_by_user(
    recipe: Any, model: Any, optimizer: Any, x: torch.Tensor, mask: torch.Tensor, y: torch.Tensor | None,
    users: Sequence[str], seed: int, dev: torch.device, dp: Any, n_params: int,
) -> Any:  # fmt: skip
    """User-level DP-SGD with Opacus (module docstring); returns the fine-tune's stats with its DP record."""
    from opacus import PrivacyEngine

    from privgate.dp.accounting import Run, compose
    from privgate.dp.noise import draw_noise_on_cpu
    from privgate.dp.train import DPTraining
    from privgate.lm.finetune import FineTuneStats, SequenceLoss, _target, _trim

    s = dp.settings
    names, rows = user_index(users)
    n_users = len(names)
    loader = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(torch.arange(n_users)),
        batch_size=min(s.batch_size, n_users),
        generator=torch.Generator().manual_seed(int(seed)),
    )
    loss_fn: nn.Module = SequenceLoss() if y is None else nn.CrossEntropyLoss()
    noise_gen = torch.Generator().manual_seed(int(seed) + 0x5EED)  # on the CPU: privgate.dp.noise
    model.train()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "secure RNG turned off": stated in the DP statement's caveats
        engine = PrivacyEngine(accountant="rdp" if s.accountant == "rdp" else "prv")
        module, dp_opt, dp_loader = engine.make_private(
            module=model, optimizer=optimizer, data_loader=loader, noise_multiplier=float(dp.noise_multiplier),
            max_grad_norm=s.max_grad_norm, poisson_sampling=True, noise_generator=noise_gen, grad_sample_mode="hooks",
        )  # fmt: skip
    draw_noise_on_cpu(dp_opt, noise_gen)
    q = float(dp_loader.sample_rate)
    if dp.instrument is not None:
        dp.instrument(dp_opt, q)
    params = [p for p in module.parameters() if p.requires_grad]
    t0, losses = time.perf_counter(), []
    module.train()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*backward hook.*")
        for _ in range(s.epochs):
            losses = []
            for (picked,) in dp_loader:
                dp_opt.zero_grad(set_to_none=True)
                if len(picked):
                    owner = torch.cat([torch.full((len(rows[u]),), k) for k, u in enumerate(picked.tolist())])
                    idx = torch.cat([rows[u] for u in picked.tolist()])
                    xb, mb = _trim(x[idx], mask[idx])
                    xb, mb = xb.to(dev), mb.to(dev)
                    yb = None if y is None else y[idx].to(dev)
                    loss = loss_fn(module(input_ids=xb, attention_mask=mb).logits, _target(xb, mb, yb))
                    loss.backward()
                    _sum_by_user(params, owner.to(dev), len(picked))
                    losses.append(float(loss.detach()))
                else:  # no user this step: the noise alone
                    for p in params:
                        p.grad_sample = torch.zeros((0, *p.shape), dtype=p.dtype, device=p.device)
                dp_opt.step()
    seconds = time.perf_counter() - t0
    module.eval()
    steps = int(sum(h[2] for h in engine.accountant.history))
    sigma = float(dp_opt.noise_multiplier)
    eps, used, note = math.inf, "none (σ = 0)", None
    if sigma > 0:
        comp = compose([Run(sigma, q, steps)], s.delta, s.accountant)
        eps, used, note = comp.epsilon, comp.accountant, comp.note
    record = DPTraining(
        target_epsilon=dp.target_epsilon, epsilon=eps, delta=s.delta, noise_multiplier=sigma,
        max_grad_norm=s.max_grad_norm, sample_rate=q, steps=steps, epochs=s.epochs,
        batch_size=min(s.batch_size, n_users), accountant=used, n_train=n_users, seconds=seconds,
        accountant_note=note, grad_sample_mode="hooks (per-user sums)",
    )  # fmt: skip
    module._close() if hasattr(module, "_close") else None
    stats = FineTuneStats(
        recipe.mode, len(x), s.epochs, steps, n_params, seconds, sum(losses) / max(len(losses), 1), "hooks", record
    )
    stats.notes.append(f"user-level DP: {n_users} users, {len(x)} records; q over users")
    return stats


__all__ = ["private_by_user", "user_index"]
