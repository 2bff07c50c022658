"""The optimisation behind model inversion: a denoising-autoencoder prior and the input search (torch).

Split from :mod:`privgate.attacks.inversion` (options, similarity, artefacts and
the attack) so that importing the attack registry — which every policy
validation does — does not import torch; the attack imports this module when
it runs. The objective, J_c(x) = −log(p_c(x) / (1 − p_c(x))) + λ_tv · TV(u) +
λ_prior · ‖D(u) − u‖² / d, and its references (Fredrikson, Jha & Ristenpart
2015; Mahendran & Vedaldi 2015, arXiv 1412.0035; Alain & Bengio 2014, arXiv
1211.4246; Vincent et al. 2008) are described in that module's docstring. Both optimisations step with
``torch.optim.Adam``'s update (:func:`privgate.training.optimisers.adam_update`) but not ``torch.optim`` itself,
whose first use imports ``torch._dynamo``: about 1.8 CPU-seconds a check would pay for two tiny optimisations.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from privgate.device import device_of
from privgate.outputs import Kind, as_logits_torch
from privgate.recipe.rng import seeded
from privgate.training.optimisers import adam_update


class _DenoisingAutoencoder(nn.Module):
    def __init__(self, d: int, hidden: int) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d, hidden), nn.ReLU(), nn.Linear(hidden, d), nn.Sigmoid())

    def forward(self, u: torch.Tensor) -> torch.Tensor:
        return self.net(u)


class _Adam:
    """``torch.optim.Adam(params, lr)`` (default betas and eps): ``step(grads)`` applies its update in place."""

    def __init__(self, params: list[torch.Tensor], lr: float) -> None:
        self.params, self.lr, self.t = params, lr, 0
        self.m1, self.m2, self.tmp = ([torch.zeros_like(p) for p in params] for _ in range(3))

    @torch.no_grad()
    def step(self, grads: list[torch.Tensor]) -> None:
        self.t += 1
        adam_update(self.params, grads, self.m1, self.m2, self.tmp, np.array([self.t]), self.lr, 0.9, 0.999, 1e-8)


def train_prior(u: np.ndarray, seed: int, steps: int = 400, noise: float = 0.15, hidden: int = 64) -> nn.Module:
    """A small denoising autoencoder on population rows ``u`` (scaled to [0, 1]) (Vincent et al. 2008)."""
    gen = torch.Generator().manual_seed(seed)
    with seeded(seed):
        dae = _DenoisingAutoencoder(u.shape[1], hidden)
    data = torch.as_tensor(u, dtype=torch.float32)
    params = list(dae.parameters())
    opt = _Adam(params, lr=3e-3)
    for _ in range(steps):
        idx = torch.randint(len(data), (min(64, len(data)),), generator=gen)
        clean = data[idx]
        noisy = clean + noise * torch.randn(clean.shape, generator=gen)
        opt.step(list(torch.autograd.grad(((dae(noisy) - clean) ** 2).mean(), params)))
    dae.eval()
    for p in dae.parameters():
        p.requires_grad_(False)
    return dae


@dataclass
class Inversion:
    """Reconstructions of ``classes`` and how their optimisation ended."""

    classes: np.ndarray
    recon: np.ndarray  # [K, *row_shape]
    confidence: np.ndarray  # target's p_c(recon_c)
    steps: np.ndarray
    stop: list[str]
    seconds: float


def _tv(x: torch.Tensor, image_shape: tuple[int, ...]) -> torch.Tensor:
    img = x.reshape(len(x), *image_shape)
    dv = (img[..., 1:, :] - img[..., :-1, :]).pow(2).flatten(1).mean(dim=1)
    dh = (img[..., :, 1:] - img[..., :, :-1]).pow(2).flatten(1).mean(dim=1)
    return dv + dh


def _objective(
    module: nn.Module,
    x: torch.Tensor,
    u: torch.Tensor,
    cls: torch.Tensor,
    rows: torch.Tensor,
    outputs: Kind,
    tv: float,
    image_shape: tuple[int, ...] | None,
    prior: nn.Module | None,
    prior_weight: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each input's loss J (−log(p_c / (1 − p_c)), which does not saturate, plus the total-variation and prior
    terms on ``u``, the input scaled to [0, 1]) and log p_c."""
    out = module(x)
    if isinstance(out, (tuple, list)):
        out = out[0]
    out = as_logits_torch(out, outputs)
    logp = torch.log_softmax(out, dim=1)[rows, cls]
    others = out.masked_fill(torch.nn.functional.one_hot(cls, out.shape[1]).bool(), -math.inf)
    j = -(out[rows, cls] - torch.logsumexp(others, dim=1))
    if tv > 0 and image_shape is not None:
        j = j + tv * _tv(u, image_shape)
    if prior is not None and prior_weight > 0:
        j = j + prior_weight * (prior(u) - u).pow(2).mean(dim=1)
    return j, logp


