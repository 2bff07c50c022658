"""DP-SGD retraining of a recipe with Opacus.

DP-SGD (Abadi et al. 2016, "Deep Learning with Differential Privacy", arXiv
1607.00133). With N training examples and sampling rate q, every step draws a
Poisson batch (each example joins independently with probability q), clips each
per-example gradient to ``ĝᵢ = gᵢ · min(1, C / ‖gᵢ‖₂)``, and updates the model
with ``(Σᵢ ĝᵢ + N(0, σ²C²·I)) / (qN)``. One step is the sampled Gaussian
mechanism; ``T = epochs / q`` steps compose. An accountant turns (σ, q, T, δ)
into the ε of the whole run:

* ``rdp`` — Rényi DP of the sampled Gaussian mechanism (Mironov 2017, "Rényi
  Differential Privacy", arXiv 1702.07476; Mironov, Talwar & Zhang 2019, arXiv
  1908.10530), converted to (ε, δ). A valid upper bound, somewhat loose.
* ``prv`` — privacy random variables composed numerically (Gopi, Lee &
  Wutschitz 2021, "Numerical Composition of Differential Privacy", arXiv
  2106.02848). Tighter, so the same ε buys less noise; but at large ε / small σ
  its discretisation can fail or run for minutes (Opacus issues #591, #601 and
  #604; microsoft/prv_accountant#36). privgate then falls back to RDP — still a
  valid bound, only more conservative — and records that it did.

Opacus (Yousefpour et al. 2021, arXiv 2109.12298) is used as documented:
``ModuleValidator.validate``/``fix`` replace layers DP-SGD cannot train (BatchNorm
mixes examples of a batch → GroupNorm) and the change is recorded;
``PrivacyEngine.make_private_with_epsilon`` calibrates σ for a target ε with
Poisson sampling; ``BatchMemoryManager`` splits large logical batches into
physical ones; after training the accountant's ε is checked against the target.

Training always starts from ``recipe.build()`` — a fresh initialisation, or the
*public* pre-trained start the recipe names — never from the checkpoint under
audit: fine-tuning a model that has already memorised its data gives no
guarantee about that data.

Tuning follows published practice (Ponomareva et al. 2023, "How to DP-fy ML",
arXiv 2303.00654, §5.4): the clipping norm is chosen by
:func:`privgate.dp.clip.search_clip_norm`, a short noise-free run with clipping
at C = 10^k, lowering k until accuracy drops clearly.

Opacus uses PyTorch's default pseudo-random generator for the noise here
(``secure_mode=False``), seeded for reproducibility. That is the usual research
setting; a release that must resist attacks on the noise sampler itself
(floating-point attacks, Mironov 2012) should retrain with Opacus' secure mode.
The noise is drawn from a CPU generator and moved to the training device
(:mod:`privgate.dp.noise`), the Poisson batches from another CPU generator and
dropout masks from a third (:mod:`privgate.training.dropout`): the same seed
trains the same model on a GPU as on the CPU, up to float rounding.
"""

from __future__ import annotations

import dataclasses
import math
import time
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import numpy as np
import torch
from torch import nn

from privgate.dp.noise import draw_noise_on_cpu
from privgate.errors import PrivgateError, RecipeError
from privgate.inputs.outputs import nll
from privgate.recipe import Recipe
from privgate.training.rng import seed_global

AccountantName = Literal["prv", "rdp"]

_ACCOUNTANT_ERRORS = (RuntimeError, ValueError, OverflowError, FloatingPointError, ZeroDivisionError, MemoryError)


class OutputsLoss(nn.CrossEntropyLoss):
    """``nn.CrossEntropyLoss`` reading the outputs with :func:`privgate.inputs.outputs.nll` (Opacus' criterion slot)."""

    def forward(self, input: torch.Tensor, target: torch.Tensor) -> torch.Tensor:  # noqa: A002 - torch's names
        return nll(input, target, reduction=self.reduction)


