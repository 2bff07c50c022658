"""What a DP-SGD run is asked to do (:class:`DPSettings`) and what it did (:class:`DPTraining`): plain records.

No torch here: the ε search, its statement and its reports read these records on every path, a scikit-learn
model's capacity search included, and only a DP-SGD run (:mod:`privgate.dpsgd.opacus_runner`) needs torch.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

AccountantName = Literal["prv", "rdp"]
#: How the spent ε is stated: by the run's own accountant (``engine``) or by
#: :func:`privgate.dpsgd.accounting.compose` (``compose``); ``None``: not computed (reference models).
Accounting = Literal["engine", "compose"]


@dataclass(frozen=True)
class DPSettings:
    """How DP-SGD trains, apart from the noise (which the target ε or a given σ fixes).

    Args:
        epochs: passes over the training set (T = epochs / q steps).
        batch_size: expected logical batch size; the sampling rate is
            q = 1 / ceil(N / batch_size).
        max_grad_norm: clipping norm C of every per-example gradient.
        delta: the δ of the (ε, δ) guarantee; below 1/N.
        accountant: ``prv`` (tighter, falls back to ``rdp`` when it fails) or ``rdp``.
        max_physical_batch_size: most examples per forward/backward pass
            (``BatchMemoryManager``); does not change the privacy or the result.
        grad_sample_mode: ``ghost`` (default) clips per-example gradients
            without materialising them — their norms come from the "ghost norm"
            trick (Goodfellow 2015, arXiv 1510.01799; Li et al. 2021, arXiv
            2110.05679) and a second, re-weighted backward pass gives the sum of
            clipped gradients; the same DP-SGD update, several times faster for
            wide layers. ``hooks`` materialises every per-example gradient
            (Opacus' classic mode). Both agree to float rounding.
    """

    epochs: int
    batch_size: int
    max_grad_norm: float
    delta: float
    accountant: AccountantName = "prv"
    max_physical_batch_size: int = 256
    grad_sample_mode: Literal["ghost", "hooks"] = "ghost"

    def with_clip(self, max_grad_norm: float) -> DPSettings:
        return dataclasses.replace(self, max_grad_norm=float(max_grad_norm))


@dataclass
class DPTraining:
    """What one DP-SGD run did: enough to state, and re-check, its guarantee.

    ``epsilon`` is what the accountant reports for the run actually performed
    (``inf`` for noise-free runs); ``target_epsilon`` is what was asked for.
    """

    target_epsilon: float | None
    epsilon: float
    delta: float
    noise_multiplier: float
    max_grad_norm: float
    sample_rate: float
    steps: int
    epochs: int
    batch_size: int
    accountant: str
    n_train: int
    seconds: float
    calibration_seconds: float = 0.0
    accountant_note: str | None = None
    architecture_changes: list[str] = field(default_factory=list)
    grad_sample_mode: str = "ghost"

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["epsilon"] = None if not math.isfinite(self.epsilon) else round(self.epsilon, 6)
        out["seconds"] = round(self.seconds, 3)
        out["calibration_seconds"] = round(self.calibration_seconds, 3)
        return out


__all__ = ["AccountantName", "Accounting", "DPSettings", "DPTraining"]
