"""One-run audit of a DP fine-tune of a language model: text canaries, half of them trained on.

Steinke, Nasr & Jagielski 2023 (arXiv 2305.08846), black-box with input canaries: m seeded text canaries, each
trained on with probability ½ in **one** DP fine-tune with the hardened model's settings, are scored by how much
the fine-tune raised their log-likelihood over the public base; the right guesses give an ε lower bound
(:mod:`privgate.audits.one_run_bound`). A bound above the claimed ε refutes it and ``privgate harden`` hands out
no model. m ≤ ⌊1/(2δ)⌋ (the bound needs 2mδ ≤ 1); the hardened model carries no canary. Details:
``docs/remediation.md``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from privgate.audits.one_run_bound import audit_bound, max_provable_from_canaries
from privgate.dpsgd.records import DPSettings
from privgate.inputs.lm_recipe import LMRecipe
from privgate.lm.finetune import DPFineTune, finetune
from privgate.options import RunOptions
from privgate.threads import limit_threads

BOUND_NAME = "Steinke, Nasr & Jagielski 2023 (arXiv 2305.08846), (ε, δ) bound with its 2mδ term"
ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789"


def text_canaries(m: int, seed: int, length: int = 10) -> tuple[list[str], np.ndarray]:
    """``m`` canary records with random secrets, and which are included (each with probability 1/2)."""
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), 0xA0D17]))
    letters = np.array(list(ALPHABET))
    texts = [f"Audit record {i}: the access code is {''.join(rng.choice(letters, length))}." for i in range(m)]
    return texts, rng.random(m) < 0.5


def _mean_logprob(model: Any, tokenizer: Any, texts: list[str], context: int) -> np.ndarray:
    from privgate.lm.scoring import score_texts

    return score_texts(model, tokenizer, texts, context=context, moments=False).mean_logprob


def canary_bound(
    model: Any,
    base: tuple[Any, Any],
    tokenizer: Any,
    texts: list[str],
    included: np.ndarray,
    delta: float,
    confidence: float,
    context: int,
) -> tuple[float, Any]:
    """(ε lower bound, the best guess attempt) from the canaries' log-likelihood gain of ``model`` over the base."""
    scores = _mean_logprob(model, tokenizer, texts, context) - _mean_logprob(base[0], base[1], texts, context)
    best, _ = audit_bound(scores, included, delta, confidence)
    return float(best.epsilon_lb), best


def _canary_finetune(
    recipe: LMRecipe,
    members: Sequence[str],
    texts: list[str],
    included: np.ndarray,
    settings: DPSettings,
    epsilon: float,
    run: RunOptions,
    base: tuple[Any, Any],
    users: Sequence[str] | None = None,
) -> tuple[Any, Any, Any, float]:
    """One DP fine-tune on the members and the included canaries, σ calibrated for ε at the enlarged set's q.

    With ``users`` (user-level DP) every canary is a user of its own, so q is over the users.
    """
    from privgate.dpsgd.accounting import calibrate, sampling

    train = list(members) + [t for t, i in zip(texts, included) if i]
    every = None if users is None else list(users) + [f"\0canary{k}" for k, i in enumerate(included) if i]
    q, _ = sampling(len(train) if every is None else len(set(every)), settings.batch_size, settings.epochs)
    sigma, _ = calibrate(float(epsilon), settings.delta, q, settings.epochs, settings.accountant)
    model, tok, stats = finetune(
        recipe, train, seed=run.seed + 0xA0D, device=run.device, dp=DPFineTune(settings, sigma, epsilon), base=base,
        users=every,
    )  # fmt: skip
    return model, tok, stats, sigma


