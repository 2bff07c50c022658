"""The gate for causal language models: policy → language-model attacks → the same statistics and decisions.

As :func:`privgate.gate.check_model` does for classifiers: the members and
non-members are pooled and shuffled (seeded), split into calibration and
evaluation halves, every attack scores every record without seeing
membership, and :mod:`privgate.decision` decides the policy's checks on the
evaluation split with the policy's error budget. What differs:

* the target's per-token log-probabilities of every record are computed once
  (:mod:`privgate.lm.scoring`) and shared by all attacks (the reference
  model's too, with ``--reference-model``);
* the policy's attacks are translated to the language-model family
  (:mod:`privgate.lm.family`);
* measurements (``canary_exposure``, ``extraction``) run with what they need
  and give their metric directly;
* the **distribution-shift guard** (Duan et al. 2024, "Do Membership Inference
  Attacks Work on Large Language Models?", MIMIR, arXiv 2402.07841): a blind
  n-gram classifier that never queries the model is cross-fitted to tell
  members from non-members (:func:`privgate.lm.shift.distribution_shift`).
  When its AUC interval excludes 0.5 the audit data is biased — the attacks
  may be measuring the shift, not memorisation — and no membership check can
  pass on it: a passing one becomes inconclusive.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import numpy as np

from privgate import stats
from privgate.attacks import available_attacks, get_attack, threat_model_of
from privgate.attacks.base import AttackSkipped
from privgate.decision import decide_policy, verdict_of
from privgate.device import placed
from privgate.errors import DataError
from privgate.gate import Ran, final_scores, summarise
from privgate.lm.attacks.context import LMContext
from privgate.lm.attacks.measures import MeasureInputs, Measurement
from privgate.lm.family import lm_policy, skipped_attacks
from privgate.lm.loading import LoadedLM
from privgate.lm.references import ReferenceFactory
from privgate.lm.score_cache import cached_score_texts, open_cache
from privgate.lm.scoring import BATCH, score_texts
from privgate.lm.text import TextAudit
from privgate.options import RunOptions
from privgate.policy import Policy
from privgate.policy.schema import MEASURED_BY
from privgate.report.model import AttackSummary, CheckResult, Report
from privgate.report.provenance import environment, policy_facts, summary_line
from privgate.training.threads import limit_threads

#: Characters of a record shown in the report's exposed section.
SHOWN_CHARS = 200
SHIFT = "distribution_shift"


@dataclass(frozen=True)
class Pooled:
    """The pooled records in the order the attacks see them (as :func:`privgate.gate.audit_rows` for tables)."""

    texts: list[str]
    membership: np.ndarray
    calibration: np.ndarray
    member_rows: np.ndarray
    clipped: np.ndarray  # records cut to their character limit when read (privgate.lm.text)


def pool(data: TextAudit, seed: int) -> Pooled:
    n1, n0 = len(data.members), len(data.nonmembers)
    texts = data.members.texts + data.nonmembers.texts
    membership = np.r_[np.ones(n1, bool), np.zeros(n0, bool)]
    rows = np.r_[np.arange(n1), np.full(n0, -1)]
    clipped = np.zeros(n1 + n0, dtype=bool)
    clipped[list(data.members.clipped) + [n1 + i for i in data.nonmembers.clipped]] = True
    perm = np.random.default_rng(np.random.SeedSequence([seed, 0xA11])).permutation(n1 + n0)
    membership, rows = membership[perm], rows[perm]
    return Pooled([texts[i] for i in perm], membership, stats.calibration_mask(membership, seed), rows, clipped[perm])


def measurement_confidence(policy: Policy, name: str) -> float:
    """The confidence a measurement's interval needs: that of the most demanding check on it.

    A check of level L is decided at 1 − α_L / k_L (its policy's own error budget shared by its k_L checks,
    :mod:`privgate.decision`); a measurement has one candidate, so that is its interval's confidence. Without a
    check it is measured at the policy's confidence, for the report.
    """
    levels = [1.0 - p.own_alpha / max(1, len(p.checks)) for p in policy.chain() for c in p.checks if c.attack == name]
    return max(levels, default=policy.confidence)


def shorten(text: str) -> str:
    """``text`` cut to :data:`SHOWN_CHARS` characters (the report shows records, not whole documents)."""
    return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 1] + "…"


def _shift_guard(data: TextAudit, run: RunOptions, confidence: float) -> tuple[AttackSummary, str | None]:
    """The distribution-shift guard's summary, and the warning when the data are biased (module docstring)."""
    t0 = time.perf_counter()
    try:
        from privgate.lm.shift import distribution_shift
    except ImportError:
        summary = AttackSummary(
            name=SHIFT,
            threat_model="black-box",
            status="unavailable",
            reason="the distribution-shift guard is not available in this version of privgate",
        )
        return summary, None
    rep = distribution_shift(data.members.texts, data.nonmembers.texts, seed=run.seed, confidence=confidence)
    summary = AttackSummary(
        name=SHIFT,
        threat_model="black-box",
        status="ran" if rep.resolvable else "skipped",
        reason=rep.reason,
        auc=rep.auc,
        auc_ci=[rep.lo, rep.hi],
        n_members=rep.evaluation_members,
        n_nonmembers=rep.evaluation_nonmembers,
        seconds=round(time.perf_counter() - t0, 4),
        notes=["a blind n-gram classifier that never queries the model (Duan et al. 2024, arXiv 2402.07841)"],
        extras={
            "biased": rep.biased,
            "member_ngrams": rep.member_ngrams,
            "nonmember_ngrams": rep.nonmember_ngrams,
            "confidence": rep.confidence,
        },
    )
    warning = (
        f"audit data biased: a blind n-gram classifier that never queries the model tells members from non-members "
        f"(AUC {rep.auc:.3f} [{rep.lo:.3f}, {rep.hi:.3f}]), so the attacks may measure that difference rather than "
        "what the model memorised (Duan et al. 2024); no membership check can pass on these data — draw members "
        "and non-members from one distribution, e.g. by a random split"
        if rep.biased
        else None
    )
    return summary, warning


