"""The gate: policy → attacks → metrics with intervals → decided checks → verdict.

This is privgate's façade (as ``PrivacyEngine`` is Opacus's): it wires the
registries together and holds the decision rules, nothing else.

The decision rules — pass only on an upper bound within the threshold, fail
only on a lower bound above it, one error budget per policy shared by its
checks and their candidate attacks, ``extends`` chains decided verbatim — live
in :mod:`privgate.decision`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import numpy as np

from privgate import stats
from privgate.attacks import AttackContext, AttackResult, available_attacks, get_attack, threat_model_of
from privgate.attacks.base import AttackSkipped
from privgate.attacks.blind import soundness_warnings
from privgate.attacks.crossfit import CalibrationLabels
from privgate.decision import decide_policy, verdict_of
from privgate.inputs.data import AuditData
from privgate.inputs.sanity import inspect_target
from privgate.inputs.surface import surface_of
from privgate.inputs.target import Target
from privgate.io.artefacts import save_artefacts
from privgate.options import RunOptions
from privgate.policy import Policy
from privgate.recipe import Recipe
from privgate.report.model import AttackSummary, RatePoint, Report
from privgate.report.provenance import environment, policy_facts, summary_line
from privgate.training.threads import limit_threads

#: FPRs at which every attack summary reports TPR.
SUMMARY_FPRS = (0.001, 0.01)
ROC_POINTS = 200


@dataclass
class Ran:
    result: AttackResult
    split: stats.SplitScores
    membership: np.ndarray | None = None  # for metrics measured on all audit examples (privgate.stats.leakage)
    scores: np.ndarray | None = None  # the final scores of every pooled row (exposed records)


@dataclass(frozen=True)
class AuditRows:
    """The pooled audit rows in the order the attacks see them, split as the gate measures them.

    Attributes:
        x, y: inputs and labels, members and non-members shuffled together (seeded).
        membership: the true membership (never shown to an attack).
        calibration: the calibration split (thresholds, learned scores); the rest is the evaluation split.
        member_rows: each member's row in the members file as given; −1 for non-members.
    """

    x: np.ndarray
    y: np.ndarray
    membership: np.ndarray
    calibration: np.ndarray
    member_rows: np.ndarray


def audit_rows(data: AuditData, seed: int) -> AuditRows:
    """Pool, shuffle and split the audit data as :func:`run_attacks` does (benchmarks compare peers on these rows)."""
    n1, n0 = len(data.members), len(data.nonmembers)
    y = np.r_[data.members.y, data.nonmembers.y]
    membership = np.r_[np.ones(n1, bool), np.zeros(n0, bool)]
    rows = np.r_[data.member_rows if data.member_rows is not None else np.arange(n1), np.full(n0, -1)]
    perm = np.random.default_rng(np.random.SeedSequence([seed, 0xA11])).permutation(len(y))
    y, membership, rows = y[perm], membership[perm], rows[perm]  # attacks never see membership, nor its order
    # x = pooled x[perm], written in place: pooled row j goes to where[j], so no pooled copy of x is made
    where = np.empty_like(perm)
    where[perm] = np.arange(len(perm))
    x = np.empty((n1 + n0, *data.members.x.shape[1:]), dtype=np.result_type(data.members.x, data.nonmembers.x))
    x[where[:n1]] = data.members.x
    x[where[n1:]] = data.nonmembers.x
    return AuditRows(x, y, membership, stats.calibration_mask(membership, seed), rows)


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


def _policy_warnings(policy: Policy) -> list[str]:
    if not policy.uses_default_attacks():
        return []
    family = "label-only" if policy.served().output == "label" else "black-box"
    return [
        f"the policy lists no attacks; its checks ran the default {family} family "
        f"({', '.join(policy.attacks_to_run())})"
    ]


def run_attacks(
    target: Target, data: AuditData, policy: Policy, *, recipe: Recipe | None = None, run: RunOptions | None = None
) -> tuple[dict[str, Ran], dict[str, str], list[AttackSummary]]:
    """Run the policy's attacks on the audit data; returns (ran, missing reasons, summaries).

    Every attack runs inside :func:`privgate.training.threads.limit_threads` with ``run.threads``.
    """
    run = (run or RunOptions()).resolved()
    if recipe is None:  # a scikit-learn target is its own recipe: clones of it (privgate.training.sklearn_models)
        from privgate.training.sklearn_models import own_recipe

        recipe = own_recipe(target)
    surface = surface_of(policy)  # an API release: every query answered as the API answers it
    target = target.to_device(run.device).serving(surface)
    rows = audit_rows(data, run.seed)
    x, y, membership, calibration = rows.x, rows.y, rows.membership, rows.calibration
    ctx = AttackContext(target=target, x=x, y=y, population=data.population, recipe=recipe, run=run)
    ran: dict[str, Ran] = {}
    missing: dict[str, str] = {}
    summaries: list[AttackSummary] = []
    todo = policy.attacks_to_run()
    registry = available_attacks()
    if recipe is not None:
        from privgate.attacks.sharing import planned_models

        served = {  # the attacks the loop below will not skip for the API's surface
            name: o
            for name, o in todo.items()
            if name in registry
            and (surface is None or registry[name].diagnostic or not surface.not_applicable(threat_model_of(name)))
        }
        ctx.planned_models = planned_models(served, registry, 0 if data.population is None else len(data.population))
    for i, (name, options) in enumerate(todo.items(), 1):
        threat = threat_model_of(name)
        why = None
        if name not in registry:
            why = f"'{name}' is not implemented in this version of privgate"
        elif surface is not None and not registry[name].diagnostic and surface.not_applicable(threat):
            why = surface.not_applicable(threat)
        elif threat == "white-box" and not target.white_box and not getattr(registry[name], "reads_structure", False):
            why = (
                f"'{name}' needs the model's weights (white-box), but the target is {target.fmt} without a torch module"
            )
        elif registry[name].needs_recipe and recipe is None:
            why = f"'{name}' trains reference models and needs a recipe (--recipe module:attr)"
        if why:
            missing[name] = why
            summaries.append(
                AttackSummary(
                    name=name,
                    threat_model=threat,
                    status="unavailable" if name not in registry else "skipped",
                    reason=why,
                    options=options,
                )
            )
            continue
        run.say(f"running attack {name} ({i}/{len(todo)})")
        attack = get_attack(name)(**options)
        ctx.options = dict(options)
        try:
            with limit_threads(run.threads):
                result = attack.run(ctx)
        except AttackSkipped as exc:
            missing[name] = str(exc)
            summaries.append(
                AttackSummary(name=name, threat_model=threat, status="skipped", reason=str(exc), options=options)
            )
            continue
        t0 = time.perf_counter()
        try:
            with limit_threads(run.threads):
                scores = final_scores(result, calibration, membership)
        except AttackSkipped as exc:  # a learned attack with too few calibration rows to learn from
            missing[name] = str(exc)
            summaries.append(
                AttackSummary(name=name, threat_model=threat, status="skipped", reason=str(exc), options=options)
            )
            continue
        result.seconds += time.perf_counter() - t0  # a learned attack fits here
        if scores.shape != (len(y),) or not np.all(np.isfinite(scores)):
            raise RuntimeError(
                f"attack '{name}' returned scores of shape {scores.shape} with non-finite values: a bug in the attack"
            )
        ran[name] = Ran(result, stats.SplitScores.from_mask(scores, membership, calibration), membership, scores)
        summaries.append(summarise(name, ran[name], policy.confidence))
    return ran, missing, summaries


def _exposed(
    ran: dict[str, Ran],
    summaries: list[AttackSummary],
    rows: AuditRows,
    diagnostic: set[str],
    recipe: Recipe | None,
    run: RunOptions,
) -> dict[str, Any] | None:
    """The report's ``exposed`` section (:mod:`privgate.stats.exposure`), with each record's image for image data."""
    from privgate.attacks.inversion import image_shape
    from privgate.io.png import png_bytes
    from privgate.stats.exposure import ScoredAttack, exposed_members

    by_name = {a.name: a for a in summaries}
    attacks = {
        name: ScoredAttack(r.scores, by_name[name].auc, {p.fpr: p.tpr for p in by_name[name].tpr_at_fpr})
        for name, r in ran.items()
        if name not in diagnostic and r.scores is not None
    }
    section = exposed_members(attacks, rows.membership, rows.calibration, rows.member_rows, rows.y, run.exposed)
    if section is None or not run.artefacts_dir:
        return section
    shape, _ = image_shape(rows.x, recipe)
    if shape is None or len(shape) != 2:  # grey images only; colour images would need their channel order
        return section
    where = {int(m): i for i, m in enumerate(rows.member_rows) if m >= 0}
    x = rows.x.reshape(len(rows.x), -1)
    lo, hi = float(x.min()), float(x.max())
    files = {}
    for rec in section["records"]:
        img = x[where[rec["member_index"]]].reshape(shape)
        scaled = np.clip((img - lo) / max(hi - lo, 1e-12), 0, 1) * 255
        f = max(1, 48 // max(shape))
        files[f"member-{rec['member_index']}.png"] = png_bytes(
            scaled.repeat(f, 0).repeat(f, 1).round().astype(np.uint8)
        )
    paths = dict(zip(sorted(files), save_artefacts("exposed", files, run.artefacts_dir)))
    for rec in section["records"]:
        rec["image"] = paths[f"member-{rec['member_index']}.png"]
    return section


def check_model(
    target: Target,
    data: AuditData,
    policy: Policy,
    *,
    recipe: Recipe | None = None,
    options: RunOptions | None = None,
    **settings: Any,
) -> Report:
    """Run ``policy`` against ``target`` on ``data`` and return the decided :class:`Report`.

    Args:
        target: the model under audit.
        data: known members and non-members (and optional population data).
        policy: the policy, with the policies it extends.
        recipe: how the target was trained (reference-model attacks need it).
        options: how the run is carried out (:class:`privgate.options.RunOptions`);
            its device is resolved here (``auto`` → ``cuda`` or ``cpu``) and the
            target's model moved there (a copy: ``target`` is not changed).
        **settings: single settings of :class:`~privgate.options.RunOptions`
            (``seed=``, ``threads=``, ``cache_dir=``, ``artefacts_dir=`` …),
            applied on top of ``options``.
    """
    run = RunOptions.of(options, **settings).resolved()
    started = datetime.now(timezone.utc)
    t0 = time.perf_counter()
    target = target.to_device(run.device).serving(surface_of(policy))
    with limit_threads(run.threads):  # scoring every audit row honours the thread budget, as the attacks do
        data.check_against(target)
        sanity = inspect_target(target, data, recipe, policy.confidence)  # fixes how outputs are read: first
    ran, missing, summaries = run_attacks(target, data, policy, recipe=recipe, run=run)
    for summary in summaries:
        files = ran[summary.name].result.extras.get("artefacts") if summary.name in ran else None
        if files:
            summary.extras["artefacts"] = (
                save_artefacts(summary.name, files, run.artefacts_dir) if run.artefacts_dir else []
            )
    diagnostic = {n for n, cls in available_attacks().items() if cls.diagnostic}  # the blind baseline: data only
    exposed = _exposed(ran, summaries, audit_rows(data, run.seed), diagnostic, recipe, run)
    checks = decide_policy(policy, ran, missing, diagnostic)
    verdict = verdict_of(checks)
    from privgate import __version__

    return Report(
        privgate_version=__version__,
        verdict=verdict,
        summary=summary_line(verdict, checks),
        policy=policy_facts(policy),
        target={**target.describe(), **sanity.describe()},  # accuracy on members/non-members, output kind
        data=data.describe(),
        checks=checks,
        attacks=summaries,
        warnings=list(data.warnings)
        + _policy_warnings(policy)
        + sanity.warnings
        + soundness_warnings(summaries)  # blind: Das 2024
        + list(dict.fromkeys(w for r in ran.values() for w in r.result.extras.get("cache_warnings", []))),
        exposed=exposed,
        environment=environment(run),
        started=started.isoformat(timespec="seconds"),
        duration_s=round(time.perf_counter() - t0, 3),
    )