class DPCalibrationError(PrivgateError):
    """No noise multiplier reaches the requested ε (e.g. ε far too small for the number of steps)."""


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


# --------------------------------------------------------------------------- accounting


def _spent_epsilon(
    accountant: Any, delta: float, history: list[tuple[float, float, int]]
) -> tuple[float, str, str | None]:
    """(ε, accountant used, note) for ``history``; PRV falls back to RDP when it fails or returns inf."""
    from opacus.accountants import RDPAccountant

    name = accountant.mechanism()
    if name == "prv":
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # PRV sizes its grid with an RDP bound, which warns at large ε
                eps = float(accountant.get_epsilon(delta=delta))
            if math.isfinite(eps):
                return eps, "prv", None
            why = "it returned an infinite ε"
        except _ACCOUNTANT_ERRORS as exc:
            why = f"{exc.__class__.__name__}: {str(exc)[:120]}"
        rdp = RDPAccountant()
        rdp.history = list(history)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return (
                float(rdp.get_epsilon(delta=delta)),
                "rdp",
                f"the PRV accountant could not compute ε ({why}); reported with RDP instead",
            )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return float(accountant.get_epsilon(delta=delta)), name, None


def _make_private(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    loader: torch.utils.data.DataLoader,
    settings: DPSettings,
    noise_gen: torch.Generator,
    target_epsilon: float | None,
    noise_multiplier: float | None,
) -> tuple[Any, Any, Any, Any, Any, str | None]:
    """(engine, module, optimizer, criterion, loader, note): wrapped for DP-SGD with Poisson sampling.

    The PRV accountant falls back to RDP when it fails."""
    from opacus import PrivacyEngine

    common = dict(
        module=model,
        optimizer=optimizer,
        data_loader=loader,
        criterion=OutputsLoss(),
        max_grad_norm=settings.max_grad_norm,
        poisson_sampling=True,
        noise_generator=noise_gen,
        grad_sample_mode=settings.grad_sample_mode,
    )

    def unpack(engine: Any, wrapped: tuple[Any, ...], note: str | None) -> tuple[Any, Any, Any, Any, Any, str | None]:
        if len(wrapped) == 4:  # ghost clipping also wraps the loss
            m, o, c, d = wrapped
        else:
            (m, o, d), c = wrapped, OutputsLoss()
        return engine, m, o, c, d, note

    if target_epsilon is None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "secure RNG turned off": documented in the module docstring
            engine = PrivacyEngine(accountant=settings.accountant)
            wrapped = engine.make_private(noise_multiplier=float(noise_multiplier), **common)
        return unpack(engine, wrapped, None)
    chain = [settings.accountant] + (["rdp"] if settings.accountant == "prv" else [])
    note = None
    for name in chain:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                engine = PrivacyEngine(accountant=name)
                wrapped = engine.make_private_with_epsilon(
                    target_epsilon=float(target_epsilon), target_delta=settings.delta, epochs=settings.epochs, **common
                )
            return unpack(engine, wrapped, note)
        except _ACCOUNTANT_ERRORS as exc:
            # get_noise_multiplier runs before make_private wraps anything, so retrying is clean
            if name == chain[-1]:
                raise DPCalibrationError(
                    f"no noise multiplier reaches ε = {target_epsilon:g} at δ = {settings.delta:.3g} in "
                    f"{settings.epochs} epochs "
                    f"({exc.__class__.__name__}: {str(exc)[:160]}); use larger ε values in remediation.epsilons."
                ) from None
            note = (
                f"the PRV accountant could not calibrate the noise for ε = {target_epsilon:g} "
                f"({exc.__class__.__name__}: {str(exc)[:120]}); fell back to RDP, a valid and slightly more "
                f"conservative bound"
            )
    raise AssertionError("unreachable")  # pragma: no cover


# --------------------------------------------------------------------------- training