def _guarded(checks: list[CheckResult], warning: str | None) -> list[CheckResult]:
    """Passing membership checks become inconclusive when the shift guard found the data biased."""
    if warning is None:
        return checks
    out = []
    for c in checks:
        if c.status == "pass" and c.metric not in MEASURED_BY:
            c = c.model_copy(
                update={
                    "status": "inconclusive",
                    "reason": f"{c.reason}; but the audit data are biased (the distribution-shift guard separates "
                    "members from non-members), so it cannot pass on them",
                }
            )
        out.append(c)
    return out


def audit_lm(
    lm: LoadedLM,
    data: TextAudit,
    policy: Policy,
    *,
    reference: LoadedLM | None = None,
    canaries: str | None = None,
    options: RunOptions | None = None,
    batch_size: int = BATCH,
    recipe: Any = None,
    max_canaries: int | None = None,
) -> Report:
    """Audit a causal language model against ``policy`` on records of text (module docstring).

    ``recipe`` (a :class:`privgate.lm.recipe.LMRecipe`) and ``data.population`` give LiRA and RMIA the
    reference models privgate fine-tunes (:mod:`privgate.lm.references`). The model and the reference
    model run on the run's device and are put back where they were afterwards (:func:`privgate.device.placed`).
    ``max_canaries``: the most canaries the ``canaries`` file may hold (default
    :data:`privgate.lm.canaries.MAX_CANARIES`).
    """
    run = (options or RunOptions()).resolved()
    with contextlib.ExitStack() as stack:
        stack.enter_context(placed(lm.model, run.device))
        if reference is not None:
            stack.enter_context(placed(reference.model, run.device))
        return _audit(lm, data, policy, reference, canaries, run, batch_size, recipe, max_canaries)