def audit_lm_recipe(recipe: LMRecipe, texts_file: str, claim: Any, run: RunOptions, *, text_field: str = "text") -> Any:
    """``privgate audit dpsgd --recipe lm_recipe.yaml --data text.jsonl``: is the recipe's DP fine-tune (ε, δ)-DP?

    The recipe's DP fine-tune (its epochs and batch size, clip ``claim.clip``,
    δ ``claim.delta``, σ calibrated for ``claim.epsilon``) runs once on the
    text and the included canaries (module docstring); the report is the
    tabular audit's (:class:`~privgate.audits.report.DpsgdAuditReport`, black
    box: input canaries scored from the model's outputs).
    """
    from datetime import datetime, timezone

    from privgate.audits.dpsgd import DpsgdSettings, one_run_report
    from privgate.errors import PrivgateError
    from privgate.inputs.text import load_texts
    from privgate.lm.finetune import load_base

    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    t0 = time.perf_counter()
    most = int(math.floor(1 / (2 * claim.delta)))
    if most < 2:
        raise PrivgateError(f"--delta: {claim.delta:g} leaves no room for canaries (the bound needs 2·m·δ ≤ 1).")
    requested, m = claim.canaries, min(claim.canaries, most)
    claim = DpsgdSettings(
        epsilon=claim.epsilon, delta=claim.delta, canaries=m, confidence=claim.confidence, seed=claim.seed,
        clip=claim.clip, accountant=claim.accountant,
    )  # fmt: skip
    data = load_texts(texts_file, "training text", text_field=text_field)
    settings = DPSettings(
        epochs=recipe.epochs, batch_size=recipe.batch_size, max_grad_norm=claim.clip, delta=claim.delta,
        accountant=claim.accountant, max_physical_batch_size=recipe.max_physical_batch_size,
    )  # type: ignore[arg-type]  # fmt: skip
    texts, included = text_canaries(m, claim.seed)
    run.say(f"DP fine-tuning at ε = {claim.epsilon:g} with {m} text canaries")
    with limit_threads(run.threads):
        base = load_base(recipe)
        t1 = time.perf_counter()
        model, tok, stats, _ = _canary_finetune(
            recipe, data.texts, texts, included, settings, claim.epsilon, run.replace(seed=claim.seed), base
        )
        seconds = time.perf_counter() - t1
        gain = _mean_logprob(model, tok, texts, recipe.max_length) - _mean_logprob(
            base[0], base[1], texts, recipe.max_length
        )
    trainer = {
        "kind": "privgate DP fine-tuning of a language model (Opacus)",
        "recipe": recipe.source,
        "base": str(recipe.base),
        "mode": recipe.mode,
        "dp_sgd": None if stats.dp is None else stats.dp.to_dict(),
        "canaries_requested": requested,
    }
    design = (
        f"{m} text canaries ('Audit record i: the access code is <random secret>.'), each added to the "
        f"{len(data)} records with probability 1/2, scored by the fine-tune's gain in mean log-likelihood over the "
        "public base model"
    )
    return one_run_report(
        claim, gain, included, mode="black_box", trainer=trainer,
        data={"source": data.source, "rows": len(data), "canary_design": design},
        target={"path": recipe.source, "format": "DP fine-tuning recipe (language model)"},
        training_seconds=seconds, threads=run.threads, started=started, t0=t0,
    )  # fmt: skip


def audit_lm_finetune(
    recipe: LMRecipe,
    members: Sequence[str],
    settings: DPSettings,
    epsilon: float,
    noise_multiplier: float,
    canaries: int,
    confidence: float,
    run: RunOptions,
    base: tuple[Any, Any],
    users: Sequence[str] | None = None,
) -> dict[str, Any]:
    """The one-run audit of the chosen DP fine-tune's settings, as the remediation section records it.

    ``noise_multiplier`` is the chosen run's σ (recorded); the audit run
    calibrates its own σ for ``epsilon`` at the enlarged set's sampling rate.
    """
    t0 = time.perf_counter()
    delta = settings.delta
    m = max(2, min(int(canaries), int(math.floor(1 / (2 * delta)))))
    texts, included = text_canaries(m, run.seed)
    with limit_threads(run.threads):
        model, tok, stats, sigma = _canary_finetune(
            recipe, members, texts, included, settings, epsilon, run, base, users
        )
        lb, best_guess = canary_bound(model, base, tok, texts, included, delta, confidence, recipe.max_length)
    ceiling = max_provable_from_canaries(m, delta, confidence)
    if lb > epsilon:
        verdict, outcome = "fail", "the claim is refuted"
    elif ceiling <= epsilon:
        verdict, outcome = "inconclusive", "inconclusive"
    else:
        verdict, outcome = "pass", "no violation found"
    return {
        "claimed_epsilon": float(epsilon),
        "delta": delta,
        "epsilon_lb": lb,
        "max_provable_epsilon": float(ceiling),
        "verdict": verdict,
        "confidence": confidence,
        "canaries": m,
        "canaries_included": int(included.sum()),
        "canaries_limited_by_delta": m < canaries,
        "guesses": best_guess.guesses,
        "correct": best_guess.correct,
        "audit_noise_multiplier": round(sigma, 6),
        "chosen_noise_multiplier": round(noise_multiplier, 6),
        "audit_training_epsilon": None if stats.dp is None else round(stats.dp.epsilon, 6),
        "seconds": round(time.perf_counter() - t0, 3),
        "method": f"one-run black-box audit, {m} text canaries ({BOUND_NAME}), scored by the fine-tune's gain in "
        "log-likelihood over the public base, in a separate DP fine-tune with the hardened model's settings",
        "summary": f"DP fine-tuning audit: claimed ε = {epsilon:g}, measured ε ≥ {lb:.3f} at {confidence * 100:g}% "
        f"({m} text canaries; at most {ceiling:.2f} provable) — {outcome}",
    }


__all__ = ["BOUND_NAME", "audit_lm_finetune", "audit_lm_recipe", "canary_bound", "text_canaries"]
