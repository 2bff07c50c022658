"""DP-SGD retraining of a recipe with Opacus.

DP-SGD (Abadi et al. 2016, arXiv 1607.00133) through Opacus (Yousefpour et al. 2021, arXiv 2109.12298): layers
it cannot train are replaced (``ModuleValidator.fix``, recorded), σ is calibrated for the target ε with Poisson
sampling and the run goes through :mod:`privgate.dpsgd.opacus_runner`; ε by PRV (Gopi, Lee & Wutschitz 2021, arXiv
2106.02848) or RDP (Mironov 2017, arXiv 1702.07476), PRV falling back to RDP where it fails. Training always
starts from ``recipe.build()`` (fresh or a *public* start), never from the checkpoint under audit. The clip
norm comes from :func:`privgate.dp.clip.search_clip_norm` (Ponomareva et al. 2023, arXiv 2303.00654, §5.4).
Noise is non-secure (seeded, reproducible across devices). See ``docs/remediation.md``.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import nn

from privgate.dpsgd.accounting import DPCalibrationError
from privgate.dpsgd.opacus_runner import make_private
from privgate.dpsgd.records import DPSettings, DPTraining
from privgate.errors import RecipeError
from privgate.outputs import nll
from privgate.recipe import Recipe
from privgate.recipe.rng import seed_global


class OutputsLoss(nn.CrossEntropyLoss):
    """``nn.CrossEntropyLoss`` reading the outputs with :func:`privgate.outputs.nll` (Opacus' criterion slot)."""

    def forward(self, input: torch.Tensor, target: torch.Tensor) -> torch.Tensor:  # noqa: A002 - torch's names
        return nll(input, target, reduction=self.reduction)


# --------------------------------------------------------------------------- the model


def make_private_module(model: nn.Module, recipe_name: str = "recipe") -> tuple[nn.Module, list[str]]:
    """``model`` made trainable by DP-SGD (``ModuleValidator.fix``), and the changes made.

    Returns the model unchanged with ``[]`` when Opacus accepts it; otherwise a
    fixed copy and one line per replaced layer (``"1: BatchNorm1d → GroupNorm"``).

    Raises:
        RecipeError: Opacus cannot make the model private (a layer it cannot fix).
    """
    from opacus.validators import ModuleValidator

    model.train()  # Opacus validates (and DP-SGD trains) the module in training mode
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        errors = ModuleValidator.validate(model, strict=False)
        if not errors:
            return model, []
        before = {n: type(m).__name__ for n, m in model.named_modules()}
        try:
            fixed = ModuleValidator.fix(model)
        except Exception as exc:
            raise RecipeError(
                f"recipe '{recipe_name}': Opacus cannot make the model private ({errors[0]}; fixing it "
                f"failed: {exc.__class__.__name__})."
            ) from None
        remaining = ModuleValidator.validate(fixed, strict=False)
    if remaining:
        raise RecipeError(f"recipe '{recipe_name}': Opacus cannot make the model private: {remaining[0]}.")
    after = {n: type(m).__name__ for n, m in fixed.named_modules()}
    changes = [f"{n or '(model)'}: {before[n]} → {after[n]}" for n in before if n in after and after[n] != before[n]]
    return fixed, changes or [f"Opacus fixed the model: {errors[0]}"]


def _fresh(recipe: Recipe, seed: int) -> tuple[nn.Module, list[str]]:
    """``recipe.build(seed=seed)``, made private (failures are RecipeErrors)."""
    return make_private_module(recipe.build(seed=seed), recipe.name)


def probe_private_training(recipe: Recipe, x: np.ndarray, y: np.ndarray, seed: int = 0) -> list[str]:
    """Fail early, before any audit, when Opacus cannot train ``recipe`` privately.

    Builds the model, applies :func:`make_private_module`, and computes
    per-example gradients (``GradSampleModule``) of the loss on a few rows;
    every trainable parameter must get one. Returns the architecture changes.

    Raises:
        RecipeError: the model cannot be fixed, or per-example gradients fail.
    """
    from opacus.grad_sample import GradSampleModule

    model, changes = _fresh(recipe, seed)
    rows = min(4, len(y))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            gsm = GradSampleModule(model)
            out = gsm(torch.as_tensor(np.ascontiguousarray(x[:rows]), dtype=torch.float32))
            nll(out, torch.as_tensor(np.asarray(y[:rows]), dtype=torch.long)).backward()
        missing = [
            n for n, p in model.named_parameters() if p.requires_grad and getattr(p, "grad_sample", None) is None
        ]
        gsm._close()
    except RecipeError:
        raise
    except Exception as exc:
        msg = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else exc.__class__.__name__
        raise RecipeError(
            f"recipe '{recipe.name}': Opacus cannot compute per-example gradients for this model "
            f"({exc.__class__.__name__}: {msg})."
        ) from None
    if missing:
        raise RecipeError(
            f"recipe '{recipe.name}': Opacus computes no per-example gradient for parameter(s) "
            f"{', '.join(missing[:5])}; DP-SGD cannot train them."
        )
    return changes


# --------------------------------------------------------------------------- training


def train_dp(
    recipe: Recipe,
    x: np.ndarray,
    y: np.ndarray,
    seed: int = 0,
    *,
    settings: DPSettings,
    target_epsilon: float | None = None,
    noise_multiplier: float | None = None,
    steps_per_epoch: int | None = None,
    account: bool = True,
    device: str = "cpu",
    instrument: Callable[[Any, float], None] | None = None,
) -> tuple[nn.Module, DPTraining]:
    """Train a model of ``recipe`` on (x, y) with DP-SGD; deterministic for a given seed.

    Give exactly one of ``target_epsilon`` (σ is calibrated by
    ``make_private_with_epsilon``) or ``noise_multiplier`` (σ fixed, e.g. to
    train reference models like an already-hardened target; σ = 0 is clipping
    without noise, ε = ∞).

    Args:
        recipe: model factory, optimiser and learning rate (its epochs and
            batch size are replaced by ``settings``).
        x: training inputs.
        y: integer labels.
        seed: drives initialisation, Poisson sampling and the noise.
        settings: epochs, batch size, clip norm, δ, accountant, physical batch.
        target_epsilon: the ε to calibrate σ for.
        noise_multiplier: a fixed σ instead.
        steps_per_epoch: keep this many steps per epoch (q = 1/steps) whatever N
            is, so a model trained on a different number of rows gets the same
            per-example guarantee; default ceil(N / batch_size).
        account: compute the spent ε (skipped for reference models).
        device: where to train (``"cpu"``, ``"cuda"``). Poisson batches, the
            noise (:mod:`privgate.dpsgd.noise`) and dropout masks
            (:mod:`privgate.training.dropout`) are drawn on the CPU from
            generators seeded with the seed and moved to the device, so the
            same seed gives the same model on every device up to float rounding.
        instrument: called once with Opacus' DP optimiser and the Poisson
            sampling rate before the first step; the one-run DP-SGD audit
            (:mod:`privgate.audits.dpsgd_whitebox`) adds its gradient canaries
            to the noisy step through it.

    Returns:
        The trained model (a plain module on the CPU, eval mode, no Opacus
        hooks) and its :class:`DPTraining` record.

    Raises:
        RecipeError: the model cannot be made private.
        DPCalibrationError: no σ reaches the target ε.
    """
    if (target_epsilon is None) == (noise_multiplier is None):
        raise ValueError("give exactly one of target_epsilon or noise_multiplier")
    xt = torch.as_tensor(np.ascontiguousarray(x), dtype=torch.float32)
    yt = torch.as_tensor(np.asarray(y), dtype=torch.long)
    n = len(yt)
    batch = math.ceil(n / steps_per_epoch) if steps_per_epoch else min(settings.batch_size, n)
    from privgate.training.dropout import seeded_dropout
    from privgate.training.plan import dropout_seed

    dev = torch.device(device)
    model, changes = _fresh(recipe, seed)
    model.to(dev)
    optimizer = recipe.make_optimizer(model.parameters())
    run = make_private(
        model, optimizer, torch.utils.data.TensorDataset(xt, yt), settings=settings, seed=seed, batch_size=batch,
        criterion=OutputsLoss(), grad_sample_mode=settings.grad_sample_mode, noise_multiplier=noise_multiplier,
        target_epsilon=target_epsilon, instrument=instrument,
    )  # fmt: skip

    def step(module: nn.Module, criterion: Any, batch_rows: Any) -> None:
        xb, yb = batch_rows
        criterion(module(xb.to(dev)), yb.to(dev)).backward()

    forked = [dev.index if dev.index is not None else torch.cuda.current_device()] if dev.type == "cuda" else []
    masks = torch.Generator().manual_seed(dropout_seed(seed))
    with torch.random.fork_rng(devices=forked), seeded_dropout(model, masks):
        seed_global(dropout_seed(seed))  # any other random draw of the forward pass: fixed by the seed
        run.train(step, settings.epochs, settings.max_physical_batch_size)
    record = run.record(
        settings, n_units=n, batch_size=batch, accounting="engine" if account else None,
        target_epsilon=target_epsilon, architecture_changes=changes,
    )  # fmt: skip
    trained, _ = _fresh(recipe, seed)  # a clean copy: no Opacus hooks or per-sample gradient buffers
    trained.load_state_dict(model.state_dict())
    trained.eval()
    return trained, record


__all__ = [
    "DPCalibrationError",
    "make_private_module",
    "probe_private_training",
    "train_dp",
]
