"""The ε search: retrain a failing model with DP-SGD at decreasing ε until the policy passes — any kind of model.

After Sabau 2023 (master's thesis, OTH Amberg-Weiden, ch. 6), tuned after Ponomareva et al. 2023 (arXiv
2303.00654): audit the original; fix the DP-SGD settings once; for each ε the strategy picks
(:mod:`privgate.dp.candidates`, or ``random_stopping``: :mod:`privgate.dp.search`) retrain from scratch,
re-audit with the DP recipe and measure utility on held-out rows. One state machine (:func:`search`) for every
kind; what differs is the kind's :class:`~privgate.dp.task.HardenTask` (:func:`remediate`: tabular). The report
gives the training ε and the released ε of the whole search (Liu & Talwar 2019, arXiv 1811.07971; Papernot &
Steinke 2022, arXiv 2110.03620); an unresolvable check keeps it ``inconclusive`` (``docs/remediation.md``).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from privgate.dp.candidates import (  # noqa: F401  (re-exported)
    Candidate,
    best_of,
    mark_not_taken,
    privacy_status,
    search_schedule,
    undecidable,
    unresolvable,
)
from privgate.dp.search import Searched, accounting_of, compose_search, random_stopping_search
from privgate.dp.selection import Trials
from privgate.dp.settings import check_can_remediate, settings_for  # noqa: F401  (re-exported)
from privgate.dp.statement import statement
from privgate.dp.task import TASKS, HardenTask, Plan
from privgate.dp.utility import UtilityData, measure_utility, utility_data, utility_floor  # noqa: F401  (re-exported)
from privgate.gate import check_model
from privgate.inputs.data import AuditData, Dataset
from privgate.inputs.target import Target
from privgate.lazy import load
from privgate.options import RunOptions
from privgate.policy import Policy
from privgate.recipe import Recipe
from privgate.report.model import Report
from privgate.report.remediation_section import Chosen, RemediationSection, SearchRow, UtilitySpec
from privgate.threads import limit_threads
from privgate.workload import decided

if TYPE_CHECKING:
    from privgate.dp.recipe import DPRecipe

RowCallback = Callable[[SearchRow], None]
_search = search_schedule  # the name the tests knew

#: The multiplier of a trial's seed: trial t of a random-stopping search trains with seed + 7919·t.
TRIAL_SEED = 7919


@dataclass
class Outcome:
    """What :func:`search` decided: the report to hand back and, when hardened, the model."""

    report: Report
    status: str  # not_needed | cannot_help | hardened | no_epsilon | audit_failed | budget_exceeded
    model: Any = None
    recipe: DPRecipe | None = None
    candidate: Candidate | None = None
    candidates: list[Candidate] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        return self.report.exit_code


# --------------------------------------------------------------------------- the search


def remediate(
    target: Target,
    data: AuditData,
    policy: Policy,
    recipe: Recipe | None,
    *,
    train: Dataset | None = None,
    original: Report | None = None,
    on_row: RowCallback | None = None,
    memo: dict[Any, Candidate] | None = None,
    sweep: bool = False,
    options: RunOptions | None = None,
    model_kind: str = "tabular",
    **settings: Any,
) -> Outcome:
    """Audit a tabular ``target``; if it fails, search the policy's ε schedule for a DP-SGD model that passes.

    Args:
        target: the model under audit (never modified, never trained further).
        data: the audit data; utility is measured on its population, else its non-members.
        policy: the policy, with its ``utility`` and ``remediation`` sections.
        recipe: how the target was trained; DP-SGD retrains with its model
            factory and optimiser, from scratch or its public pre-trained start.
        train: the full training set (default: the audit's members).
        original: the original model's report, when already computed.
        on_row, memo, sweep, options: as :func:`search` takes them.
        model_kind: what the DP statement calls the model (``tabular``).
        **settings: single settings of :class:`~privgate.options.RunOptions`
            (``seed=``, ``cache_dir=``, ``threads=`` …), applied on top of ``options``.

    Raises:
        PolicyError: the policy does not allow remediation.
        RecipeError: no recipe, or one Opacus cannot make private.
    """
    run = RunOptions.of(options, **settings)  # search() decides threads and auto's device on the task's inputs
    tabular = load(TASKS["tabular"])  # DP-SGD's task, and torch, imported only when a search needs them
    task = tabular(target, data, policy, recipe, train=train, run=run, model_kind=model_kind)
    return search(task, original=original, on_row=on_row, memo=memo, sweep=sweep, options=run)


def search(
    task: HardenTask,
    *,
    original: Report | None = None,
    on_row: RowCallback | None = None,
    memo: dict[Any, Candidate] | None = None,
    sweep: bool = False,
    options: RunOptions | None = None,
) -> Outcome:
    """Audit ``task``'s model; if it fails, search the policy's ε schedule for a DP model that passes.

    Args:
        task: what trains, measures and audits a candidate of this kind (:class:`~privgate.dp.task.HardenTask`).
        original: the original model's report, when already computed.
        on_row: called with each candidate's row as soon as it is decided.
        memo: candidates by (ε, trial), reused instead of retraining (a
            benchmark comparing strategies on the same settings); filled as it goes.
        sweep: after a composed search, also train and audit every other ε of
            the schedule, for the full ε–utility–attack table. The choice, the
            ``trainings`` count and the released ε (what the search needed)
            are unchanged.
        options: the run's settings (:class:`privgate.options.RunOptions`): its
            seed drives every training and every audit (same seed → same
            numbers; trial t of a random-stopping search trains with seed + 7919·t); its thread budget holds
            DP training and the attacks; its artefacts folder gets the original model's attack files, each
            candidate's in a ``dp-eps-<ε>`` folder inside it.

    The report's ``duration_s`` is the time of the whole run (the original
    audit, when computed here, and the search), counted once;
    ``remediation.seconds`` is the search alone.

    Returns:
        An :class:`Outcome` whose report carries the typed ``remediation`` section.
    """
    run = decided(options or RunOptions(), task.target, task.data, task.policy, task.audit_recipe, hardening=True)
    t0 = time.perf_counter()
    earlier = original.duration_s if original is not None else 0.0  # audited before this call
    original = original or check_model(task.target, task.data, task.policy, recipe=task.audit_recipe, options=run)
    task.original_seconds = float(original.duration_s or 0.0)
    clock = _Clock(t0, time.perf_counter(), earlier)
    section, orig_utility, floor = _opening(task, original)
    early = _before_training(task, original, section, clock)
    if early is not None:
        return early
    plan = task.plan(run)
    if plan is None:  # no DP: the task walks its own schedule (a scikit-learn model's capacity ladder)
        found, candidates = task.walk(section, floor, run, on_row)
    else:
        section.settings, section.clip_search_trainings = plan.section, plan.clip_trainings
        walk = _Walk(task, section, floor, run, on_row, {} if memo is None else memo)
        found, candidates = _walk(walk, plan, sweep)
    if found.stopped is not None:
        return _stopped(task, original, section, found, clock)
    chosen = found.chosen
    if chosen is None:
        section.status, section.first_broken = task.nothing, found.broke
        section.reason = task.reason(found.reason, floor)
        report = _with_section(original, section, clock)
        report = report.model_copy(update={"summary": f"{original.summary} — remediation: {section.reason}"})
        return Outcome(report, task.nothing, candidates=candidates)
    random = task.policy.remediation.search == "random_stopping" and plan is not None
    mark_not_taken(section.rows, chosen, "the accepted trial with the best utility" if random else chosen.taken)
    if plan is None:
        summary = task.hardened(section, chosen, orig_utility, floor, len(candidates))
    else:
        summary = _hardened(task, plan, section, chosen, orig_utility, floor, len(candidates))
    return _audited_release(task, plan, section, chosen, summary, run, clock, candidates)


def _opening(task: HardenTask, original: Report) -> tuple[RemediationSection, float, float | None]:
    """The remediation section as the search opens it, the original model's utility and the utility floor."""
    orig_utility, orig_ci = task.utility(task.target)
    floor, floor_rule = task.floor(orig_utility)
    spec = UtilitySpec(
        metric=task.metric,
        data=task.utility_source,
        floor=None if floor is None else round(floor, 6),
        rule=floor_rule,
        baseline=task.baseline,
    )
    section = RemediationSection.opening(task.policy.remediation, original, orig_utility, orig_ci, spec)
    section.method = task.method
    if task.method != "dp":  # no ε schedule: the task's own (a capacity ladder) is set as it walks
        section.schedule = []
    return section, orig_utility, floor


