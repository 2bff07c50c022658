"""The recipe of a DP-SGD target: reference models trained the way the target was.

Membership attacks that compare the target with reference models (LiRA,
Carlini et al. 2022, arXiv 2112.03570; RMIA, Zarifzadeh et al. 2024, arXiv
2312.03262) must train those models like the target: against a DP-SGD target,
reference models trained without clipping and noise make the attacks look
weaker than they are.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np
from torch import nn

from privgate.dpsgd.records import DPSettings, DPTraining
from privgate.dpsgd.train import make_private_module, train_dp
from privgate.recipe import DPSGD, Recipe


@dataclass
class DPRecipe(Recipe):
    """A :class:`Recipe` whose :meth:`train` is DP-SGD at a fixed σ, C, sampling rate and epochs.

    Reference models for LiRA/RMIA/shadow attacks must be trained the way the
    target was: against a DP target, reference models trained without clipping
    and noise make those attacks look weaker than they are. ``build()``
    returns the Opacus-fixed architecture, so its state_dict fits the models
    ``train()`` returns. The ensemble engine never replicates :meth:`train`
    with its plain kernels (:attr:`vectorisable` is False); it trains reference
    models of an MLP recipe at once with the same mechanism (:attr:`dp_sgd`:
    Poisson sampling, clipping and noise drawn per model by the engine, so the
    models are distributed like, not equal to, Opacus' for the same seed), and
    any other architecture one at a time through :meth:`train`.
    """

    noise_multiplier: float = 1.0
    max_grad_norm: float = 1.0
    steps_per_epoch: int | None = None
    max_physical_batch_size: int = 256
    delta: float = 1e-5

    @classmethod
    def from_training(cls, recipe: Recipe, training: DPTraining, settings: DPSettings) -> DPRecipe:
        """The recipe that reproduces ``training`` (same σ, C, q, epochs) on any training set."""
        base = {f.name: getattr(recipe, f.name) for f in fields(Recipe)}
        base.update(
            epochs=training.epochs,
            batch_size=training.batch_size,
            name=f"{recipe.name}+dp-sgd(σ={training.noise_multiplier:.4g},C={training.max_grad_norm:g})",
        )
        return cls(
            **base,
            noise_multiplier=training.noise_multiplier,
            max_grad_norm=training.max_grad_norm,
            steps_per_epoch=max(1, int(round(1.0 / training.sample_rate))),
            max_physical_batch_size=settings.max_physical_batch_size,
            delta=training.delta,
        )

    @property
    def vectorisable(self) -> bool:
        return False

    @property
    def dp_sgd(self) -> DPSGD:
        """What :meth:`train` does, for the engine's vectorised DP-SGD (MLP recipes only)."""
        return DPSGD(
            float(self.noise_multiplier), float(self.max_grad_norm), self.steps_per_epoch, int(self.batch_size)
        )

    @property
    def settings(self) -> DPSettings:
        return DPSettings(
            self.epochs, self.batch_size, self.max_grad_norm, self.delta, "rdp", self.max_physical_batch_size
        )

    def build(self, seed: int | None = None) -> nn.Module:
        return make_private_module(super().build(seed=seed), self.name)[0]

    def train(
        self,
        x: np.ndarray,
        y: np.ndarray,
        seed: int = 0,
        model: nn.Module | None = None,
        device: str | None = None,
    ) -> nn.Module:
        """DP-SGD at this recipe's σ, C, steps per epoch and epochs (``model`` is ignored: DP training starts fresh).

        ``device``: where to train (default the CPU); the model comes back on the CPU.
        """
        net, _ = train_dp(
            self,
            x,
            y,
            seed,
            settings=self.settings,
            noise_multiplier=self.noise_multiplier,
            steps_per_epoch=self.steps_per_epoch,
            account=False,
            device=str(device or "cpu"),
        )
        return net


__all__ = ["DPRecipe"]
