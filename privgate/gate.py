"""The gate: policy → attacks → metrics with intervals → decided checks → verdict, for every kind of target.

privgate's façade (as ``PrivacyEngine`` is Opacus's): it wires the registries together, nothing else. The
target's kind (:mod:`privgate.attacks.contexts`) pools members and non-members, builds what the attacks
share and adds its diagnostics; one loop runs each attack, splits its scores into calibration and
evaluation halves and decides the checks on the evaluation split (an attack that ``measures`` a metric
gives its estimate directly). The decision rules live in :mod:`privgate.decision`; the loop in detail is
in docs/internals-core.md.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import numpy as np

from privgate import stats
from privgate.attacks import AttackResult, available_attacks, get_attack, threat_model_of
from privgate.attacks.base import AttackSkipped
from privgate.attacks.budget import Budget
from privgate.attacks.contexts import audit_kind
from privgate.attacks.contexts.base import AuditKind
from privgate.attacks.contexts.tabular import AuditRows, audit_rows
from privgate.attacks.crossfit import CalibrationLabels
from privgate.decision import decide_policy, verdict_of
from privgate.io.artefacts import save_artefacts
from privgate.options import RunOptions
from privgate.policy import Policy
from privgate.policy.schema import MEASURED_BY
from privgate.recipe import Recipe
from privgate.report.model import AttackSummary, CheckResult, RatePoint, Report
from privgate.report.provenance import environment, policy_facts, summary_line
from privgate.threads import limit_threads
from privgate.workload import decided

#: FPRs at which every attack summary reports TPR.
SUMMARY_FPRS = (0.001, 0.01)
ROC_POINTS = 200


@dataclass
class Ran:
    result: AttackResult
    split: stats.SplitScores | None
    membership: np.ndarray | None = None  # for metrics measured on all audit examples (privgate.stats.leakage)
    scores: np.ndarray | None = None  # the final scores of every pooled row (exposed records)


def final_scores(result: AttackResult, calibration: np.ndarray, membership: np.ndarray) -> np.ndarray:
    """An attack's scores as the gate measures them.

    A learning attack's ``fitted`` scorer gets the calibration split's
    membership only (:class:`~privgate.attacks.crossfit.CalibrationLabels`);
    class-dependent scores are standardised per class by the calibration
    non-members (:func:`privgate.stats.classwise_normalise`). Nothing here reads
    the evaluation split's membership.
    """
    if result.fitted is not None:
        return np.asarray(result.fitted(CalibrationLabels.of(calibration, membership)), dtype=float)
    scores = np.asarray(result.scores, dtype=float)
    if result.groups is not None:
        scores = stats.classwise_normalise(scores, result.groups, calibration & ~membership)
    return scores


#: Keys of ``AttackResult.extras`` that are not copied into the JSON report.
_PRIVATE_EXTRAS = ("estimates", "artefacts", "cache_warnings")  # cache_warnings: lifted into Report.warnings


def _downsample_roc(split: stats.SplitScores) -> dict[str, list[float]]:
    fpr, tpr, _ = stats.roc(split.eval_in, split.eval_out)
    if len(fpr) > ROC_POINTS:
        # keep the low-FPR end dense: sample on a log grid of FPR plus the ends
        grid = np.unique(np.r_[0.0, np.geomspace(1.0 / max(len(split.eval_out), 1), 1.0, ROC_POINTS - 2), 1.0])
        idx = np.unique(np.clip(np.searchsorted(fpr, grid, side="right") - 1, 0, len(fpr) - 1))
        fpr, tpr = fpr[idx], tpr[idx]
    return {"fpr": [float(v) for v in fpr], "tpr": [float(v) for v in tpr]}


def _measured(ran: Ran, confidence: float) -> dict[str, Any]:
    """Non-score metrics an attack measures (privgate.stats.leakage), for the report even without a check."""
    out: dict[str, Any] = {}
    for metric, provided in ran.result.extras.get("estimates", {}).items():
        if not isinstance(provided, stats.Estimate):
            if ran.membership is None:
                continue
            provided = provided.estimate(ran.membership, confidence)
        out[metric] = {
            "value": provided.value,
            "ci": [provided.lo, provided.hi],
            "confidence": provided.confidence,
            "resolvable": provided.resolvable,
            "reason": provided.reason,
            "details": dict(provided.details),
        }
    return out


def summarise(name: str, ran: Ran, confidence: float) -> AttackSummary:
    """What attack ``name`` achieved on the evaluation split: AUC, balanced accuracy, TPR at low FPRs, ROC."""
    sp = ran.split
    a = stats.auc(sp.eval_in, sp.eval_out, confidence)
    acc = stats.balanced_accuracy(sp, confidence)
    points = []
    for f in SUMMARY_FPRS:
        e = stats.tpr_at_fpr(sp, f, confidence)
        ok = e.resolvable
        points.append(
            RatePoint(
                fpr=f,
                tpr=e.value if ok else None,
                ci=[e.lo, e.hi] if ok else [None, None],
                resolvable=ok,
                reason=e.reason,
                measurable=e.measurable,
                fpr_achieved=e.details.get("fpr_achieved") if ok else None,
                fpr_ci=e.details.get("fpr_ci") if ok else None,
            )
        )
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
        extras={
            **{k: v for k, v in r.extras.items() if k not in _PRIVATE_EXTRAS},
            **({"metrics": m} if (m := _measured(ran, confidence)) else {}),
        },
    )


def measured_summary(name: str, ran: Ran, confidence: float) -> AttackSummary:
    """What a measurement (an attack that ``measures`` a metric, no scores) found: its estimate, its notes."""
    r = ran.result
    return AttackSummary(
        name=name,
        threat_model=r.threat_model,
        status="ran",
        options=r.options,
        seconds=round(r.seconds, 4),
        notes=r.notes,
        extras={**{k: v for k, v in r.extras.items() if k != "estimates"}, "metrics": _measured(ran, confidence)},
    )


def _skipped(name: str, reason: str, options: dict[str, Any], status: str = "skipped") -> AttackSummary:
    return AttackSummary(name=name, threat_model=threat_model_of(name), status=status, reason=reason, options=options)


def _run_one(
    name: str, attack: Any, options: dict[str, Any], audit: AuditKind, run: RunOptions, confidence: float
) -> tuple[Ran, AttackSummary] | str:
    """Run one attack (or diagnostic) of ``audit``: what it found and its summary, or why it was skipped."""
    pooled = audit.pooled
    audit.ctx.options = dict(options)
    try:
        with limit_threads(run.threads):
            result = attack.run(audit.ctx)
    except AttackSkipped as exc:
        return str(exc)
    own = getattr(attack, "summarise", None)
    if own is not None:  # a diagnostic of the data that states its own finding (the distribution-shift guard)
        return Ran(result, None, pooled.membership, None), own(result)
    if getattr(attack, "measures", None) is not None:  # a measurement: its estimate, no scores
        ran = Ran(result, None, pooled.membership, None)
        return ran, measured_summary(name, ran, confidence)
    t0 = time.perf_counter()
    try:
        with limit_threads(run.threads):
            scores = final_scores(result, pooled.calibration, pooled.membership)
    except AttackSkipped as exc:  # a learned attack with too few calibration rows to learn from
        return str(exc)
    result.seconds += time.perf_counter() - t0  # a learned attack fits here
    if scores.shape != (len(pooled.membership),) or not np.all(np.isfinite(scores)):
        raise RuntimeError(
            f"attack '{name}' returned scores of shape {scores.shape} with non-finite values: a bug in the attack"
        )
    ran = Ran(result, stats.SplitScores.from_mask(scores, pooled.membership, pooled.calibration), pooled.membership)
    ran.scores = scores
    return ran, summarise(name, ran, confidence)


def _budgeted(audit: AuditKind, todo: dict[str, dict[str, Any]], budget: Budget) -> tuple[list[str], dict]:
    """The attacks in the order a budget runs them (cheapest first), and each one's estimated seconds."""
    from privgate.attacks.budget import cost_facts

    with limit_threads(audit.ctx.run.threads):
        facts = cost_facts(audit.ctx)
    estimates: dict[str, float | None] = {}
    for name, options in todo.items():
        try:
            estimates[name] = None if facts is None else get_attack(name)(**options).estimated_seconds(facts)
        except Exception:  # noqa: BLE001 - an unknown attack or bad options: reported when it runs
            estimates[name] = None
    return budget.order(estimates), estimates


