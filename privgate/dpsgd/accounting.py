"""Accounting for several DP-SGD runs on the same data: the ε of everything the ε search trained.

A run is (σ, q, T) of the Poisson-sampled Gaussian mechanism (Abadi et al. 2016, arXiv 1607.00133), whatever
the model. The handed-out model was chosen among the candidates, so its guarantee composes every run trained
(Liu & Talwar 2019, arXiv 1811.07971; Papernot & Steinke 2022, arXiv 2110.03620): by RDP, added order by order
and converted once (Mironov 2017, arXiv 1702.07476), and by PRV (Gopi, Lee & Wutschitz 2021, arXiv
2106.02848), both through Opacus' accountants; the smaller of the two valid upper bounds is reported with the
accountant that gave it (``docs/remediation.md``, "Two ε").
"""

from __future__ import annotations

import functools
import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from privgate.errors import PrivgateError

#: Rényi orders: Opacus' default orders plus large ones (the random-stopping bound gains from large λ̂).
ORDERS: tuple[float, ...] = tuple(
    [1 + x / 10.0 for x in range(1, 100)] + list(range(12, 64)) + [80, 128, 256, 512, 1024]
)

_ACCOUNTANT_ERRORS = (RuntimeError, ValueError, OverflowError, FloatingPointError, ZeroDivisionError, MemoryError)


class DPCalibrationError(PrivgateError):
    """No noise multiplier reaches the requested ε (e.g. ε far too small for the number of steps)."""


@dataclass(frozen=True)
class Run:
    """One DP-SGD run as an accountant sees it: ``steps`` Poisson-sampled Gaussian steps (σ, q)."""

    noise_multiplier: float
    sample_rate: float
    steps: int

    @classmethod
    def of(cls, training: object) -> Run:
        """The run of a :class:`privgate.dpsgd.train.DPTraining` record (or anything with σ, q and steps)."""
        return cls(
            float(training.noise_multiplier),  # type: ignore[attr-defined]
            float(training.sample_rate),  # type: ignore[attr-defined]
            int(training.steps),  # type: ignore[attr-defined]
        )

    @property
    def history(self) -> tuple[float, float, int]:
        """The entry of Opacus' accountant history for this run."""
        return (self.noise_multiplier, self.sample_rate, self.steps)


def sampling(n: int, batch_size: int, epochs: int) -> tuple[float, int]:
    """(q, T) of a DP-SGD run on ``n`` rows, as :mod:`privgate.dpsgd.opacus_runner` and Opacus make it.

    Opacus' Poisson loader samples at q = 1 / len(loader) with
    len(loader) = ⌈n / min(B, n)⌉ steps per epoch.
    """
    per_epoch = math.ceil(n / min(batch_size, n))
    q = 1.0 / per_epoch
    return q, int(epochs * int(1 / q))


@functools.lru_cache(maxsize=1024)
def _step_rdp(sample_rate: float, noise_multiplier: float, orders: tuple[float, ...]) -> np.ndarray:
    """One step's RDP at each order: Opacus' ``compute_rdp`` with ``steps=1`` (T steps are T times it, as Opacus
    computes them). Cached: at fractional orders it is a series summed in Python, tenths of a second a call,
    and a search composes the runs it already trained again after every candidate."""
    from opacus.accountants.analysis.rdp import compute_rdp

    step = np.asarray(compute_rdp(q=sample_rate, noise_multiplier=noise_multiplier, steps=1, orders=list(orders)))
    step.flags.writeable = False
    return step


def rdp_curve(runs: Sequence[Run], orders: Sequence[float] = ORDERS) -> np.ndarray:
    """ρ(α) of the composition of ``runs`` at each order: the sum of each run's RDP (Mironov 2017, Prop. 1)."""
    total = np.zeros(len(orders))
    for r in runs:
        if r.noise_multiplier <= 0:
            return np.full(len(orders), np.inf)
        total = total + _step_rdp(float(r.sample_rate), float(r.noise_multiplier), tuple(orders)) * r.steps
    return total


def epsilon_from_rdp(rdp: np.ndarray, delta: float, orders: Sequence[float] = ORDERS) -> tuple[float, float]:
    """(ε, best order) of an RDP curve at δ: Opacus' conversion (Balle et al. 2020, arXiv 1905.09982, Thm. 21)."""
    from opacus.accountants.analysis.rdp import get_privacy_spent

    if not np.all(np.isfinite(rdp)):
        finite = np.isfinite(rdp)
        if not finite.any():
            return math.inf, math.nan
        rdp, orders = rdp[finite], [o for o, f in zip(orders, finite) if f]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "optimal order is the largest alpha": still a valid bound
        eps, order = get_privacy_spent(orders=list(orders), rdp=list(rdp), delta=delta)
    return float(eps), float(order)


