"""What a :class:`~privgate.recipe.Recipe`'s settings may be: its optimisers, schedules and precisions, the values
that turn the extra settings off, and its parts (:class:`Augment`, :class:`DPSGD`)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class DPSGD:
    """DP-SGD as Opacus runs it with Poisson sampling, described for the vectorised engine.

    Per step every training row is drawn independently with probability
    q = 1 / steps_per_epoch(n); each drawn row's gradient is clipped to norm
    ``max_grad_norm``; the clipped sum gets Gaussian noise of standard deviation
    ``noise_multiplier · max_grad_norm`` per coordinate and is divided by the
    expected batch size ``int(n · q)`` (Abadi et al. 2016, arXiv 1607.00133;
    Opacus' ``DPOptimizer``, Yousefpour et al. 2021, arXiv 2109.12298).
    """

    noise_multiplier: float
    max_grad_norm: float
    steps_per_epoch: int | None  # None: ceil(n / batch_size)
    batch_size: int

    def steps(self, n: int) -> int:
        """Poisson batches per epoch for ``n`` rows: the length of the DataLoader Opacus replaces."""
        batch = math.ceil(n / self.steps_per_epoch) if self.steps_per_epoch else min(self.batch_size, n)
        return math.ceil(n / batch)

    def expected_batch(self, n: int) -> int:
        """Opacus' ``expected_batch_size``: ``int(n · q)`` with q = 1 / steps."""
        return int(n * (1.0 / self.steps(n)))


@dataclass(frozen=True)
class Augment:
    """Data augmentation of image rows ``[C, H, W]``, as the target was trained (:mod:`privgate.training.augment`).

    Args:
        crop_padding: pad each image by this many pixels on every side and crop a
            random window of the original size back (0: no crop). torchvision's
            ``RandomCrop(size, padding=p)``.
        flip: mirror each image left-right with probability ½
            (``RandomHorizontalFlip()``).
        padding_mode: ``"zeros"`` or ``"reflect"``, how the crop pads.
        transform: your own tensor transform ``transform(batch, generator) -> batch``,
            applied to every mini-batch (after crop and flip) on the training
            device; it must draw its random numbers from ``generator`` (a seeded
            CPU ``torch.Generator``) so each model's augmentation is fixed by its
            seed, and return a batch of the same shape.
    """

    crop_padding: int = 0
    flip: bool = False
    padding_mode: Literal["zeros", "reflect"] = "zeros"
    transform: Callable[[torch.Tensor, torch.Generator], torch.Tensor] | None = None


OPTIMIZERS = ("adam", "adamw", "sgd")
SCHEDULES = ("constant", "step", "cosine", "one-cycle")
PRECISIONS = ("fp32", "bf16")
#: Settings that describe training beyond "optimiser, learning rate, epochs, batch", with the value that turns them
#: off: recipes written before they existed have these values and train exactly as before.
TRAINING_DEFAULTS: dict[str, Any] = {
    "schedule": "constant",
    "warmup_steps": 0,
    "warmup_fraction": 0.0,
    "lr_step_epochs": 30,
    "lr_gamma": 0.1,
    "min_lr": 0.0,
    "betas": (0.9, 0.999),
    "nesterov": False,
    "label_smoothing": 0.0,
    "clip_grad_norm": None,
    "precision": "fp32",
    "augment": None,
}


__all__ = ["OPTIMIZERS", "PRECISIONS", "SCHEDULES", "TRAINING_DEFAULTS", "Augment", "DPSGD"]
