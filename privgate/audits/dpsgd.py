"""``privgate audit dpsgd``: audit a DP-SGD claim with one training run and m canaries.

Steinke, Nasr & Jagielski 2023, "Privacy Auditing with One (1) Training Run" (arXiv 2305.08846): m canaries
(default 1,000), each included with probability 1/2, one training run, the right guesses turned into an ε lower
bound at the claimed δ (:mod:`privgate.audits.one_run_bound`). White-box on privgate's own DP-SGD
(:mod:`privgate.audits.dpsgd_whitebox`) or black-box on the user's trainer
(:mod:`privgate.audits.dpsgd_blackbox`). ``fail`` when ε_lb exceeds the claim; ``inconclusive`` when m canaries
could never prove more than it; else ``pass`` — the claim was not refuted, which one-run bounds (loose for
Gaussian noise, §7) cannot turn into "tight". See ``docs/audits.md``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import numpy as np

from privgate import __version__
from privgate.audits.bundled import DPSGD_RECIPE, digits
from privgate.audits.dpsgd_blackbox import Trainer, call_trainer, loss_scores, mislabelled_canaries
from privgate.audits.dpsgd_whitebox import train_with_canaries
from privgate.audits.one_run_bound import GUESS_FRACTIONS, audit_bound, guess_counts, max_provable_from_canaries
from privgate.dpsgd.records import DPSettings
from privgate.dpsgd.train import make_private_module
from privgate.errors import PrivgateError
from privgate.inputs.data import Dataset
from privgate.recipe import Recipe
from privgate.report.jobs.claims import DpsgdAuditReport, GuessAttempt, claim_check
from privgate.threads import limit_threads

BOUND_NAME = "Steinke, Nasr & Jagielski 2023 (arXiv 2305.08846), (ε, δ) bound with its 2mδ term"


@dataclass(frozen=True)
class DpsgdSettings:
    """The claim and the audit's size.

    Args:
        epsilon: the claimed ε.
        delta: the claimed δ (the bound needs 2·m·δ ≤ 1).
        canaries: m.
        confidence: probability that the reported bound holds.
        seed: drives canary choice, inclusion, training and noise.
        clip: white-box only: the DP-SGD clipping norm C (and the canaries' norm).
        accountant: white-box only: ``prv`` or ``rdp``, as in remediation.
    """

    epsilon: float
    delta: float = 1e-5
    canaries: int = 1000
    confidence: float = 0.95
    seed: int = 0
    clip: float = 1.0
    accountant: str = "prv"

    def __post_init__(self) -> None:
        from privgate.audits.ldp_limits import epsilon_problem

        problem = epsilon_problem(self.epsilon)
        if problem:
            raise PrivgateError(f"--epsilon: {problem}.")
        if not 0 < self.delta < 1:
            raise PrivgateError(f"--delta: must lie strictly between 0 and 1, got {self.delta}.")
        if self.canaries < 2:
            raise PrivgateError(f"--canaries: at least 2 canaries are needed, got {self.canaries}.")
        if not 0.5 < self.confidence < 1:
            raise PrivgateError(f"--confidence: must lie strictly between 0.5 and 1, got {self.confidence}.")
        if not (math.isfinite(self.clip) and self.clip > 0):
            raise PrivgateError(f"--clip: the clipping norm must be a positive finite number, got {self.clip}.")


def _decide(s: DpsgdSettings, lb: float, ceiling: float) -> tuple[str, str]:
    claim = f"claimed ε = {s.epsilon:g} (δ = {s.delta:g})"
    if lb > s.epsilon:
        return (
            "fail",
            f"FAIL: {claim} — the canaries prove ε ≥ {lb:.3f} at {s.confidence * 100:g}% confidence: the training does "
            "not deliver its claim.",
        )
    if ceiling <= s.epsilon:
        if 2 * s.canaries * s.delta > 1:
            why = f"2·m·δ = {2 * s.canaries * s.delta:g} > 1, so the bound cannot be used; lower δ or m"
        else:
            why = (
                f"{s.canaries} canaries can prove at most ε = {ceiling:.3f}, not above the claim; "
                "more canaries (--canaries) could test it"
            )
        return "inconclusive", f"INCONCLUSIVE: {claim} — {why} (measured ε ≥ {lb:.3f})."
    return "pass", (
        f"PASS: {claim} — no violation found: the canaries prove ε ≥ {lb:.3f}; "
        f"{s.canaries} canaries could have proved up to {ceiling:.3f}."
    )


@dataclass
class _Run:
    """One training run's canary scores and how they were made."""

    scores: np.ndarray
    included: np.ndarray
    mode: str
    trainer: dict[str, Any]
    design: str
    training_seconds: float


def _white_box_run(
    settings: DpsgdSettings,
    recipe: Recipe | None,
    data: Dataset,
    dp_settings: DPSettings | None,
    say: Callable[[str], None],
) -> _Run:
    """privgate's DP-SGD with Dirac gradient canaries, scored by the noisy gradient sum at their coordinate."""
    m = settings.canaries
    recipe = recipe or DPSGD_RECIPE
    dp = dp_settings or DPSettings(
        epochs=recipe.epochs,
        batch_size=recipe.batch_size,
        max_grad_norm=settings.clip,
        delta=settings.delta,
        accountant=settings.accountant,
    )  # type: ignore[arg-type]
    say(f"DP-SGD at ε = {settings.epsilon:g} with {m} gradient canaries")
    t1 = time.perf_counter()
    _, record, canaries = train_with_canaries(recipe, data.x, data.y, settings.seed, dp, settings.epsilon, m)
    training_seconds = time.perf_counter() - t1
    assert canaries.scores is not None
    trainer = {
        "kind": "privgate DP-SGD (Opacus)",
        "recipe": recipe.name,
        "dp_sgd": record.to_dict(),
        "canary_steps": canaries.sampled,
        "steps_observed": canaries.steps,
    }
    design = (
        f"Dirac gradient canaries C·e_j (C = {dp.max_grad_norm:g}) on {m} distinct random coordinates, "
        "scored by the noisy gradient sum at their coordinate minus the other records' clipped sum"
    )
    return _Run(canaries.scores.numpy(), canaries.included, "white_box", trainer, design, training_seconds)


def _black_box_run(
    settings: DpsgdSettings, data: Dataset, train: Trainer, train_name: str | None, say: Callable[[str], None]
) -> _Run:
    """The user's trainer, once, on the data with mislabelled canary rows; scored by −loss on the wrong label."""
    m = settings.canaries
    name = train_name or getattr(train, "__name__", "train")
    rows, wrong, included, clean = mislabelled_canaries(data, m, settings.seed)
    x = np.concatenate([data.x[clean], data.x[rows[included]]])
    y = np.concatenate([data.y[clean], wrong[included]])
    say(f"training {name} once on {len(clean)} rows + {int(included.sum())} included canaries")
    t1 = time.perf_counter()
    model = call_trainer(train, name, x, y, settings.epsilon, settings.delta, settings.seed)
    training_seconds = time.perf_counter() - t1
    scores = loss_scores(model, data.x[rows], wrong, name)
    trainer = {"kind": "user", "train": name, "rows_trained": int(len(y))}
    design = (
        f"{m} rows of the data with a wrong label, withheld from the other {len(clean)} rows, "
        "scored by −loss on the wrong label"
    )
    return _Run(scores, included, "black_box", trainer, design, training_seconds)


def audit_dpsgd(
    settings: DpsgdSettings,
    *,
    recipe: Recipe | None = None,
    data: Dataset | None = None,
    train: Trainer | None = None,
    train_name: str | None = None,
    dp_settings: DPSettings | None = None,
    threads: int | None = None,
    progress: Callable[[str], None] | None = None,
) -> DpsgdAuditReport:
    """Train once with m canaries and bound ε from the guesses.

    Args:
        settings: the claim and the audit's size.
        recipe: white-box: the model, optimiser, epochs and batch size for
            privgate's DP-SGD (default: the bundled digits MLP).
        data: the training data (default: digits).
        train: black-box: the user's ``train(x, y, epsilon, delta, seed)``.
        train_name: how the report names ``train`` (its ``module:function``).
        dp_settings: white-box: DP-SGD settings to audit exactly (remediation
            passes its own); default: the recipe's epochs and batch size with
            ``settings.clip``, ``settings.delta`` and ``settings.accountant``.
        threads: the most threads torch and BLAS may use (default 1).
        progress: one-line messages.
    """
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    t0 = time.perf_counter()
    say = progress or (lambda _msg: None)
    data = data or digits()
    with limit_threads(threads):
        if train is None:
            run = _white_box_run(settings, recipe, data, dp_settings, say)
        else:
            run = _black_box_run(settings, data, train, train_name, say)
    say("bounding ε")
    trainer, mode = run.trainer, run.mode
    return one_run_report(
        settings, run.scores, run.included, mode=mode, trainer=trainer,
        data={"source": data.source, "rows": len(data), "canary_design": run.design},
        target={"path": trainer.get("train") or trainer.get("recipe"), "format": f"DP-SGD trainer ({mode})"},
        training_seconds=run.training_seconds, threads=threads, started=started, t0=t0,
    )  # fmt: skip


def one_run_report(
    settings: DpsgdSettings,
    scores: np.ndarray,
    included: np.ndarray,
    *,
    mode: str,
    trainer: dict[str, Any],
    data: dict[str, Any],
    target: dict[str, Any],
    training_seconds: float,
    threads: int | None,
    started: str,
    t0: float,
) -> DpsgdAuditReport:
    """The report of one run's canary scores: the bound over the guess grid, the verdict, the claim as a check."""
    from privgate.options import RunOptions
    from privgate.report.provenance import environment

    m = len(scores)
    best, attempts = audit_bound(scores, included, settings.delta, settings.confidence)
    ceiling = max_provable_from_canaries(m, settings.delta, settings.confidence)
    verdict, summary = _decide(settings, best.epsilon_lb, ceiling)
    return DpsgdAuditReport(
        privgate_version=__version__,
        verdict=verdict,  # type: ignore[arg-type]
        summary=summary,
        claimed_epsilon=settings.epsilon,
        delta=settings.delta,
        confidence=settings.confidence,
        mode=mode,  # type: ignore[arg-type]
        canaries=m,
        included=int(np.sum(included)),
        guesses=best.guesses,
        correct=best.correct,
        epsilon_lb=best.epsilon_lb,
        max_provable_epsilon=ceiling,
        attempts=[GuessAttempt(guesses=a.guesses, correct=a.correct, epsilon_lb=a.epsilon_lb) for a in attempts],
        bound=_bound(settings, m),
        trainer=trainer,
        data=data,
        policy=_claim(settings),
        target=target,
        checks=[
            claim_check(
                "dpsgd-epsilon",
                mode,
                best.epsilon_lb,
                settings.epsilon,
                verdict,  # type: ignore[arg-type]
                summary,
                settings.confidence,
                (int(np.sum(included)), m - int(np.sum(included))),
            )
        ],
        training_seconds=round(training_seconds, 3),
        environment=environment(RunOptions(seed=settings.seed, threads=threads)),
        started=started,
        duration_s=round(time.perf_counter() - t0, 3),
    )


def _bound(settings: DpsgdSettings, m: int) -> dict[str, Any]:
    """The report's account of the bound: its name, how δ enters, the guess grid and its Bonferroni split."""
    grid = guess_counts(m)
    return {
        "name": BOUND_NAME,
        "delta_handling": "p-value P[Bin(r, q) ≥ v] + 2mδ·max_i P[v−i ≤ Bin(r, q) < v]/i at the claimed δ, q = "
        "e^ε/(1+e^ε); needs 2mδ ≤ 1",
        "guess_grid": [min(2 * k, m) for k in grid],
        "guess_fractions": list(GUESS_FRACTIONS),
        "bonferroni": len(grid),
        "attempt_confidence": 1.0 - (1.0 - settings.confidence) / len(grid),
    }


def _claim(settings: DpsgdSettings) -> dict[str, Any]:
    """The claim audited, as the report's policy."""
    return {
        "name": f"claimed ε = {settings.epsilon:g}, δ = {settings.delta:g}",
        "claim": "(ε, δ)-DP of one DP-SGD run",
        "epsilon": settings.epsilon,
        "delta": settings.delta,
        "confidence": settings.confidence,
    }


def audit_remediation(
    recipe: Recipe,
    train: Dataset,
    dp_settings: DPSettings,
    epsilon: float,
    canaries: int,
    confidence: float,
    seed: int,
    threads: int | None = None,
) -> dict[str, Any]:
    """The one-run audit of a hardened model's DP-SGD settings, as the remediation section records it.

    ``privgate harden`` with ``remediation.audit: true`` runs one more DP-SGD
    training with exactly the chosen run's settings (σ calibrated for the same
    ε, δ, q, steps, C and accountant) and gradient canaries; the hardened model
    itself carries none. At most one canary per trainable parameter.
    """
    private, _ = make_private_module(recipe.build(seed=seed), recipe.name)
    d = sum(p.numel() for p in private.parameters() if p.requires_grad)
    m = min(canaries, d)
    s = DpsgdSettings(
        epsilon=epsilon, delta=dp_settings.delta, canaries=m, confidence=confidence, seed=seed,
        clip=dp_settings.max_grad_norm, accountant=dp_settings.accountant,
    )  # fmt: skip
    rep = audit_dpsgd(s, recipe=recipe, data=train, dp_settings=dp_settings, threads=threads)
    outcome = {"pass": "no violation found", "fail": "the claim is refuted", "inconclusive": "inconclusive"}[
        rep.verdict
    ]
    return {
        "claimed_epsilon": epsilon,
        "delta": dp_settings.delta,
        "epsilon_lb": rep.epsilon_lb,
        "max_provable_epsilon": rep.max_provable_epsilon,
        "verdict": rep.verdict,
        "confidence": confidence,
        "canaries": m,
        "canaries_limited_by_parameters": m < canaries,
        "guesses": rep.guesses,
        "correct": rep.correct,
        "seconds": rep.duration_s,
        "method": f"one-run white-box audit, {m} gradient canaries ({BOUND_NAME}), in a separate DP-SGD run with "
        "the hardened model's settings",
        "summary": f"DP-SGD audit: claimed ε = {epsilon:g}, measured ε ≥ {rep.epsilon_lb:.3f} at {confidence * 100:g}% "
        f"({m} canaries; at most {rep.max_provable_epsilon:.2f} provable) — {outcome}",
    }


__all__ = ["BOUND_NAME", "DpsgdSettings", "audit_dpsgd", "one_run_report", "audit_remediation"]