def attack_loop(
    audit: AuditKind, run: RunOptions, budget: Budget | None = None
) -> tuple[dict[str, Ran], dict[str, str], list[AttackSummary]]:
    """Run the attacks of ``audit``'s policy, then its diagnostics: (ran, missing reasons, summaries).

    With a ``budget`` the attacks run cheapest first, and those whose estimated cost does not fit in what is
    left are not run (:mod:`privgate.attacks.budget`): their summaries say so, ``extras['budget']`` holds it.
    """
    ran: dict[str, Ran] = {}
    missing, summaries = dict(audit.missing), list(audit.summaries)
    confidence = audit.shown_policy.confidence
    todo = audit.todo()
    order, estimates = _budgeted(audit, todo, budget) if budget is not None else (list(todo), {})
    for i, name in enumerate(order, 1):
        options = todo[name]
        why = audit.unavailable(name)
        if why is not None:
            missing[name] = why[1]
            summaries.append(_skipped(name, why[1], options, why[0]))
            continue
        refused = budget.refusal(name, estimates.get(name)) if budget is not None else None
        if refused is not None:
            missing[name] = refused
            summaries.append(_skipped(name, refused, options))
            summaries[-1].extras["budget"] = {"budget_s": budget.seconds, "estimated_s": budget.over[name]}
            continue
        run.say(f"running attack {name} ({i}/{len(todo)})")
        t0 = time.perf_counter()
        found = _run_one(name, get_attack(name)(**options), options, audit, run, confidence)
        if budget is not None:
            budget.ran(estimates.get(name), time.perf_counter() - t0)
        if isinstance(found, str):
            missing[name] = found
            summaries.append(_skipped(name, found, options))
            continue
        ran[name], summary = found
        summaries.append(summary)
    for diagnostic in audit.diagnostics:
        found = _run_one(diagnostic.name, diagnostic, {}, audit, run, confidence)
        if not isinstance(found, str):
            ran[diagnostic.name], summary = found
            summaries.append(summary)
    audit.finish(ran, missing)
    return ran, missing, summaries


