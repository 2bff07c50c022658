"""LDP-SGD: the client randomiser and the server step, batched over trials.

Client: Matsumoto et al. 2022 (arXiv 2206.09122), Algorithm 1, after Erlingsson et al. 2020 (arXiv
2001.03618) and Duchi, Jordan & Wainwright 2018 — clip to L, project the norm to ±L at random, report a
random unit vector on the side of the sign kept with probability e^ε/(1 + e^ε); the output is ε-LDP. Server:
Algorithm 2, its scale kept as printed (1/d of the unbiased one: it only sets the step's length), then the
projection onto the ball of radius ‖C‖₂. A user's randomiser replaces :func:`ldp_sgd_randomise`:
``randomise(grads [K, d], epsilon, clip, generator) -> Tensor [K, d]``, its output through the same server
step. The formulas: ``docs/internals-dp-audits.md``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Protocol

import torch

from privgate.audits.entry import MechanismError
from privgate.errors import PrivgateError
from privgate.errors import clip as clip_text


class Randomiser(Protocol):
    """``randomise(grads [K, d], epsilon, clip, generator) -> Tensor [K, d]``: one report per row."""

    def __call__(
        self, grads: torch.Tensor, epsilon: float, clip: float, generator: torch.Generator
    ) -> torch.Tensor: ...


def keep_probability(epsilon: float) -> float:
    """e^ε / (1 + e^ε): the probability that step 3 keeps the sign of ⟨z, v⟩ (computed without overflow)."""
    return 1.0 / (1.0 + math.exp(-epsilon))


def ldp_sgd_randomise(grads: torch.Tensor, epsilon: float, clip: float, generator: torch.Generator) -> torch.Tensor:
    """Algorithm 1 of Matsumoto et al. 2022 (arXiv 2206.09122) (LDP-SGD client side) on every row of ``grads`` at once.

    Args:
        grads: ``[K, d]`` raw gradients, one per trial.
        epsilon: the local privacy parameter ε.
        clip: the ℓ₂ clipping norm L.
        generator: the only source of randomness (reproducible trials).

    Returns:
        ``[K, d]`` unit vectors ẑ, in the dtype of ``grads``.
    """
    k, d = grads.shape
    norms = grads.norm(dim=1)
    p_plus = 0.5 + norms.clamp(max=clip) / (2.0 * clip)  # ‖x‖ = min(‖g‖, L)
    proj_sign = torch.where(torch.rand(k, generator=generator, dtype=grads.dtype) < p_plus, 1.0, -1.0)
    v = torch.randn(k, d, generator=generator, dtype=grads.dtype)
    # sgn⟨z, v⟩ = (±1) · sgn⟨g, v⟩: neither the clipping nor ‖v‖ changes a sign
    dots = torch.linalg.vecdot(grads, v)
    zero = norms <= 0
    if bool(zero.any()):
        dots = torch.where(zero, v[:, 0], dots)  # x = 0: the fixed direction e₁ (either sign is equally likely)
    along = torch.where(dots >= 0, 1.0, -1.0) * proj_sign
    keep = torch.rand(k, generator=generator, dtype=grads.dtype) < keep_probability(epsilon)
    sign = torch.where(keep, along, -along).to(grads.dtype)
    return v * (sign / v.norm(dim=1)).unsqueeze(1)


def server_scale(d: int, epsilon: float, clip: float) -> float:
    """The factor of Algorithm 2, line 4: L√π/2 · Γ((d−1)/2+1)/Γ(d/2+1) · (e^ε+1)/(e^ε−1)."""
    gamma_ratio = math.exp(math.lgamma((d - 1) / 2 + 1) - math.lgamma(d / 2 + 1))
    return clip * math.sqrt(math.pi) / 2 * gamma_ratio / math.tanh(epsilon / 2)


def server_step_size(d: int, epsilon: float, clip: float, radius: float, clients: int = 1) -> float:
    """η of Algorithm 2, line 5: ‖C‖₂ √n / (L √d) · (e^ε−1)/(e^ε+1)."""
    return radius * math.sqrt(clients) / (clip * math.sqrt(d)) * math.tanh(epsilon / 2)


def server_update(
    theta: torch.Tensor, reports: torch.Tensor, epsilon: float, clip: float, radius: float
) -> torch.Tensor:
    """θ_{t+1} = Π_C(θ_t − η g_t) for one client per round, one row of ``reports`` per trial.

    Args:
        theta: ``[d]`` the global model θ_t.
        reports: ``[K, d]`` randomised gradients ẑ.
        epsilon: ε of the mechanism (the server's scaling uses the claimed ε).
        clip: L.
        radius: ‖C‖₂, the radius of the parameter ball C.

    Returns:
        ``[K, d]`` updated models, in the dtype of ``reports``.
    """
    d = theta.numel()
    step = server_step_size(d, epsilon, clip, radius) * server_scale(d, epsilon, clip)
    theta = theta.to(reports.dtype)
    # ‖θ − s·ẑ‖² = ‖θ‖² − 2s⟨θ, ẑ⟩ + s²‖ẑ‖²: the projection's factor without another pass over [K, d]
    sq = float(theta @ theta) - 2 * step * (reports @ theta) + step**2 * torch.linalg.vecdot(reports, reports)
    factor = (radius / sq.clamp_min(0).sqrt().clamp_min(radius)).unsqueeze(1)
    new = torch.sub(theta.unsqueeze(0).expand_as(reports), reports, alpha=step)
    if bool((factor < 1).any()):
        new.mul_(factor)  # Π_C: rows outside the ball are scaled back onto it
    return new


def check_reports(out: object, grads: torch.Tensor, name: str) -> torch.Tensor:
    """The randomiser's output as a float tensor of the input's shape, or a :class:`MechanismError` naming it."""
    if not isinstance(out, torch.Tensor):
        raise MechanismError(
            f"mechanism {name}: returned a {type(out).__name__}, expected a torch.Tensor of shape {tuple(grads.shape)}."
        )
    if tuple(out.shape) != tuple(grads.shape):
        raise MechanismError(
            f"mechanism {name}: returned shape {tuple(out.shape)} for gradients of shape {tuple(grads.shape)}; it "
            "must return one report per row."
        )
    if not out.dtype.is_floating_point:
        raise MechanismError(f"mechanism {name}: returned dtype {out.dtype}, expected a floating-point tensor.")
    if not torch.isfinite(out).all():
        raise MechanismError(f"mechanism {name}: returned NaN or infinite values.")
    return out.to(grads.dtype)


def call_mechanism(
    fn: Callable[..., torch.Tensor],
    name: str,
    grads: torch.Tensor,
    epsilon: float,
    clip: float,
    generator: torch.Generator,
) -> torch.Tensor:
    """Run a randomiser on one chunk of trials; a failure in the user's code is a :class:`MechanismError`."""
    if fn is ldp_sgd_randomise:
        return fn(grads, epsilon, clip, generator)
    try:
        out = fn(grads.clone(), float(epsilon), float(clip), generator)
    except PrivgateError:
        raise
    except Exception as exc:  # the user's code: report it in one sentence
        raise MechanismError(f"mechanism {name}: failed ({exc.__class__.__name__}: {clip_text(str(exc))}).") from None
    return check_reports(out, grads, name)


__all__ = [
    "MechanismError",
    "Randomiser",
    "call_mechanism",
    "check_reports",
    "keep_probability",
    "ldp_sgd_randomise",
    "server_scale",
    "server_step_size",
    "server_update",
]
