"""Choosing DP-SGD's clipping norm: the noise-free search of published tuning practice.

Ponomareva et al. 2023 ("How to DP-fy ML", arXiv 2303.00654, §5.4.1): train
briefly with per-example clipping but no noise at C = 10^k and keep the smallest
C before accuracy drops clearly; Sabau 2023 (master's thesis "Analyse und
Bewertung von Methoden zur Sicherung der Vertraulichkeit in Neuronalen Netzen",
OTH Amberg-Weiden, §5.4.4) found the optimum at 10^-5 for CIFAR-10. Where the search's C comes from
(:func:`choose_clip`): the policy's, or — ``max_grad_norm: auto`` — this search on the audit's *population*, never
on the members (noise-free training on the members is covered by no ε); without a population, C = 1.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
import torch
from torch import nn

from privgate.dpsgd.records import DPSettings
from privgate.dpsgd.train import train_dp
from privgate.executors import Executor, executor_for
from privgate.inputs.data import AuditData
from privgate.options import RunOptions
from privgate.outputs import as_logits_torch, kind_of
from privgate.policy import Policy
from privgate.recipe import Recipe
from privgate.threads import limit_threads

#: Clip norms tried by :func:`search_clip_norm`: 10^1 down to 10^-5 (the thesis' CIFAR-10 optimum was 10^-5).
CLIP_EXPONENTS = tuple(range(1, -6, -1))
#: An accuracy drop "clearly" below the best so far: at least this much (absolute) …
CLEAR_DROP = 0.02
#: … and at least this many standard errors of the validation accuracy.
CLEAR_DROP_SE = 2.0
#: Fraction of the training rows held out to validate the clip-norm search.
CLIP_VALIDATION_FRACTION = 0.2


def accuracy(model: nn.Module, x: np.ndarray, y: np.ndarray) -> float:
    """Fraction of (x, y) the model labels correctly (eval mode, no gradients)."""
    with torch.no_grad():
        out = model(torch.as_tensor(np.ascontiguousarray(x), dtype=torch.float32))
        pred = as_logits_torch(out, kind_of(out) or "logits").argmax(dim=1).numpy()  # one logit z: class 1 iff z > 0
    return float(np.mean(pred == np.asarray(y)))


def clip_run(
    recipe: Recipe,
    x_fit: np.ndarray,
    y_fit: np.ndarray,
    x_val: np.ndarray,
    y_val: np.ndarray,
    seed: int,
    settings: DPSettings,
    device: str = "cpu",
) -> float:
    """One noise-free clipped run (σ = 0, no accounting) at ``settings.max_grad_norm``: its validation accuracy."""
    model, _ = train_dp(
        recipe, x_fit, y_fit, seed, settings=settings, noise_multiplier=0.0, account=False, device=device
    )
    return accuracy(model, x_val, y_val)


def search_clip_norm(
    recipe: Recipe,
    x: np.ndarray,
    y: np.ndarray,
    seed: int,
    settings: DPSettings,
    *,
    epochs: int | None = None,
    exponents: tuple[int, ...] = CLIP_EXPONENTS,
    device: str = "cpu",
    executor: Executor | None = None,
    threads: int | None = None,
) -> tuple[float, list[dict[str, Any]]]:
    """The clipping norm C for DP-SGD: the noise-free search of published tuning practice.

    Train briefly with per-example clipping but no noise (σ = 0) at C = 10^k for
    k = 1, 0, −1, …, and stop at the first C whose validation accuracy drops
    clearly below the best so far; return the last good C (Ponomareva et al.
    2023, arXiv 2303.00654, §5.4.1; Sabau 2023, §5.4.4). A small C clips
    most gradients, so the noise σC added per step is small relative to them.

    "Clearly" = more than max(:data:`CLEAR_DROP`, :data:`CLEAR_DROP_SE` ×
    standard error of the validation accuracy). Validation uses a seeded
    :data:`CLIP_VALIDATION_FRACTION` of the training rows held out of these
    runs, so the audit's held-out data is never touched by tuning. (Tuning on
    the private data is itself not covered by the DP guarantee; the report
    counts these runs.)

    ``device`` is where the runs train (:mod:`privgate.device`). With a Ray
    ``executor`` (:mod:`privgate.executors`) every C trains at once, as one task
    of ``threads`` threads each, and the stopping rule reads the results in
    order: the same rows and the same C as the local loop, which stops at the
    first clear drop (runs past it are discarded unread: they decide nothing).

    Returns:
        (C, rows) with one row ``{max_grad_norm, accuracy, good}`` per run.
    """
    n = len(y)
    order = np.random.default_rng(np.random.SeedSequence([seed, 0xC11])).permutation(n)
    n_val = max(1, int(round(CLIP_VALIDATION_FRACTION * n)))
    val, fit = order[:n_val], order[n_val:]
    brief = dataclasses.replace(settings, epochs=epochs or settings.epochs)
    run_args = [(recipe, x[fit], y[fit], x[val], y[val], seed, brief.with_clip(10.0**k), device) for k in exponents]
    runner = executor if executor is not None and executor.name != "local" else None
    # on a cluster every C trains at once and the rule reads them in order; here one after another, stopping early
    accuracies = runner.map(clip_run, run_args, threads=threads) if runner is not None else None
    rows: list[dict[str, Any]] = []
    best: float | None = None
    chosen: float | None = None
    for i, k in enumerate(exponents):
        clip = 10.0**k
        acc = accuracies[i] if accuracies is not None else clip_run(*run_args[i])
        tol = (
            CLEAR_DROP
            if best is None
            else max(CLEAR_DROP, CLEAR_DROP_SE * math.sqrt(max(best * (1 - best), 1e-12) / n_val))
        )
        good = best is None or acc >= best - tol
        rows.append({"max_grad_norm": clip, "accuracy": round(acc, 6), "good": bool(good)})
        if not good:
            break
        chosen = clip
        best = acc if best is None else max(best, acc)
    assert chosen is not None
    return chosen, rows


def choose_clip(
    policy: Policy, recipe: Recipe, data: AuditData, settings: DPSettings, run: RunOptions
) -> tuple[float, list[dict[str, Any]], str, str | None]:
    """(C, clip-search rows, where C came from, the rows the search trained on) — never the members.

    ``max_grad_norm: auto`` runs the noise-free search of
    :func:`search_clip_norm` on the audit's population
    (same distribution, not trained on by the target, so no member is read
    without noise); without a population the default C = 1 is used.
    """
    if policy.remediation.max_grad_norm != "auto":
        return settings.max_grad_norm, [], "the policy (remediation.max_grad_norm)", None
    pop = data.population
    if pop is None:
        return (
            1.0,
            [],
            "the default 1.0: max_grad_norm is auto but the audit has no population to tune it on, and privgate "
            "never tunes on the members without noise",
            None,
        )
    run.say(f"choosing the clip norm (noise-free runs at C = 10^k on the {len(pop)} population rows)")
    brief = max(1, math.ceil(settings.epochs / 3))
    where = {"device": run.device, "executor": executor_for(run), "threads": run.threads}  # Ray: C's in parallel
    with limit_threads(run.threads):
        clip, rows = search_clip_norm(recipe, pop.x, pop.y, run.seed, settings, epochs=brief, **where)
    used = f"population ({len(pop)} rows, {pop.source})"
    source = (
        f"noise-free clip-norm search on the {used}, never the members (Ponomareva et al. 2023, arXiv "
        "2303.00654, §5.4.1)"
    )
    return clip, rows, source, used


__all__ = [
    "CLEAR_DROP",
    "CLEAR_DROP_SE",
    "CLIP_EXPONENTS",
    "CLIP_VALIDATION_FRACTION",
    "accuracy",
    "choose_clip",
    "clip_run",
    "search_clip_norm",
]