def run_attacks(
    target: Any, data: Any, policy: Policy, *, recipe: Recipe | None = None, run: RunOptions | None = None
) -> tuple[dict[str, Ran], dict[str, str], list[AttackSummary]]:
    """Run the policy's attacks on the audit data; returns (ran, missing reasons, summaries).

    Every attack runs inside :func:`privgate.threads.limit_threads` with ``run.threads``.
    """
    run = (run or RunOptions()).resolved()
    with audit_kind(target)(target, data, policy, recipe, run) as audit:
        return attack_loop(audit, run)


def _exposed(audit: AuditKind, ran: dict[str, Ran], summaries: list[AttackSummary], diagnostic: set[str], run):
    """The report's ``exposed`` section (:mod:`privgate.stats.exposed_members`), each record shown as its kind
    shows it."""
    from privgate.stats.exposed_members import ScoredAttack, exposed_members

    by_name = {a.name: a for a in summaries}
    attacks = {
        name: ScoredAttack(r.scores, by_name[name].auc, {p.fpr: p.tpr for p in by_name[name].tpr_at_fpr})
        for name, r in ran.items()
        if name not in diagnostic and r.scores is not None
    }
    p = audit.pooled
    section = exposed_members(attacks, p.membership, p.calibration, p.member_rows, p.labels, run.exposed)
    if section is None:
        return None
    names = _class_names(audit, p.labels)
    for rec in section["records"] if names else []:
        rec["class"] = names[rec["label"]]  # the label as the model knows it ("Yes"), beside its encoding
    return audit.exposed(section, run)


def _class_names(audit: AuditKind, labels: np.ndarray) -> list[str] | None:
    """The target's class names (scikit-learn's ``classes_``) when they name every label of the audit rows."""
    names = getattr(getattr(audit, "target", None), "class_names", None)
    return names if names and len(labels) and int(np.min(labels)) >= 0 and int(np.max(labels)) < len(names) else None


def _records(
    audit: AuditKind, ran: dict[str, Ran], diagnostic: set[str], checks: list[CheckResult]
) -> dict[str, list[Any]] | None:
    """Every audited row's scores (:mod:`privgate.report.records`); None when the kind knows no row's file index."""
    from privgate.report.records import build, thresholds_of

    p = audit.pooled
    if p.rows is None:
        return None
    scores = {n: r.scores for n, r in ran.items() if n not in diagnostic and r.scores is not None}
    names = _class_names(audit, p.labels)
    labels = [names[int(v)] for v in p.labels] if names else [int(v) for v in p.labels]
    cut = thresholds_of(checks, scores, p.membership, p.calibration)
    return build(p.rows, p.membership, p.calibration, labels, scores, cut)


