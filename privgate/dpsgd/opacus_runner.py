"""One DP-SGD run with Opacus, whatever the model and whatever the unit of privacy (a record or a user).

DP-SGD (Abadi et al. 2016, arXiv 1607.00133) over *units* — one record, or one user whose records' gradients
are summed before the clip (McMahan et al. 2018, arXiv 1710.06963) — with Opacus (Yousefpour et al. 2021,
arXiv 2109.12298) as documented: ``make_private`` for a given σ or for the σ ``make_private_with_epsilon`` would
calibrate for a target ε (cached: :func:`privgate.dpsgd.accounting.calibration`; PRV, Gopi et al. 2021, arXiv
2106.02848, falling back to RDP, Mironov 2017, arXiv 1702.07476), Poisson sampling from a seeded CPU generator,
noise from :mod:`privgate.dpsgd.noise`. The ε spent is stated by the run's own accountant (``engine``) or by
:func:`privgate.dpsgd.accounting.compose` (``compose``). Details: ``docs/internals-dp-audits.md``.
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from privgate.dpsgd.accounting import _ACCOUNTANT_ERRORS, DPCalibrationError, calibration
from privgate.dpsgd.noise import draw_noise_on_cpu
from privgate.dpsgd.records import Accounting, DPSettings, DPTraining


def _engine_epsilon(
    accountant: Any, delta: float, history: list[tuple[float, float, int]]
) -> tuple[float, str, str | None]:
    """(ε, accountant used, note) from the run's own accountant; PRV falls back to RDP when it fails or returns inf."""
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


#: ``step(module, criterion, batch)``: forward and backward on one (physical) batch of units, leaving each
#: parameter's per-unit gradients for Opacus to clip; returns the batch's loss (``None``: nothing to record).
Step = Callable[[nn.Module, Any, Any], "float | None"]


@dataclass
class PrivateRun:
    """A model, optimiser and Poisson loader made private by Opacus, ready for :meth:`train`.

    Attributes:
        module: the model wrapped for per-unit gradients; ``optimizer``: Opacus' DP optimiser;
        criterion: the loss (wrapped for ghost clipping); ``loader``: the Poisson loader over the units.
        note: why the accountant fell back, when it did; ``calibration_seconds``: time to wrap and calibrate.
    """

    engine: Any
    module: Any
    optimizer: Any
    criterion: Any
    loader: Any
    note: str | None
    calibration_seconds: float
    seconds: float = 0.0
    _on_step: Callable[[], Any] | None = None

    @property
    def sample_rate(self) -> float:
        return float(self.loader.sample_rate)

    def train(
        self, step: Step, epochs: int, physical: int | None = None, on_step: Callable[[], Any] | None = None
    ) -> list[float]:
        """``epochs`` passes of DP-SGD; returns the losses ``step`` gave in the last pass.

        ``physical``: split each Poisson batch into batches of at most this many units (``BatchMemoryManager``:
        the same update, less memory); ``None``: a step's units in one pass (user-level DP sums a user's
        records in one backward pass). ``on_step``: called after each noisy step the optimiser takes (a
        learning-rate schedule's ``step``), not after the physical batches it skips.
        """
        self._on_step = on_step
        from opacus.utils.batch_memory_manager import BatchMemoryManager

        t0 = time.perf_counter()
        losses: list[float] = []
        self.module.train()
        with warnings.catch_warnings():
            # Opacus' backward hooks warn when the inputs need no gradient: expected here
            warnings.filterwarnings("ignore", message=".*backward hook.*")
            for _ in range(epochs):
                losses = []
                if physical is None:
                    self._pass(self.loader, step, losses)
                    continue
                with BatchMemoryManager(
                    data_loader=self.loader, max_physical_batch_size=physical, optimizer=self.optimizer
                ) as batches:
                    self._pass(batches, step, losses)
        self.module.eval()
        self.seconds += time.perf_counter() - t0
        return losses

    def _pass(self, batches: Iterable[Any], step: Step, losses: list[float]) -> None:
        for batch in batches:
            self.optimizer.zero_grad(set_to_none=True)
            loss = step(self.module, self.criterion, batch)
            self.optimizer.step()
            if self._on_step is not None and not getattr(self.optimizer, "_is_last_step_skipped", False):
                self._on_step()
            if loss is not None:
                losses.append(loss)

    def record(
        self,
        settings: DPSettings,
        *,
        n_units: int,
        batch_size: int,
        accounting: Accounting | None,
        target_epsilon: float | None = None,
        grad_sample_mode: str | None = None,
        architecture_changes: list[str] | None = None,
    ) -> DPTraining:
        """The run's :class:`DPTraining`: σ, q and T as Opacus ran them, and the ε spent (module docstring).

        Raises:
            RuntimeError: with ``engine`` accounting, the accountant reports more than ``target_epsilon``.
        """
        sigma = float(self.optimizer.noise_multiplier)
        history = list(self.engine.accountant.history)
        steps = int(sum(h[2] for h in history))
        eps, used, spent_note = math.inf, self.engine.accountant.mechanism(), None
        if accounting is not None and sigma <= 0:
            used = "none (σ = 0)"
        elif accounting == "engine":
            eps, used, spent_note = _engine_epsilon(self.engine.accountant, settings.delta, history)
        elif accounting == "compose":
            from privgate.dpsgd.accounting import Run, compose

            comp = compose([Run(sigma, self.sample_rate, steps)], settings.delta, settings.accountant)
            eps, used, spent_note = comp.epsilon, comp.accountant, comp.note
        if accounting == "engine" and target_epsilon is not None and eps > target_epsilon * (1 + 1e-9) + 1e-12:
            raise RuntimeError(
                f"DP-SGD verification failed: the {used} accountant reports ε = {eps:.4g} after training, above "
                f"the target {target_epsilon:g}"
            )
        return DPTraining(
            target_epsilon=None if target_epsilon is None else float(target_epsilon),
            epsilon=eps,
            delta=settings.delta,
            noise_multiplier=sigma,
            max_grad_norm=settings.max_grad_norm,
            sample_rate=self.sample_rate,
            steps=steps,
            epochs=settings.epochs,
            batch_size=batch_size,
            accountant=used,
            n_train=n_units,
            seconds=self.seconds,
            calibration_seconds=self.calibration_seconds,
            accountant_note="; ".join(s for s in (self.note, spent_note) if s) or None,
            architecture_changes=list(architecture_changes or []),
            grad_sample_mode=grad_sample_mode or settings.grad_sample_mode,
        )

    def close(self) -> None:
        """Remove Opacus' hooks from the wrapped model."""
        close = getattr(self.module, "_close", None)
        if close is not None:
            close()


