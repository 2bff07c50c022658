"""The gate: policy → attacks → metrics with intervals → decided checks → verdict.

This is privgate's façade (as ``PrivacyEngine`` is Opacus's): it wires the
registries together and holds the decision rules, nothing else.

Decision rules (documented for users in the README):

* A check is ``inconclusive`` when its metric is unresolvable on the data (see
  :mod:`privgate.stats`), when its attack could not run, or — under the default
  ``decision: upper_bound`` — when the point estimate is within the threshold but
  the upper confidence bound is not: the data cannot rule a violation out.
* ``upper_bound``: pass iff the upper bound ≤ max; fail iff the point estimate
  > max (the reason says "proven" when even the lower bound is over).
* ``point``: fail iff the point estimate > max.
* ``epsilon_lb`` is itself a 1 − α lower bound: fail iff it exceeds max (the
  attack *proves* ε > max), whatever the decision mode.
* ``attack: best`` evaluates every attack that ran at confidence 1 − α/m
  (Bonferroni over the m attacks) and is decided by the most leaking one, so
  taking a maximum does not inflate the false-alarm rate.
* Verdict: ``fail`` if any check fails, else ``inconclusive`` if any is, else ``pass``.
"""

from __future__ import annotations

import math
import platform
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from importlib import metadata
from typing import Any, Callable

import numpy as np

from privgate import stats
from privgate.artefacts import save_artefacts
from privgate.attacks import AttackContext, AttackResult, available_attacks, get_attack, threat_model_of
from privgate.attacks.base import AttackSkipped
from privgate.attacks.blind import soundness_warnings
from privgate.data import AuditData
from privgate.policy import Check, Decision, Metric, Policy
from privgate.recipe import Recipe
from privgate.report.model import AttackSummary, CheckResult, RatePoint, Report
from privgate.target import Target
from privgate.threads import limit_threads, resolve_threads

Progress = Callable[[str], None]

#: FPRs at which every attack summary reports TPR.
SUMMARY_FPRS = (0.001, 0.01)
DEFAULT_DELTA = 1e-5
ROC_POINTS = 200


@dataclass
class _Ran:
    result: AttackResult
    split: stats.SplitScores
    membership: np.ndarray | None = None  # for metrics measured on all audit examples (privgate.leakage)


#: Keys of ``AttackResult.extras`` that are not copied into the JSON report.
_PRIVATE_EXTRAS = ("estimates", "artefacts")


def _version(pkg: str) -> str | None:
    try:
        return metadata.version(pkg)
    except metadata.PackageNotFoundError:
        return None


def environment(seed: int, threads: int | None = None) -> dict[str, Any]:
    return {
        "seed": seed,
        "threads": resolve_threads(threads),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "versions": {p: _version(p) for p in ("privgate", "torch", "numpy", "scipy", "scikit-learn", "opacus", "pydantic")},
    }


def _downsample_roc(split: stats.SplitScores) -> dict[str, list[float]]:
    fpr, tpr, _ = stats.roc(split.eval_in, split.eval_out)
    if len(fpr) > ROC_POINTS:
        # keep the low-FPR end dense: sample on a log grid of FPR plus the ends
        grid = np.unique(np.r_[0.0, np.geomspace(1.0 / max(len(split.eval_out), 1), 1.0, ROC_POINTS - 2), 1.0])
        idx = np.unique(np.clip(np.searchsorted(fpr, grid, side="right") - 1, 0, len(fpr) - 1))
        fpr, tpr = fpr[idx], tpr[idx]
    return {"fpr": [float(v) for v in fpr], "tpr": [float(v) for v in tpr]}


def _measured(ran: _Ran, confidence: float) -> dict[str, Any]:
    """Non-score metrics an attack measures (privgate.leakage), for the report even without a check."""
    out: dict[str, Any] = {}
    for metric, provided in ran.result.extras.get("estimates", {}).items():
        if not isinstance(provided, stats.Estimate):
            if ran.membership is None:
                continue
            provided = provided.estimate(ran.membership, confidence)
        out[metric] = {"value": provided.value, "ci": [provided.lo, provided.hi], "confidence": provided.confidence,
                       "resolvable": provided.resolvable, "reason": provided.reason, "details": dict(provided.details)}
    return out