@dataclass
class _Best:
    """Each input's best iterate so far (lowest J), its confidence, and whether it is still optimised and why not."""

    j: torch.Tensor
    x: torch.Tensor
    p: torch.Tensor
    since: torch.Tensor  # steps since the last improvement
    active: torch.Tensor
    steps: torch.Tensor
    stop: list[str]

    @classmethod
    def start(cls, x: torch.Tensor, k: int, dev: torch.device) -> _Best:
        return cls(
            j=torch.full((k,), math.inf, device=dev),
            x=x.detach().clone(),
            p=torch.zeros(k, device=dev),
            since=torch.zeros(k, dtype=torch.long, device=dev),
            active=torch.ones(k, dtype=torch.bool, device=dev),
            steps=torch.zeros(k, dtype=torch.long, device=dev),
            stop=["max steps"] * k,
        )

    @torch.no_grad()
    def update(
        self, step: int, j: torch.Tensor, p: torch.Tensor, x: torch.Tensor, confidence_target: float, patience: int
    ) -> None:
        """Keep improvements of more than a relative 1e-4; stop inputs that reach the target or stop improving."""
        tol = 1e-4 * torch.where(torch.isfinite(self.j), self.j.abs(), torch.zeros_like(self.j)).clamp(min=1e-3)
        better = self.active & (torch.isinf(self.j) | (j < self.j - tol))
        self.j = torch.where(better, j, self.j)
        self.x[better] = x[better]
        self.p = torch.where(better, p, self.p)
        self.since = torch.where(better, torch.zeros_like(self.since), self.since + 1)
        self.steps[self.active] = step
        reached = p >= confidence_target if confidence_target < 1.0 else torch.zeros_like(self.active)
        for i in torch.nonzero(self.active & reached).flatten().tolist():
            self.active[i], self.stop[i] = False, "confidence target"
            self.x[i], self.p[i] = x[i], p[i]
        for i in torch.nonzero(self.active & (self.since >= patience)).flatten().tolist():
            self.active[i], self.stop[i] = False, "no improvement"


def invert(
    module: nn.Module,
    classes: Sequence[int],
    starts: np.ndarray,
    lo: np.ndarray,
    hi: np.ndarray,
    *,
    steps: int = 300,
    lr: float = 0.05,
    confidence_target: float = 1.0,
    patience: int = 50,
    tv: float = 0.0,
    image_shape: tuple[int, ...] | None = None,
    prior: nn.Module | None = None,
    prior_weight: float = 1.0,
    outputs: Kind = "logits",
) -> Inversion:
    """Optimise one input per entry of ``classes``, all in one batch; see the module docstring.

    Args:
        module: the target, returning logits for a batch shaped like ``starts``.
        classes: the class of each input to optimise (a class may repeat, for restarts).
        starts: the starting inputs, [len(classes), *row shape of the audit data].
        lo, hi: the data range (broadcastable to one row); iterates are clipped to it.
        outputs: how the module's raw outputs are read (:mod:`privgate.outputs`); one
            logit z becomes the logits [0, z], probabilities p become log p.
    """
    t0 = time.perf_counter()
    dev = torch.device(device_of(module))  # everything lives where the target does (privgate.device)
    if prior is not None:
        prior = prior.to(dev)
    cls = torch.as_tensor(np.asarray(classes), dtype=torch.long, device=dev)
    K = len(cls)
    row = starts.shape[1:]
    lo_t = torch.as_tensor(np.broadcast_to(lo, row).copy(), dtype=torch.float32, device=dev)
    hi_t = torch.as_tensor(np.broadcast_to(hi, row).copy(), dtype=torch.float32, device=dev)
    width = torch.clamp(hi_t - lo_t, min=1e-12)
    x = torch.as_tensor(np.asarray(starts), dtype=torch.float32, device=dev).clone().requires_grad_(True)
    opt = _Adam([x], lr=lr)
    best = _Best.start(x, K, dev)
    was_training = module.training
    module.eval()
    rows = torch.arange(K, device=dev)
    try:
        for step in range(steps + 1):
            u = ((x - lo_t) / width).flatten(1)
            j, logp = _objective(module, x, u, cls, rows, outputs, tv, image_shape, prior, prior_weight)
            best.update(step, j.detach(), logp.detach().exp(), x.detach(), confidence_target, patience)
            if not best.active.any() or step == steps:
                break
            frozen = x.detach().clone()
            # gradient with respect to the input only: the target's parameters get no .grad
            opt.step(list(torch.autograd.grad(j[best.active].sum(), [x])))
            with torch.no_grad():
                x.copy_(torch.maximum(torch.minimum(x, hi_t), lo_t))
                x[~best.active] = frozen[~best.active]
    finally:
        module.train(was_training)
    return Inversion(
        np.asarray(classes),
        best.x.cpu().numpy(),
        best.p.cpu().numpy().astype(float),
        best.steps.cpu().numpy(),
        best.stop,
        time.perf_counter() - t0,
    )


__all__ = ["Inversion", "invert", "train_prior"]