def _wrap(
    common: dict[str, Any], settings: DPSettings, noise_multiplier: float | None, target_epsilon: float | None
) -> tuple[Any, tuple[Any, ...], str | None]:
    """Opacus's ``make_private`` with σ given, or calibrated for ``target_epsilon`` as ``make_private_with_epsilon``
    calibrates it (:func:`privgate.dpsgd.accounting.calibration`, cached; PRV falling back to RDP):
    ``(engine, what it wrapped, the fallback's note or None)``."""
    from opacus import PrivacyEngine

    if target_epsilon is None:
        sigma, name, note = float(noise_multiplier or 0.0), settings.accountant, None
    else:  # make_private_with_epsilon's own q: one over the number of (expected) batches
        q = 1 / len(common["data_loader"])
        sigma, name, note = calibration(float(target_epsilon), settings.delta, q, settings.epochs, settings.accountant)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "secure RNG turned off": stated in the DP statement's caveats
        engine = PrivacyEngine(accountant=name)
        return engine, engine.make_private(noise_multiplier=sigma, **common), note


def make_private(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    units: torch.utils.data.Dataset,
    *,
    settings: DPSettings,
    seed: int,
    batch_size: int,
    criterion: nn.Module,
    grad_sample_mode: str,
    noise_multiplier: float | None = None,
    target_epsilon: float | None = None,
    instrument: Callable[[Any, float], None] | None = None,
) -> PrivateRun:
    """``model`` and ``optimizer`` made private over ``units`` (one item per unit of privacy), Poisson-sampled.

    Give exactly one of ``noise_multiplier`` (σ; 0: clipping without noise) or ``target_epsilon`` (σ
    calibrated by ``make_private_with_epsilon`` for ``settings.epochs``, PRV falling back to RDP). The Poisson
    batches of expected size ``batch_size`` are drawn from a CPU generator seeded with ``seed``, the noise from
    another (seed + 0x5EED, :mod:`privgate.dpsgd.noise`). ``instrument`` is called once with the DP optimiser and
    q before the first step (the one-run audits add their canaries to the noisy step through it).

    Raises:
        DPCalibrationError: no σ reaches ``target_epsilon``.
    """
    if (target_epsilon is None) == (noise_multiplier is None):
        raise ValueError("give exactly one of target_epsilon or noise_multiplier")
    data_gen = torch.Generator().manual_seed(int(seed))
    noise_gen = torch.Generator().manual_seed(int(seed) + 0x5EED)  # on the CPU, whatever the device
    loader = torch.utils.data.DataLoader(units, batch_size=batch_size, generator=data_gen)
    common = dict(
        module=model,
        optimizer=optimizer,
        data_loader=loader,
        criterion=criterion,
        max_grad_norm=settings.max_grad_norm,
        poisson_sampling=True,
        noise_generator=noise_gen,
        grad_sample_mode=grad_sample_mode,
    )
    t0 = time.perf_counter()
    model.train()  # Opacus validates (and DP-SGD trains) a module in training mode
    engine, wrapped, note = _wrap(common, settings, noise_multiplier, target_epsilon)
    if len(wrapped) == 4:  # ghost clipping also wraps the loss
        module, dp_opt, wrapped_loss, dp_loader = wrapped
    else:
        (module, dp_opt, dp_loader), wrapped_loss = wrapped, criterion
    draw_noise_on_cpu(dp_opt, noise_gen)
    run = PrivateRun(engine, module, dp_opt, wrapped_loss, dp_loader, note, time.perf_counter() - t0)
    if instrument is not None:
        instrument(dp_opt, run.sample_rate)
    return run


__all__ = [
    "DPCalibrationError",
    "PrivateRun",
    "Step",
    "make_private",
]