def _summarise(name: str, ran: _Ran, confidence: float) -> AttackSummary:
    sp = ran.split
    a = stats.auc(sp.eval_in, sp.eval_out, confidence)
    acc = stats.balanced_accuracy(sp, confidence)
    points = []
    for f in SUMMARY_FPRS:
        e = stats.tpr_at_fpr(sp, f, confidence)
        points.append(RatePoint(fpr=f, tpr=e.value if e.resolvable else None, ci=[e.lo, e.hi] if e.resolvable else [None, None], resolvable=e.resolvable, reason=e.reason))
    r = ran.result
    return AttackSummary(
        name=name,
        threat_model=r.threat_model,
        status="ran",
        options=r.options,
        auc=a.value,
        auc_ci=[a.lo, a.hi],
        accuracy=acc.value,
        accuracy_ci=[acc.lo, acc.hi],
        tpr_at_fpr=points,
        n_members=len(sp.eval_in),
        n_nonmembers=len(sp.eval_out),
        seconds=round(r.seconds, 4),
        models_trained=r.models_trained,
        roc=_downsample_roc(sp),
        notes=r.notes,
        extras={**{k: v for k, v in r.extras.items() if k not in _PRIVATE_EXTRAS}, **({"metrics": m} if (m := _measured(ran, confidence)) else {})},
    )


def estimate(check: Check, ran: _Ran, confidence: float, m: int = 1) -> stats.Estimate:
    """The check's metric for one attack's scores at the given confidence."""
    sp = ran.split
    metric = check.metric
    if metric is Metric.auc:
        return stats.auc(sp.eval_in, sp.eval_out, confidence)
    if metric is Metric.accuracy:
        return stats.balanced_accuracy(sp, confidence)
    if metric is Metric.advantage:
        return stats.advantage(sp, confidence)
    if metric is Metric.tpr_at_fpr:
        return stats.tpr_at_fpr(sp, float(check.fpr), confidence)
    if metric is Metric.epsilon_lb:
        delta = DEFAULT_DELTA if check.delta is None else check.delta
        return stats.epsilon_lower_bound(sp, delta, confidence, check_max=check.max)
    # metrics that are not membership scores (similarity, attribute_advantage): the attack
    # provides an Estimate, or a privgate.leakage.Measure that needs the hidden membership
    provided = ran.result.extras.get("estimates", {}).get(metric.value)
    if provided is not None:
        if isinstance(provided, stats.Estimate):
            return provided
        if ran.membership is None:
            return stats.Estimate.unresolved(metric.value, "the audit's membership was not recorded for this attack", confidence)
        return provided.estimate(ran.membership, confidence)
    return stats.Estimate.unresolved(metric.value, f"attack '{ran.result.attack}' does not produce the metric '{metric.value}'", confidence)


def _fmt(v: float) -> str:
    return "n/a" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.3g}"


def _pct(confidence: float) -> str:
    """99.5 % stays 99.5 %, not a rounded 100 %."""
    return f"{confidence * 100:.4g}%"


def decide(est: stats.Estimate, check: Check, decision: Decision) -> tuple[str, str]:
    """Status and a one-sentence reason for an estimate against ``check.max``."""
    mx = check.max
    name = est.metric
    if not est.resolvable:
        return "inconclusive", est.reason or "the data cannot resolve this check"
    ci = f"[{_fmt(est.lo)}, {_fmt(est.hi)}]"
    if check.metric is Metric.epsilon_lb:
        if est.value > mx:
            return "fail", f"the attack proves ε ≥ {est.value:.3g} at {_pct(est.confidence)} confidence, above the allowed {mx:g}"
        return "pass", f"the attack proves no more than ε ≥ {est.value:.3g} (δ={est.details.get('delta', DEFAULT_DELTA):g}), within {mx:g}"
    if decision is Decision.point:
        if est.value > mx:
            return "fail", f"{name} {_fmt(est.value)} {ci} exceeds {mx:g}"
        return "pass", f"{name} {_fmt(est.value)} {ci} is within {mx:g} (decided on the point estimate)"
    if est.hi <= mx:
        return "pass", f"{name} {_fmt(est.value)}, upper bound {_fmt(est.hi)} ≤ {mx:g} at {_pct(est.confidence)} confidence"
    if est.value > mx:
        proven = " (even the lower bound is over: a proven violation)" if est.lo > mx else ""
        return "fail", f"{name} {_fmt(est.value)} {ci} exceeds {mx:g}{proven}"
    return (
        "inconclusive",
        f"{name} {_fmt(est.value)} is within {mx:g} but its upper bound {_fmt(est.hi)} is not: "
        f"the audit data cannot rule out a violation (add audit data, or use decision: point)",
    )


