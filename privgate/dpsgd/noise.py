"""Opacus' DP-SGD noise drawn from a CPU generator, so the same seed gives the same noise on every device.

DP-SGD (Abadi et al. 2016, arXiv 1607.00133) adds N(0, σ²C²·I) per step; Opacus (Yousefpour et al. 2021,
arXiv 2109.12298) draws it from a generator on the gradients' device, and a CUDA generator gives another
stream than a CPU one for the same seed. :func:`draw_noise_on_cpu` replaces one optimiser's ``add_noise`` with
the same draw from a CPU generator, copied to the device: on the CPU bit for bit Opacus' own call. Non-secure
mode only (privgate never turns secure mode on). Why: ``docs/internals-dp-audits.md``.
"""

from __future__ import annotations

from typing import Any

import torch


def gaussian_like(summed: torch.Tensor, std: float, generator: torch.Generator) -> torch.Tensor:
    """N(0, std²) noise shaped like ``summed``, drawn from the CPU ``generator`` and put on ``summed``'s device.

    With a CPU ``summed`` this is Opacus' own non-secure call (``torch.normal(mean=0, std=std, size=…,
    generator=…, dtype=…)``), so the noise is the one Opacus would add; σ = 0 draws nothing.
    """
    if std == 0:
        return torch.zeros_like(summed)
    noise = torch.normal(mean=0, std=std, size=summed.shape, generator=generator, dtype=summed.dtype)
    return noise.to(summed.device)


def draw_noise_on_cpu(optimizer: Any, generator: torch.Generator) -> None:
    """Make Opacus' DP optimiser draw its Gaussian noise from ``generator`` (a CPU generator), whatever the device.

    Reads the noise multiplier at every step, as Opacus does (the adjusted one of
    its adaptive-clipping optimisers when set), and leaves everything else of the
    step — clipping, scaling, the accountant's hook — to Opacus. Call it before
    anything wraps ``optimizer.add_noise`` (the one-run audit's gradient canaries do).

    Raises:
        ValueError: ``generator`` is not a CPU generator, or the optimiser runs in secure mode.
    """
    from opacus.optimizers.optimizer import _check_processed_flag, _mark_as_processed

    if generator.device.type != "cpu":
        raise ValueError(f"the DP-SGD noise generator must be a CPU generator, got one on {generator.device}")
    if getattr(optimizer, "secure_mode", False):
        raise ValueError("draw_noise_on_cpu replaces Opacus' non-secure noise only; secure mode draws its own")
    optimizer.generator = generator

    def add_noise() -> None:
        sigma = getattr(optimizer, "_adjusted_noise_multiplier", optimizer.noise_multiplier)
        std = sigma * optimizer.max_grad_norm
        for p in optimizer.params:
            _check_processed_flag(p.summed_grad)
            p.grad = (p.summed_grad + gaussian_like(p.summed_grad, std, generator)).view_as(p)
            _mark_as_processed(p.summed_grad)

    optimizer.add_noise = add_noise


__all__ = ["draw_noise_on_cpu", "gaussian_like"]