def _guarded(checks: list[CheckResult], guards: list[str]) -> list[CheckResult]:
    """Passing membership checks become inconclusive when a diagnostic found the data unsound (``guards``)."""
    if not guards:
        return checks
    out = []
    for c in checks:
        if c.status == "pass" and c.metric not in MEASURED_BY:
            c = c.model_copy(update={"status": "inconclusive", "reason": f"{c.reason}; but {guards[0]}"})
        out.append(c)
    return out


def check_model(
    target: Any,
    data: Any,
    policy: Policy,
    *,
    recipe: Any = None,
    options: RunOptions | None = None,
    budget_s: float | None = None,
    **settings: Any,
) -> Report:
    """Run ``policy`` against ``target`` on ``data`` and return the decided :class:`Report`.

    Args:
        target: the model under audit (:class:`~privgate.inputs.target.Target`; a Hugging Face folder's
            :class:`~privgate.inputs.targets.hf_target.HFTarget`).
        data: known members and non-members (and optional population data): an
            :class:`~privgate.inputs.data.AuditData`, or a :class:`~privgate.inputs.text.TextAudit` of records.
        policy: the policy, with the policies it extends.
        recipe: how the target was trained (reference-model attacks need it; a language model's recipe
            fine-tunes its reference models).
        options: how the run is carried out (:class:`privgate.options.RunOptions`);
            its threads and device are resolved here (``auto`` → ``cuda`` or ``cpu``:
            :func:`privgate.workload.decided`) and the target's model moved there (a copy: ``target`` is not changed).
        budget_s: a time budget for the attacks in seconds (None: none); an attack that does not fit is not run,
            and a check it could have decided is not passed on the others (:func:`privgate.decision.decide_policy`).
        **settings: single settings of :class:`~privgate.options.RunOptions`
            (``seed=``, ``threads=``, ``cache_dir=``, ``artefacts_dir=`` …),
            applied on top of ``options``.
    """
    run = decided(RunOptions.of(options, **settings), target, data, policy, recipe)  # threads, then auto's device
    started = datetime.now(timezone.utc)
    t0 = time.perf_counter()
    budget = None if budget_s is None else Budget(float(budget_s), t0)
    with audit_kind(target)(target, data, policy, recipe, run) as audit:
        audit.inspect()  # fixes how outputs are read: first
        ran, missing, summaries = attack_loop(audit, run, budget)
        for summary in summaries:
            files = ran[summary.name].result.extras.get("artefacts") if summary.name in ran else None
            if files:
                summary.extras["artefacts"] = (
                    save_artefacts(summary.name, files, run.artefacts_dir) if run.artefacts_dir else []
                )
        # diagnostics look at the data only (the blind baseline, measurements): never the deciding attack of best
        diagnostic = {n for n, cls in available_attacks().items() if cls.diagnostic}
        diagnostic |= {d.name for d in audit.diagnostics}
        exposed = _exposed(audit, ran, summaries, diagnostic, run)
        over = budget.over if budget is not None else {}
        checks = _guarded(decide_policy(audit.policy, ran, missing, diagnostic, over), audit.guards(ran))
        verdict = verdict_of(checks)
        from privgate import __version__

        report = Report(
            privgate_version=__version__,
            verdict=verdict,
            summary=summary_line(verdict, checks),
            policy=policy_facts(audit.shown_policy),
            target=audit.target_facts(),
            data=audit.data_facts(),
            checks=checks,
            attacks=summaries,
            warnings=audit.warnings(ran, summaries) + ([w] if budget is not None and (w := budget.warning()) else []),
            exposed=exposed,
            environment=environment(run),
            started=started.isoformat(timespec="seconds"),
            duration_s=round(time.perf_counter() - t0, 3),
        )
        report._records = _records(audit, ran, diagnostic, checks)
        return report


__all__ = [
    "ROC_POINTS",
    "SUMMARY_FPRS",
    "AuditRows",
    "Ran",
    "attack_loop",
    "audit_rows",
    "check_model",
    "final_scores",
    "measured_summary",
    "run_attacks",
    "summarise",
]