def _severity(est: stats.Estimate, check: Check, decision: Decision) -> float:
    """Which candidate decides a 'best' check: the most leaking one on the deciding side."""
    if not est.resolvable:
        return -math.inf
    if check.metric is Metric.epsilon_lb or decision is Decision.point:
        return est.value
    return est.hi


def _decide_check(check: Check, ran: dict[str, _Ran], missing: dict[str, str], policy: Policy) -> CheckResult:
    base = {"id": check.id, "attack": check.attack, "metric": check.metric.value, "threshold": check.max, "fpr": check.fpr, "delta": check.delta}
    if check.attack == "best":
        names = sorted(n for n in ran if not getattr(available_attacks().get(n), "diagnostic", False))  # blind baseline: data only
        if check.metric in (Metric.similarity, Metric.attribute_advantage):  # only attacks that measure it compete
            names = [n for n in names if check.metric.value in ran[n].result.extras.get("estimates", {})]
        if not names:
            return CheckResult(**base, value=None, ci=[None, None], status="inconclusive", reason="no attack ran, so the strongest attack is unknown", confidence=policy.confidence)
    else:
        if check.attack not in ran:
            why = missing.get(check.attack, "it did not run")
            return CheckResult(**base, value=None, ci=[None, None], status="inconclusive", reason=f"attack '{check.attack}' did not run: {why}", confidence=policy.confidence)
        names = [check.attack]
    m = len(names)
    conf = stats.bonferroni(policy.confidence, m)
    estimates = {n: estimate(check, ran[n], conf, m) for n in names}
    decided = {n: decide(e, check, policy.decision) for n, e in estimates.items()}
    # fail if any candidate fails; else inconclusive if any is; else pass — decided by the most severe
    for status in ("fail", "inconclusive", "pass"):
        hits = [n for n in names if decided[n][0] == status]
        if hits:
            chosen = max(hits, key=lambda n: _severity(estimates[n], check, policy.decision))
            break
    est = estimates[chosen]
    status, reason = decided[chosen]
    if m > 1:
        reason = f"{chosen}: {reason} (best of {m} attacks, Bonferroni-adjusted to {conf:.2%})"
    return CheckResult(
        **base,
        value=est.value,
        ci=[est.lo, est.hi],
        status=status,
        reason=reason,
        confidence=conf,
        n_members=est.n_members,
        n_nonmembers=est.n_nonmembers,
        chosen_attack=chosen if check.attack == "best" else None,
        details=dict(est.details),
    )


def verdict_of(checks: list[CheckResult]) -> str:
    statuses = {c.status for c in checks}
    return "fail" if "fail" in statuses else "inconclusive" if "inconclusive" in statuses else "pass"


def _summary_line(verdict: str, checks: list[CheckResult]) -> str:
    if not checks:
        return "PASS: the policy requires no checks."
    counts = {s: sum(c.status == s for c in checks) for s in ("pass", "fail", "inconclusive")}
    parts = [f"{counts[s]} {s}" for s in ("fail", "inconclusive", "pass") if counts[s]]
    first = next((c for c in checks if c.status == verdict), None) if verdict != "pass" else None
    tail = f"; first: {first.id} — {first.reason}" if first else ""
    return f"{verdict.upper()}: {len(checks)} checks ({', '.join(parts)}){tail}"