def _audit(
    lm: LoadedLM,
    data: TextAudit,
    policy: Policy,
    reference: LoadedLM | None,
    canaries: str | None,
    run: RunOptions,
    batch_size: int,
    recipe: Any,
    max_canaries: int | None = None,
) -> Report:
    """:func:`audit_lm` with the models on the run's device."""
    started = datetime.now(timezone.utc)
    t0 = time.perf_counter()
    device = run.device
    pooled = pool(data, run.seed)
    translated = lm_policy(policy, recipe is not None)
    with limit_threads(run.threads):
        run.say(f"scoring {len(pooled.texts)} records")
        scores = score_texts(lm.model, lm.tokenizer, pooled.texts, context=lm.context, batch_size=batch_size)
        ref_scores, cache = None, open_cache(run.cache, run.cache_key)
        if reference is not None:
            run.say("scoring the records with the reference model")
            ref_scores, ref_cached = cached_score_texts(
                reference.model,
                lm.tokenizer,
                pooled.texts,
                digest=reference.sha256,
                context=lm.context,
                cache=cache,
                device=device,
                batch_size=batch_size,
                moments=False,  # the attacks read the reference's log-probabilities only
            )
    short = np.flatnonzero(scores.n_tokens == 0)
    if len(short):
        i = int(short[0])
        raise DataError(f"a record has a single token, so the model predicts none of it: {shorten(pooled.texts[i])!r}.")
    ctx = LMContext(
        target=None,  # type: ignore[arg-type]  # language-model attacks read scores, never a Target
        x=np.asarray(pooled.texts, dtype=object),
        y=np.zeros(len(pooled.texts), dtype=np.int64),
        run=run,
        texts=pooled.texts,
        scores=scores,
        reference=ref_scores,
        lm=lm,
        fine_tuned=ReferenceFactory(
            recipe,
            data.population.texts if data.population is not None else None,
            lm,
            pooled.texts,
            seed=run.seed,
            device=device,
            cache_dir=run.cache,
            cache_key=run.cache_key,
            batch_size=batch_size,
            progress=run.progress,
        ),
    )
    measure_inputs = MeasureInputs(
        lm, data.members.texts, data.nonmembers.texts, canaries, device, run.seed, policy.confidence, batch_size
    )
    if max_canaries is not None:
        measure_inputs = dataclasses.replace(measure_inputs, max_canaries=max_canaries)
    ran: dict[str, Ran] = {}
    missing = skipped_attacks(policy, recipe is not None)
    summaries = [
        AttackSummary(name=n, threat_model=threat_model_of(n), status="skipped", reason=why)
        for n, why in missing.items()
    ]
    registry = available_attacks()
    todo = translated.attacks_to_run()
    if canaries is not None and "canary_exposure" not in todo:  # measured and reported; decided only if a check asks
        todo["canary_exposure"] = {}
    for i, (name, opts) in enumerate(todo.items(), 1):
        run.say(f"running attack {name} ({i}/{len(todo)})")
        attack = get_attack(name)(**opts)
        ctx.options = dict(opts)
        try:
            with limit_threads(run.threads):
                if isinstance(attack, Measurement):
                    conf = measurement_confidence(translated, name)
                    result = attack.measure(dataclasses.replace(measure_inputs, confidence=conf))
                    ran[name] = Ran(result, None, pooled.membership, None)  # type: ignore[arg-type]
                    summaries.append(_measured_summary(name, result, policy.confidence))
                    continue
                result = attack.run(ctx)
                t1 = time.perf_counter()
                final = final_scores(result, pooled.calibration, pooled.membership)
                result.seconds += time.perf_counter() - t1
        except AttackSkipped as exc:
            missing[name] = str(exc)
            summaries.append(
                AttackSummary(
                    name=name, threat_model=threat_model_of(name), status="skipped", reason=str(exc), options=opts
                )
            )
            continue
        split = stats.SplitScores.from_mask(final, pooled.membership, pooled.calibration)
        ran[name] = Ran(result, split, pooled.membership, final)
        summaries.append(summarise(name, ran[name], policy.confidence))
    shift_summary, shift_warning = _shift_guard(data, run, policy.confidence)
    summaries.append(shift_summary)
    diagnostic = {n for n, cls in registry.items() if cls.diagnostic}
    for name in {c.attack for p in translated.chain() for c in p.checks} - set(ran) - set(missing) - {"best"}:
        missing[name] = f"'{name}' attacks classifier outputs; on a causal language model use the language-model family"
    checks = _guarded(decide_policy(translated, ran, missing, diagnostic), shift_warning)
    verdict = verdict_of(checks)
    from privgate import __version__

    target = {
        "path": lm.source,
        "format": "huggingface",
        "kind": lm.kind,
        "sha256": lm.sha256,
        "white_box": True,
        "parameters": sum(p.numel() for p in lm.model.parameters()),
        "context": lm.context,
        **lm.extra,
        **({"reference_model": reference.source, "reference_sha256": reference.sha256} if reference else {}),
        **({"reference_scores_from_cache": ref_cached} if reference else {}),
        **({"recipe": recipe.describe()} if recipe is not None else {}),
    }
    described = data.describe()
    truncated = int(np.sum(scores.cut | pooled.clipped))  # cut when read, or longer than the context in tokens
    described["truncated"] = truncated
    described["tokens"] = scores.tokens
    warnings = [w for w in (shift_warning,) if w] + list(
        dict.fromkeys(
            [*(cache.warnings if cache is not None else [])]
            + [w for r in ran.values() for w in r.result.extras.get("cache_warnings", [])]
        )
    )
    if truncated:
        warnings.append(
            f"{truncated} of {len(pooled.texts)} records are longer than the model's context of "
            f"{lm.context} tokens and were truncated to it"
        )
    return Report(
        privgate_version=__version__,
        verdict=verdict,
        summary=summary_line(verdict, checks),
        policy=policy_facts(policy),
        target=target,
        data=described,
        checks=checks,
        attacks=summaries,
        warnings=warnings,
        exposed=_exposed(ran, summaries, pooled, diagnostic, run.exposed),
        environment=environment(run),
        started=started.isoformat(timespec="seconds"),
        duration_s=round(time.perf_counter() - t0, 3),
    )