def _before_training(task: HardenTask, original: Report, section: RemediationSection, clock: _Clock) -> Outcome | None:
    """The outcome when no candidate need or could be trained: the original passes, nothing retraining changes
    is undecided, or no candidate could pass at this audit size; None: search."""
    if original.verdict == "pass":
        section.status, section.reason = "not_needed", "the original model passes the policy; nothing was retrained"
        return Outcome(_with_section(original, section, clock), "not_needed")
    if privacy_status(original.checks) == "pass":  # inconclusive only for reasons no retraining changes
        blocked = unresolvable(original.checks)
        section.status = "cannot_help"
        section.reason = (
            "nothing fails; the inconclusive check(s) cannot be decided on this data whatever the model "
            f"({'; '.join(f'{c.id}: {c.reason}' for c in blocked)}), so retraining would not change the verdict"
        )
        return Outcome(_with_section(original, section, clock), "cannot_help")
    why = undecidable(original, task.policy, task.audit_policy or task.policy)
    if why is None:
        return None
    section.status, section.first_broken, section.reason = task.nothing, "audit_size", why
    report = _with_section(original, section, clock)
    report = report.model_copy(update={"summary": f"{original.summary} — remediation: {why}"})
    return Outcome(report, task.nothing)


def _audited_release(
    task: HardenTask,
    plan: Plan | None,
    section: RemediationSection,
    chosen: Candidate,
    summary: str,
    run: RunOptions,
    clock: _Clock,
    candidates: list[Candidate],
) -> Outcome:
    """The hardened outcome, after the one-run audit of the chosen DP model when the policy asks for it (a failed
    audit hands out no model)."""
    if task.policy.remediation.audit and plan is not None:
        audit = task.one_run_audit(chosen, plan.settings, run)
        if isinstance(audit, str):  # not run, and why
            section.audit_summary = audit
        else:
            section.audit, section.audit_summary = audit, audit["summary"]
            summary += f"; {audit['summary']}"
            if audit["verdict"] == "fail":  # the chosen ε is provably not delivered: hand out no model
                section.status, section.reason = "audit_failed", audit["summary"]
                report = _with_section(chosen.report, section, clock).model_copy(
                    update={"verdict": "fail", "summary": summary}
                )
                return Outcome(report, "audit_failed", candidates=candidates)
    report = _with_section(chosen.report, section, clock).model_copy(update={"summary": summary})
    return Outcome(report, "hardened", chosen.model, chosen.recipe, chosen, candidates)