def _run_epochs(
    module: nn.Module,
    optimizer: Any,
    loss_fn: Any,
    loader: Any,
    epochs: int,
    max_physical: int,
    device: torch.device | None = None,
) -> None:
    """The DP-SGD loop: Poisson batches (drawn on the CPU), split into physical batches by ``BatchMemoryManager``."""
    from opacus.utils.batch_memory_manager import BatchMemoryManager

    module.train()
    with warnings.catch_warnings():
        # Opacus' full backward hooks warn when the inputs need no gradient: expected here
        warnings.filterwarnings("ignore", message="Full backward hook is firing")
        for _ in range(epochs):
            with BatchMemoryManager(
                data_loader=loader, max_physical_batch_size=max_physical, optimizer=optimizer
            ) as batches:
                for xb, yb in batches:
                    if device is not None:
                        xb, yb = xb.to(device), yb.to(device)
                    optimizer.zero_grad(set_to_none=True)
                    loss_fn(module(xb), yb).backward()
                    optimizer.step()
    module.eval()


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
            noise (:mod:`privgate.dp.noise`) and dropout masks
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
    data_gen = torch.Generator().manual_seed(int(seed))
    noise_gen = torch.Generator().manual_seed(int(seed) + 0x5EED)  # on the CPU, whatever the device
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(xt, yt), batch_size=batch, generator=data_gen)

    t0 = time.perf_counter()
    engine, module, dp_opt, criterion, dp_loader, note = _make_private(
        model, optimizer, loader, settings, noise_gen, target_epsilon, noise_multiplier
    )
    draw_noise_on_cpu(dp_opt, noise_gen)
    calibration = time.perf_counter() - t0
    if instrument is not None:
        instrument(dp_opt, float(dp_loader.sample_rate))
    t1 = time.perf_counter()
    forked = [dev.index if dev.index is not None else torch.cuda.current_device()] if dev.type == "cuda" else []
    masks = torch.Generator().manual_seed(dropout_seed(seed))
    with torch.random.fork_rng(devices=forked), seeded_dropout(model, masks):
        seed_global(dropout_seed(seed))  # any other random draw of the forward pass: fixed by the seed
        _run_epochs(module, dp_opt, criterion, dp_loader, settings.epochs, settings.max_physical_batch_size, dev)
    seconds = time.perf_counter() - t1

    sigma = float(dp_opt.noise_multiplier)
    sample_rate = float(dp_loader.sample_rate)
    history = list(engine.accountant.history)
    steps = int(sum(h[2] for h in history))
    eps, used, spent_note = math.inf, engine.accountant.mechanism(), None
    if account and sigma > 0:
        eps, used, spent_note = _spent_epsilon(engine.accountant, settings.delta, history)
    elif account:
        used = "none (σ = 0)"
    if target_epsilon is not None and account and eps > target_epsilon * (1 + 1e-9) + 1e-12:
        raise RuntimeError(
            f"DP-SGD verification failed: the {used} accountant reports ε = {eps:.4g} after training, above "
            f"the target {target_epsilon:g}"
        )
    trained, _ = _fresh(recipe, seed)  # a clean copy: no Opacus hooks or per-sample gradient buffers
    trained.load_state_dict(model.state_dict())
    trained.eval()
    record = DPTraining(
        target_epsilon=None if target_epsilon is None else float(target_epsilon),
        epsilon=eps,
        delta=settings.delta,
        noise_multiplier=sigma,
        max_grad_norm=settings.max_grad_norm,
        sample_rate=sample_rate,
        steps=steps,
        epochs=settings.epochs,
        batch_size=batch,
        accountant=used,
        n_train=n,
        seconds=seconds,
        calibration_seconds=calibration,
        accountant_note="; ".join(s for s in (note, spent_note) if s) or None,
        architecture_changes=changes,
        grad_sample_mode=settings.grad_sample_mode,
    )
    return trained, record


__all__ = [
    "DPCalibrationError",
    "DPSettings",
    "DPTraining",
    "make_private_module",
    "probe_private_training",
    "train_dp",
]
