"""The six crafters of Matsumoto et al. 2022 (arXiv 2206.09122, §3.4, Table 1), precomputed on a pool of real examples.

Each adversary produces a trial's two candidate gradients (g₁, g₂), the model θ_t the server holds and the
black-box rule of its distinguisher (:data:`BLACK_BOX_RULE`): ``benign``, ``input_perturbation`` (FGSM,
Goodfellow et al. 2014, arXiv 1412.6572), ``parameter_retrogression``, ``gradient_flip``, ``collusion`` (a
malicious model trained on one label) and ``dummy_gradient`` (the worst case with gradient flip: Proposition
1). Gradients are computed once for a pool of examples, so K trials cost K draws, not K backward passes. The
table: ``docs/audits.md``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from privgate.audits.ldp_gradients import FunctionalModel, pool_size, radius_for
from privgate.audits.ldp_names import ADVERSARIES, BLACK_BOX_RULE, DISTINGUISHERS, RULE_TEXT, Rule
from privgate.errors import DataError
from privgate.inputs.data import Dataset


@dataclass
class Crafted:
    """One adversary's gradients on a pool of examples.

    ``g2 is None`` means g₂ = −g₁. ``pair`` (benign): g₂ comes from a second,
    different example of the pool. A pool of one row (dummy gradient) is the
    same gradient in every trial.
    """

    name: str
    rule: Rule
    theta: torch.Tensor  # [d] the server's θ_t
    radius: float  # ‖C‖₂
    g1: torch.Tensor  # [P, d]
    g2: torch.Tensor | None  # [P, d], or None: −g1
    x: torch.Tensor  # [P, ...] the examples (black-box distinguisher)
    y: torch.Tensor  # [P]
    base_loss: torch.Tensor  # [P] float64, f(x; θ_t)
    pair: bool = False

    @property
    def pool(self) -> int:
        return int(self.g1.shape[0])

    def draw(self, n: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """Pool indices (i, j) of ``n`` trials: x₁ = pool[i]; j ≠ i is the benign adversary's second example."""
        i = torch.randint(self.pool, (n,), generator=generator)
        if not self.pair:
            return i, i
        j = (i + torch.randint(1, self.pool, (n,), generator=generator)) % self.pool
        return i, j

    def pairs(self, i: torch.Tensor, j: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(g₁, g₂) of the trials drawn as (i, j)."""
        g1 = self.g1[i]
        if self.g2 is None:
            return g1, -g1
        return g1, self.g2[j if self.pair else i]


@dataclass(frozen=True)
class CraftSettings:
    """The crafters' steps: FGSM's α (input perturbation) and the retrogression step α (both 1 in the paper)."""

    fgsm_step: float = 1.0
    retrogression_step: float = 1.0


@dataclass
class Source:
    """θ_t, the model that reads it, the data the crafters draw from and the malicious model of ``collusion``."""

    model: FunctionalModel
    theta: torch.Tensor
    data: Dataset
    seed: int
    malicious_theta: torch.Tensor | None = None
    malicious_label: int | None = None
    description: str = ""


def _pool_rows(n: int, size: int, seed: int, salt: int) -> np.ndarray:
    rng = np.random.default_rng(np.random.SeedSequence([seed, salt]))
    return np.sort(rng.choice(n, size=size, replace=False)) if size < n else np.arange(n)


def _tensors(data: Dataset, rows: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.as_tensor(np.ascontiguousarray(data.x[rows]), dtype=torch.float32), torch.as_tensor(
        data.y[rows], dtype=torch.long
    )


def craft(name: str, source: Source, settings: CraftSettings, clip: float) -> Crafted:
    """Precompute adversary ``name``'s gradient pool (see the module docstring); ``clip`` is L, the dummy's norm."""
    model, theta = source.model, source.theta
    d = model.d
    salt = ADVERSARIES.index(name)
    rule = BLACK_BOX_RULE[name]
    if name == "collusion":
        if source.malicious_theta is None or source.malicious_label is None:
            raise DataError(f"{source.data.source}: the collusion adversary needs examples of at least two labels.")
        others = np.flatnonzero(source.data.y != source.malicious_label)
        rows = others[_pool_rows(len(others), pool_size(len(others), d), source.seed, salt)]
        x, y = _tensors(source.data, rows)
        bad = source.malicious_theta
        g1 = model.grads(bad, x, y)
        return Crafted(name, rule, bad, radius_for(bad), g1, None, x, y, model.losses(bad, x, y))
    rows = _pool_rows(len(source.data), pool_size(len(source.data), d), source.seed, salt)
    x, y = _tensors(source.data, rows)
    radius = radius_for(theta)
    if name == "dummy_gradient":
        g1 = torch.full((1, d), clip / d**0.5)
        return Crafted(name, rule, theta, radius, g1, None, x[:1], y[:1], model.losses(theta, x[:1], y[:1]))
    base = model.losses(theta, x, y)
    g1 = model.grads(theta, x, y)
    if name == "benign":
        if len(rows) < 2:
            raise DataError(f"{source.data.source}: the benign adversary needs at least two examples.")
        return Crafted(name, rule, theta, radius, g1, g1, x, y, base, pair=True)
    if name == "gradient_flip":
        return Crafted(name, rule, theta, radius, g1, None, x, y, base)
    if name == "input_perturbation":
        x2 = x + settings.fgsm_step * torch.sign(model.input_grads(theta, x, y))
        return Crafted(name, rule, theta, radius, g1, model.grads(theta, x2, y), x, y, base)
    if name == "parameter_retrogression":
        retro = theta.unsqueeze(0) + settings.retrogression_step * g1
        return Crafted(name, rule, theta, radius, g1, model.grads_at(retro, x, y), x, y, base)
    raise ValueError(f"unknown adversary {name!r}")  # pragma: no cover - names are validated at the door


__all__ = [
    "ADVERSARIES",
    "BLACK_BOX_RULE",
    "DISTINGUISHERS",
    "RULE_TEXT",
    "CraftSettings",
    "Crafted",
    "Source",
    "craft",
]