@dataclass
class _Walk:
    """The candidates of one ε search: each trained, audited and measured once (``memo``), each row reported."""

    task: HardenTask
    section: RemediationSection
    floor: float | None
    run: RunOptions
    on_row: RowCallback | None
    memo: dict[Any, Candidate]
    in_search: bool = True  # False for the sweep's extra candidates

    def train(self, eps: float, sigma: float, trial: int | None) -> Candidate:
        """The candidate at ``eps`` (noise ``sigma``; ``trial`` of a random-stopping search): trained, audited."""
        key = (eps, trial)
        if key in self.memo:
            return self.memo[key]
        task, run, say = self.task, self.run, self.run.say
        label = f"{task.trained_as} ε={eps:g}" + (f" (trial {trial})" if trial else "")
        say(f"{label}: training (model {len(self.section.rows) + 1})")
        seed = run.seed if trial is None else run.seed + TRIAL_SEED * trial  # each trial: its own noise and batches
        with limit_threads(run.threads):
            model, record = task.train(eps, sigma, seed, run)
        if record.epsilon > eps * (1 + 1e-9) + 1e-12:
            raise RuntimeError(
                f"DP-SGD verification failed: the {record.accountant} accountant reports ε = "
                f"{record.epsilon:.4g} after training, above the target {eps:g}"
            )
        record = dataclasses.replace(record, target_epsilon=float(eps))
        target, recipe = task.audited(model, record, label)
        folder = f"dp-eps-{eps:g}" + (f"-trial{trial}" if trial else "")
        options = run.replace(
            artefacts_dir=str(Path(run.artefacts_dir) / folder) if run.artefacts_dir else None,
            progress=lambda msg: say(f"{label}: {msg}"),
        )
        report = check_model(target, task.data, task.policy, recipe=recipe, options=options)
        util, util_ci = task.utility(target)
        self.memo[key] = task.candidate(eps, model, recipe, record, report, util, util_ci, self.floor, trial)
        return self.memo[key]

    def add(self, cand: Candidate, released_eps: float | None) -> None:
        """Report a decided candidate's row."""
        row = cand.row(in_search=self.in_search, released_epsilon=released_eps)
        self.section.rows.append(row)
        if self.on_row:
            self.on_row(row)


def _walk(walk: _Walk, plan: Plan, sweep: bool) -> tuple[Searched, list[Candidate]]:
    """Train, audit and measure candidates as the policy's search walks its schedule; account for all of them."""
    task, section = walk.task, walk.section
    rem, settings = task.policy.remediation, plan.settings
    limit = rem.max_total_epsilon
    if rem.search == "random_stopping":
        trials = Trials(rem.trials.distribution, rem.trials.mean, rem.trials.shape)
        found = random_stopping_search(
            walk.train, rem.epsilons, settings, task.n_units, trials, walk.run.seed,
            max_total_epsilon=limit, on_candidate=walk.add,
        )  # fmt: skip
    else:
        found = compose_search(
            walk.train, rem.epsilons, rem.strategy, settings, task.n_units,
            max_total_epsilon=limit, on_candidate=walk.add,
        )  # fmt: skip
    candidates = found.candidates
    section.trainings = len(candidates)
    section.accounting = accounting_of(found, settings, rem.search, limit)
    if sweep and rem.search == "compose" and found.stopped is None:
        _sweep(walk, settings, candidates)
    section.architecture_changes = candidates[0].training.architecture_changes if candidates else []
    section.rows.sort(key=lambda r: (-r.epsilon, r.trial or 0))
    section.selection_leakage = task.selection_statement(len(candidates), section.accounting.basis, plan.clip_from)
    return found, candidates