def delta_from_rdp(rdp: np.ndarray, epsilon: float, orders: Sequence[float] = ORDERS) -> float:
    """The δ at which an RDP curve gives ``epsilon``: the same conversion, solved for δ (min over orders).

    δ = min_α exp((α − 1)(ρ(α) − ε) + (α − 1)·log(1 − 1/α) − log α).
    """
    a = np.asarray(orders, dtype=float)
    with np.errstate(over="ignore", invalid="ignore"):
        log_delta = (a - 1) * (np.asarray(rdp) - epsilon) + (a - 1) * np.log1p(-1 / a) - np.log(a)
    return float(min(1.0, np.exp(np.nanmin(log_delta))))


def prv_epsilon(runs: Sequence[Run], delta: float) -> float:
    """ε of the composition of ``runs`` with Opacus' PRV accountant (raises when its discretisation fails)."""
    from opacus.accountants import PRVAccountant

    acc = PRVAccountant()
    acc.history = [r.history for r in runs]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        eps = float(acc.get_epsilon(delta=delta))
    if not math.isfinite(eps):
        raise ValueError("the PRV accountant returned an infinite ε")
    return eps


@dataclass(frozen=True)
class Composition:
    """The (ε, δ) of several runs composed; ``epsilon`` is the tighter of the RDP and PRV bounds."""

    epsilon: float
    delta: float
    accountant: str
    runs: int
    rdp_epsilon: float
    prv_epsilon: float | None
    note: str | None = None


def compose(runs: Sequence[Run], delta: float, accountant: str = "prv") -> Composition:
    """Every run in ``runs`` composed at ``delta``: RDP always, PRV too when ``accountant`` is ``prv``.

    Both are valid upper bounds on the ε of releasing all runs (and so of any
    choice among them that reads only their outputs); the smaller is reported.
    PRV failing (at large ε its discretisation can fail: Opacus issues #591,
    #601, #604) leaves the RDP bound, with a note saying so.
    """
    if not runs:
        return Composition(0.0, delta, "none", 0, 0.0, None)
    rdp_eps, _ = epsilon_from_rdp(rdp_curve(runs), delta)
    prv, note = None, None
    if accountant == "prv":
        try:
            prv = prv_epsilon(runs, delta)
        except _ACCOUNTANT_ERRORS as exc:
            note = f"the PRV accountant could not compose the runs ({exc.__class__.__name__}); RDP's bound is used"
    if prv is not None and prv < rdp_eps:
        return Composition(prv, delta, "prv", len(runs), rdp_eps, prv, note)
    return Composition(rdp_eps, delta, "rdp", len(runs), rdp_eps, prv, note)


@functools.lru_cache(maxsize=256)
def calibration(
    target_epsilon: float, delta: float, sample_rate: float, epochs: int, accountant: str
) -> tuple[float, str, str | None]:
    """(σ, accountant used, why PRV fell back or None) reaching ``target_epsilon`` in one run of ``epochs``.

    Opacus' ``get_noise_multiplier``, the calibration ``PrivacyEngine.make_private_with_epsilon`` makes; PRV
    falls back to RDP where it fails. A pure function of its arguments, so it is cached: its binary search
    over σ costs seconds (Opacus' RDP at fractional orders), and a search's candidates, their reference models
    and a canary audit of the same settings each ask for the same σ.

    Raises:
        DPCalibrationError: no σ reaches the target.
    """
    from opacus.accountants.utils import get_noise_multiplier

    chain = [accountant] + (["rdp"] if accountant == "prv" else [])
    note = None
    for name in chain:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                sigma = get_noise_multiplier(
                    target_epsilon=float(target_epsilon),
                    target_delta=delta,
                    sample_rate=sample_rate,
                    epochs=epochs,
                    accountant=name,
                )
            return float(sigma), name, note
        except _ACCOUNTANT_ERRORS as exc:
            if name == chain[-1]:
                raise DPCalibrationError(
                    f"no noise multiplier reaches ε = {target_epsilon:g} at δ = {delta:.3g} in {epochs} epochs "
                    f"({exc.__class__.__name__}: {str(exc)[:160]}); use larger ε values in remediation.epsilons."
                ) from None
            note = (
                f"the PRV accountant could not calibrate the noise for ε = {target_epsilon:g} "
                f"({exc.__class__.__name__}: {str(exc)[:120]}); fell back to RDP, a valid and slightly more "
                f"conservative bound"
            )
    raise AssertionError("unreachable")  # pragma: no cover


def calibrate(
    target_epsilon: float, delta: float, sample_rate: float, epochs: int, accountant: str
) -> tuple[float, str]:
    """(σ, accountant used) reaching ``target_epsilon`` in one run: :func:`calibration` without its note.

    Raises:
        DPCalibrationError: no σ reaches the target.
    """
    sigma, name, _ = calibration(target_epsilon, delta, sample_rate, epochs, accountant)
    return sigma, name


__all__ = [
    "ORDERS",
    "Composition",
    "DPCalibrationError",
    "Run",
    "calibrate",
    "calibration",
    "compose",
    "delta_from_rdp",
    "epsilon_from_rdp",
    "prv_epsilon",
    "rdp_curve",
    "sampling",
]