def run_attacks(
    target: Target,
    data: AuditData,
    policy: Policy,
    *,
    recipe: Recipe | None = None,
    seed: int = 0,
    cache_dir: str | None = None,
    progress: Progress | None = None,
    threads: int | None = None,
) -> tuple[dict[str, _Ran], dict[str, str], list[AttackSummary]]:
    """Run the policy's attacks on the audit data; returns (ran, missing reasons, summaries).

    ``threads``: the most threads any attack may use (torch, BLAS, OpenMP), see :mod:`privgate.threads`.
    """
    x, y, membership = data.pooled()
    perm = np.random.default_rng(np.random.SeedSequence([seed, 0xA11])).permutation(len(y))
    x, y, membership = x[perm], y[perm], membership[perm]  # attacks never see membership, nor its order
    calibration = stats.calibration_mask(membership, seed)
    reference = calibration & ~membership
    ctx = AttackContext(target=target, x=x, y=y, population=data.population, recipe=recipe, seed=seed, cache_dir=cache_dir, threads=threads)
    ran: dict[str, _Ran] = {}
    missing: dict[str, str] = {}
    summaries: list[AttackSummary] = []
    todo = policy.attacks_to_run()
    registry = available_attacks()
    for i, (name, options) in enumerate(todo.items(), 1):
        threat = threat_model_of(name)
        why = None
        if name not in registry:
            why = f"'{name}' is not implemented in this version of privgate"
        elif threat == "white-box" and not target.white_box:
            why = f"'{name}' needs the model's weights (white-box), but the target is {target.fmt} without a torch module"
        elif registry[name].needs_recipe and recipe is None:
            why = f"'{name}' trains reference models and needs a recipe (--recipe module:attr)"
        if why:
            missing[name] = why
            summaries.append(AttackSummary(name=name, threat_model=threat, status="unavailable" if name not in registry else "skipped", reason=why, options=options))
            continue
        if progress:
            progress(f"running attack {name} ({i}/{len(todo)})")
        attack = get_attack(name)(**options)
        ctx.options = dict(options)
        try:
            with limit_threads(threads):
                result = attack.run(ctx)
        except AttackSkipped as exc:
            missing[name] = str(exc)
            summaries.append(AttackSummary(name=name, threat_model=threat, status="skipped", reason=str(exc), options=options))
            continue
        scores = np.asarray(result.scores, dtype=float)
        if scores.shape != (len(y),) or not np.all(np.isfinite(scores)):
            raise RuntimeError(f"attack '{name}' returned scores of shape {scores.shape} with non-finite values: a bug in the attack")
        if result.groups is not None:
            scores = stats.classwise_normalise(scores, result.groups, reference)
        ran[name] = _Ran(result, stats.SplitScores.from_mask(scores, membership, calibration), membership)
        summaries.append(_summarise(name, ran[name], policy.confidence))
    return ran, missing, summaries


def audit(
    target: Target,
    data: AuditData,
    policy: Policy,
    *,
    recipe: Recipe | None = None,
    seed: int = 0,
    cache_dir: str | None = None,
    progress: Progress | None = None,
    artefacts_dir: str | None = None,
    threads: int | None = None,
) -> Report:
    """Run ``policy`` against ``target`` on ``data`` and return the decided :class:`Report`.

    ``artefacts_dir``: where attacks' files (inversion reconstructions) are saved,
    see :mod:`privgate.artefacts`; ``None`` saves nothing. ``threads``: the most
    threads the attacks may use (default 1), see :mod:`privgate.threads`.
    """
    started = datetime.now(timezone.utc)
    t0 = time.perf_counter()
    data.check_against(target)
    ran, missing, summaries = run_attacks(target, data, policy, recipe=recipe, seed=seed, cache_dir=cache_dir, progress=progress, threads=threads)
    for summary in summaries:
        files = ran[summary.name].result.extras.get("artefacts") if summary.name in ran else None
        if files:
            summary.extras["artefacts"] = save_artefacts(summary.name, files, artefacts_dir) if artefacts_dir else []
    checks = [_decide_check(c, ran, missing, policy) for c in policy.checks]
    verdict = verdict_of(checks)
    from privgate import __version__

    return Report(
        privgate_version=__version__,
        verdict=verdict,
        summary=_summary_line(verdict, checks),
        policy={"name": policy.name, "sensitivity": policy.sensitivity.value, "release": policy.release.value, "confidence": policy.confidence, "decision": policy.decision.value, "source": policy.source},
        target=target.describe(),
        data=data.describe(),
        checks=checks,
        attacks=summaries,
        warnings=list(data.warnings) + soundness_warnings(summaries),  # blind baseline (Das et al. 2024)
        environment=environment(seed, threads),
        started=started.isoformat(timespec="seconds"),
        duration_s=round(time.perf_counter() - t0, 3),
    )