def _measured_summary(name: str, result: Any, confidence: float) -> AttackSummary:
    metrics = {}
    for metric, est in result.extras.get("estimates", {}).items():
        metrics[metric] = {
            "value": est.value,
            "ci": [est.lo, est.hi],
            "confidence": est.confidence,
            "resolvable": est.resolvable,
            "reason": est.reason,
            "details": dict(est.details),
        }
    extras = {k: v for k, v in result.extras.items() if k != "estimates"}
    return AttackSummary(
        name=name,
        threat_model=result.threat_model,
        status="ran",
        options=result.options,
        seconds=round(result.seconds, 4),
        notes=result.notes,
        extras={**extras, "metrics": metrics},
    )


def _exposed(
    ran: dict[str, Ran], summaries: list[AttackSummary], pooled: Pooled, diagnostic: set[str], n: int
) -> dict[str, Any] | None:
    """The report's ``exposed`` section (:mod:`privgate.stats.exposed_members`), each record shown as text,
    truncated."""
    from privgate.stats.exposed_members import ScoredAttack, exposed_members

    by_name = {a.name: a for a in summaries}
    attacks = {
        name: ScoredAttack(r.scores, by_name[name].auc, {p.fpr: p.tpr for p in by_name[name].tpr_at_fpr})
        for name, r in ran.items()
        if name not in diagnostic and r.scores is not None
    }
    labels = np.zeros(len(pooled.texts), dtype=np.int64)
    section = exposed_members(attacks, pooled.membership, pooled.calibration, pooled.member_rows, labels, n)
    if section is None:
        return None
    where = {int(m): i for i, m in enumerate(pooled.member_rows) if m >= 0}
    for rec in section["records"]:
        rec["text"] = shorten(pooled.texts[where[rec["member_index"]]])
    return section


__all__ = ["Pooled", "audit_lm", "pool"]