def _sweep(walk: _Walk, settings: Any, candidates: list[Candidate]) -> None:
    """Train and audit every ε of the schedule the search did not, for the full ε–utility–attack table."""
    from privgate.dpsgd.accounting import calibrate, sampling

    walk.in_search = False
    q, _ = sampling(walk.task.n_units, settings.batch_size, settings.epochs)
    for eps in walk.task.policy.remediation.epsilons:
        if all(c.epsilon != eps for c in candidates):
            sigma, _ = calibrate(eps, settings.delta, q, settings.epochs, settings.accountant)
            walk.add(walk.train(float(eps), sigma, None), None)


def _hardened(
    task: HardenTask,
    plan: Plan,
    section: RemediationSection,
    chosen: Candidate,
    original: float,
    floor: float | None,
    trainings: int,
) -> str:
    """The hardened ending: the DP statement, the chosen candidate, the reason; returns the report's summary."""
    tr, settings = chosen.training, plan.settings
    section.statement = statement(tr, section.accounting, hyper=plan.hyper, **task.statement())
    if task.sampling() is not None:
        section.statement.sampling = task.sampling()
    section.status, section.chosen_epsilon = "hardened", chosen.epsilon
    section.chosen = Chosen(
        epsilon=chosen.epsilon,
        epsilon_spent=tr.to_dict()["epsilon"],
        utility=round(chosen.utility, 6),
        noise_multiplier=tr.noise_multiplier,
        max_grad_norm=tr.max_grad_norm,
        sample_rate=tr.sample_rate,
        steps=tr.steps,
        delta=tr.delta,
        accountant=tr.accountant,
    )
    section.reason = (
        f"{task.training} at ε = {chosen.epsilon:g} (δ = {settings.delta:.3g}) "
        + ("passes every check" if chosen.report.verdict == "pass" else "passes every check the data can resolve")
        + task.utility_phrase(chosen.utility, original, floor)
    )
    return (
        f"{chosen.report.summary} — hardened: {section.reason}; {trainings} {task.trainings}; "
        f"released ε = {section.accounting.epsilon:.3g} including the search (training ε {tr.epsilon:.3g})"
    )


def _stopped(
    task: HardenTask, original: Report, section: RemediationSection, found: Searched, clock: _Clock
) -> Outcome:
    """The released ε would exceed the policy's bound: exit 1, the best candidate named but not handed out."""
    stop = found.stopped
    assert stop is not None
    best = best_of(found.candidates)
    section.status = "budget_exceeded"
    section.first_broken = "budget"
    tail = (
        f"; the best candidate trained (ε = {best.epsilon:g}, {task.utility_of(best.utility)}, checks "
        f"{best.privacy}) is not handed out"
        if best is not None
        else ""
    )
    section.reason = f"the search stopped: {stop.why}{tail}"
    if best is not None:
        section.best_not_released = next(
            (r for r in section.rows if r.epsilon == best.epsilon and r.trial == best.trial), None
        )
    report = _with_section(original, section, clock)
    report = report.model_copy(
        update={"verdict": "fail", "summary": f"{original.summary} — remediation: {section.reason}"}
    )
    return Outcome(report, "budget_exceeded", candidates=found.candidates)


@dataclass(frozen=True)
class _Clock:
    """When :func:`search` started, when its search started, and seconds spent auditing before it was called."""

    start: float
    search: float
    earlier: float


def _with_section(report: Report, section: RemediationSection, clock: _Clock) -> Report:
    """``report`` with the remediation section; ``duration_s`` is the whole run, each audit counted once.

    ``report`` is the original's or the chosen candidate's, whose own
    ``duration_s`` is already inside the time measured here.
    """
    now = time.perf_counter()
    section.seconds = round(now - clock.search, 3)
    return report.model_copy(update={"remediation": section, "duration_s": round(clock.earlier + now - clock.start, 3)})


__all__ = [
    "Candidate",
    "Outcome",
    "TRIAL_SEED",
    "UtilityData",
    "check_can_remediate",
    "measure_utility",
    "privacy_status",
    "remediate",
    "search",
    "settings_for",
    "unresolvable",
    "utility_data",
    "utility_floor",
]
