"""Model inversion's two optimisations step as ``torch.optim.Adam`` does, without ``torch.optim``.

``torch.optim``'s first use imports ``torch._dynamo`` (about 1.8 CPU-seconds), which a check with the inversion
attack paid for a 400-step autoencoder and a 300-step input search.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn


def test_the_inversion_adam_is_torch_adam_and_the_attack_never_touches_torch_optim(monkeypatch):
    from privgate.attacks import inversion_search as search

    ours = torch.tensor([1.0, -2.0, 3.0], requires_grad=True)
    theirs = ours.detach().clone().requires_grad_(True)
    weights = torch.tensor([1.0, 10.0, 0.1])
    opt, ref = search._Adam([ours], lr=0.05), torch.optim.Adam([theirs], lr=0.05)
    for _ in range(30):
        opt.step(list(torch.autograd.grad((weights * ours**2).sum(), [ours])))
        ref.zero_grad()
        (weights * theirs**2).sum().backward()
        ref.step()
    assert torch.allclose(ours, theirs, atol=1e-6) and not torch.equal(ours, torch.tensor([1.0, -2.0, 3.0]))

    def no_torch_optim(*args, **kwargs):
        raise AssertionError("torch.optim used")

    monkeypatch.setattr(torch.optim, "Adam", no_torch_optim)
    rows = np.random.default_rng(0).random((60, 4)).astype(np.float32)
    prior = search.train_prior(rows, seed=0, steps=20, hidden=8)
    torch.manual_seed(0)
    target = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3))
    inv = search.invert(target, [0, 2], rows[:2], 0.0, 1.0, steps=20, prior=prior)
    assert inv.recon.shape == (2, 4) and not np.array_equal(inv.recon, rows[:2])
    assert ((inv.recon >= 0) & (inv.recon <= 1)).all()  # the search ran and kept to the data range
