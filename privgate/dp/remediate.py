"""The ε search: retrain a failing model with DP-SGD at decreasing ε until the policy passes.

The procedure (Sabau 2023, master's thesis, OTH Amberg-Weiden, ch. 6: start
DP-SGD at ε = 50 and lower ε step by step while the attack still succeeds;
tuning after Ponomareva et al. 2023, arXiv 2303.00654):

1. Audit the original model. If it passes, nothing is retrained.
2. Fix the DP-SGD settings once: epochs and logical batch size (the policy's,
   else the recipe's), δ (``auto`` = 1/(10·N) for N training rows, below the
   1/N that would allow releasing one whole record), the clip norm (a number,
   or ``auto``: :func:`~privgate.dp.clip.search_clip_norm`).
3. For each ε of the schedule the strategy picks, train from scratch with
   DP-SGD (:func:`~privgate.dp.train.train_dp`), re-run the policy's attacks on
   the new model with the DP recipe as the recipe — so reference-model attacks
   (LiRA, RMIA, shadow models) train their reference models with the same
   clipping, noise, sampling rate and epochs as the target now is — and
   measure utility.
4. A candidate is *accepted* when no check fails, no check is undecided (point
   estimate within the threshold but the upper bound over it) and utility is at
   or above the floor. Checks the audit data cannot resolve at all (e.g. TPR at
   FPR 0.001 with fewer than 1000 non-members per split, or an attack that did
   not run) stay ``inconclusive`` — no amount of noise resolves them — so an
   accepted model with such a check is reported ``inconclusive``, never ``pass``.

Strategies (both assume leakage falls and utility falls as ε falls):

* ``ladder`` walks the schedule from the largest ε down and stops at the first
  accepted ε, or as soon as utility falls below the floor (every smaller ε
  would be worse).
* ``bisect`` binary-searches the schedule for the largest ε whose checks pass:
  ⌈log₂(n+1)⌉ trainings instead of up to n; it stops early when a probe fails
  both the checks and the floor.

Utility is accuracy on held-out data: the **population** when the audit has one
(rows neither the target nor any DP candidate trains on, and that no attack
calibrates a threshold on), else the **non-members** (never trained on; the
attacks only read them, so measuring accuracy there biases neither number).
The floor is decided on the point estimate; its Clopper-Pearson interval is
reported. The same rows also pick the ε, so the reported utility of the chosen
model is slightly optimistic — the price of not holding out a third set.

Choosing ε by attacking several candidates on the same members is itself a
data-dependent selection that the chosen model's (ε, δ) guarantee does not
cover (hyper-parameter selection leaks: Papernot & Steinke 2022, arXiv
2110.03620; Liu & Talwar 2019, arXiv 1811.07971). The report says so and counts
every training, so the selection can be accounted for.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torch import nn

from privgate.dp.clip import search_clip_norm
from privgate.dp.recipe import DPRecipe
from privgate.dp.train import DPSettings, DPTraining, probe_private_training, train_dp
from privgate.dp.utility import UtilityData, measure_utility, utility_data, utility_floor  # noqa: F401  (re-exported)
from privgate.errors import PolicyError, RecipeError
from privgate.executors import executor_for
from privgate.gate import check_model
from privgate.inputs.data import AuditData, Dataset
from privgate.inputs.target import Target
from privgate.options import RunOptions
from privgate.policy import Policy
from privgate.recipe import Recipe
from privgate.report.model import CheckResult, Report
from privgate.training.threads import limit_threads

RowCallback = Callable[[dict[str, Any]], None]

SELECTION_STATEMENT = (
    "Choosing ε by repeatedly attacking candidate models on the same audit data is itself a data-dependent "
    "choice: it leaks a little information about the members that the chosen model's (ε, δ) guarantee does "
    "not cover (Papernot & Steinke 2022, arXiv 2110.03620). The guarantee holds for one DP-SGD run at a fixed "
    "ε; {n} DP-SGD training(s) of the target and {c} noise-free clip-norm run(s) were made on the members to "
    "reach this choice, recorded here so the selection can be accounted for."
)


# --------------------------------------------------------------------------- candidates


def privacy_status(checks: list[CheckResult]) -> str:
    """``fail`` if a check fails; ``undecided`` if one is inconclusive with a measured value
    (more noise can resolve it); else ``pass`` — checks the data cannot resolve at all
    (no value) do not block, and keep the verdict ``inconclusive``."""
    if any(c.status == "fail" for c in checks):
        return "fail"
    if any(c.status == "inconclusive" and c.value is not None for c in checks):
        return "undecided"
    return "pass"


def unresolvable(checks: list[CheckResult]) -> list[CheckResult]:
    """Checks no retraining can decide: inconclusive without a value (too little data, attack unavailable)."""
    return [c for c in checks if c.status == "inconclusive" and c.value is None]


@dataclass
class Candidate:
    """One DP-SGD retraining and what the re-audit found."""

    epsilon: float
    model: nn.Module
    recipe: DPRecipe
    training: DPTraining
    report: Report
    utility: float
    utility_ci: list[float]
    floor: float | None

    @property
    def utility_ok(self) -> bool:
        return self.floor is None or self.utility >= self.floor

    @property
    def privacy(self) -> str:
        return privacy_status(self.report.checks)

    @property
    def accepted(self) -> bool:
        return self.privacy == "pass" and self.utility_ok

    def row(self) -> dict[str, Any]:
        return {
            "epsilon": self.epsilon,
            "utility": round(self.utility, 6),
            "utility_ci": [round(v, 6) for v in self.utility_ci],
            "utility_ok": self.utility_ok,
            "checks": [{"id": c.id, "value": c.value, "ci": c.ci, "status": c.status} for c in self.report.checks],
            "privacy": self.privacy,
            "verdict": self.report.verdict,
            "accepted": self.accepted,
            "training": self.training.to_dict(),
            "audit_seconds": self.report.duration_s,
        }


@dataclass
class Outcome:
    """What :func:`remediate` decided: the report to hand back and, when hardened, the model."""

    report: Report
    status: str  # not_needed | cannot_help | hardened | no_epsilon | audit_failed
    model: nn.Module | None = None
    recipe: DPRecipe | None = None
    candidate: Candidate | None = None
    candidates: list[Candidate] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        return self.report.exit_code


def _first_problem(c: Candidate) -> CheckResult | None:
    return next((x for x in c.report.checks if x.status == "fail"), None) or next(
        (x for x in c.report.checks if x.status == "inconclusive" and x.value is not None), None
    )


def _describe_check(c: CheckResult) -> str:
    value = "n/a" if c.value is None else f"{c.value:.3g}"
    return f"check '{c.id}' is {c.status} ({c.metric} {value}, max {c.threshold:g})"


def _search(
    evaluate: Callable[[int], Candidate], n: int, strategy: str
) -> tuple[Candidate | None, str | None, str | None]:
    """(accepted candidate, what broke first — 'utility' | 'privacy', reason) for a schedule of n ε."""
    tried: dict[int, Candidate] = {}

    def at(i: int) -> Candidate:
        if i not in tried:
            tried[i] = evaluate(i)
        return tried[i]

    if strategy == "ladder":
        for i in range(n):
            c = at(i)
            if c.accepted:
                return c, None, None
            if not c.utility_ok:
                return None, "utility", _utility_reason(c)
        return None, "privacy", _privacy_reason(at(n - 1))
    lo, hi = 0, n  # smallest index whose checks pass lies in [lo, hi]; n = none
    while lo < hi:
        mid = (lo + hi) // 2
        c = at(mid)
        if c.privacy == "pass":
            hi = mid
        else:
            if not c.utility_ok:  # the answer lies at a smaller ε, whose utility is lower still
                return None, "utility", _utility_reason(c)
            lo = mid + 1
    if lo == n:
        return None, "privacy", _privacy_reason(at(n - 1))
    c = at(lo)
    if c.accepted:
        return c, None, None
    return None, "utility", _utility_reason(c)


def _utility_reason(c: Candidate) -> str:
    problem = _first_problem(c)
    tail = (
        f", while {_describe_check(problem)}"
        if problem
        else " (its checks pass, but every smaller ε would lose more utility)"
    )
    return (
        f"the utility floor broke first: at ε = {c.epsilon:g} utility is {c.utility:.4f}, below the floor "
        f"{c.floor:.4f}{tail}"
    )


def _privacy_reason(c: Candidate) -> str:
    problem = _first_problem(c)
    what = _describe_check(problem) if problem else "a check does not pass"
    return f"no ε in the schedule passes the checks: even at the smallest, ε = {c.epsilon:g}, {what}"


# --------------------------------------------------------------------------- the search


def settings_for(policy: Policy, recipe: Recipe, n_train: int) -> DPSettings:
    """DP-SGD settings from the policy's ``remediation`` section and the recipe (clip 'auto' resolved later)."""
    rem = policy.remediation
    delta = 1.0 / (10.0 * n_train) if rem.delta == "auto" else float(rem.delta)
    clip = 1.0 if rem.max_grad_norm == "auto" else float(rem.max_grad_norm)
    return DPSettings(
        epochs=rem.epochs or recipe.epochs,
        batch_size=rem.batch_size or recipe.batch_size,
        max_grad_norm=clip,
        delta=delta,
        accountant=rem.accountant,
        max_physical_batch_size=rem.max_physical_batch_size,
    )


def check_can_remediate(policy: Policy, recipe: Recipe | None) -> None:
    """Bad input, found before anything is loaded: remediation not allowed, or no recipe."""
    if not policy.remediation.enabled:
        raise PolicyError(
            f"policy '{policy.name}': remediation is not enabled (set 'remediation: {{enabled: true}}' in a "
            f"copy of the policy to allow DP-SGD retraining)."
        )
    if recipe is None:
        raise RecipeError(
            "remediation retrains the model with DP-SGD and needs its training recipe (--recipe module:attr, "
            "or 'recipe' in the config)."
        )


def remediate(
    target: Target,
    data: AuditData,
    policy: Policy,
    recipe: Recipe | None,
    *,
    train: Dataset | None = None,
    original: Report | None = None,
    on_row: RowCallback | None = None,
    memo: dict[float, Candidate] | None = None,
    sweep: bool = False,
    options: RunOptions | None = None,
    **settings: Any,
) -> Outcome:
    """Audit ``target``; if it fails, search the policy's ε schedule for a DP-SGD model that passes.

    Args:
        target: the model under audit (never modified, never trained further).
        data: the audit data; utility is measured on its population, else its non-members.
        policy: the policy, with its ``utility`` and ``remediation`` sections.
        recipe: how the target was trained; DP-SGD retrains with its model
            factory and optimiser, from scratch or its public pre-trained start.
        train: the full training set (default: the audit's members).
        original: the original model's report, when already computed.
        on_row: called with each ε's row as soon as it is decided.
        memo: candidates by ε, reused instead of retraining (a benchmark
            comparing strategies on the same settings); filled as it goes.
        sweep: after the search, also train and audit every other ε of the
            schedule, for the full ε–utility–attack table. The choice and the
            ``trainings`` count (what the strategy needed) are unchanged.
        options: the run's settings (:class:`privgate.options.RunOptions`): its
            seed drives every training and every audit (same seed → same
            numbers); its thread budget holds DP training and the attacks;
            its artefacts folder gets the original model's attack files, each
            candidate's in a ``dp-eps-<ε>`` folder inside it.
        **settings: single settings of :class:`~privgate.options.RunOptions`
            (``seed=``, ``cache_dir=``, ``threads=`` …), applied on top of ``options``.

    The report's ``duration_s`` is the time of the whole run (the original
    audit, when computed here, and the search), counted once;
    ``remediation.seconds`` is the search alone.

    Returns:
        An :class:`Outcome` whose report carries the ``remediation`` section.

    Raises:
        PolicyError: the policy does not allow remediation.
        RecipeError: no recipe, or one Opacus cannot make private.
    """
    run = RunOptions.of(options, **settings).resolved()
    seed, say = run.seed, run.say
    check_can_remediate(policy, recipe)
    assert recipe is not None
    probe = train or data.members
    probe_private_training(recipe, probe.x, probe.y, seed)  # a model Opacus cannot train is bad input, before any audit
    t0 = time.perf_counter()
    earlier = original.duration_s if original is not None else 0.0  # audited before this call
    original = original or check_model(target, data, policy, recipe=recipe, options=run)
    clock = _Clock(t0, time.perf_counter(), earlier)
    held_out = utility_data(data)
    orig_utility, orig_ci = measure_utility(target, held_out, policy.confidence)
    floor, floor_rule = utility_floor(policy.utility, orig_utility)
    train = train or data.members
    rem = policy.remediation
    section: dict[str, Any] = {
        "strategy": rem.strategy,
        "schedule": list(rem.epsilons),
        "original": {
            "verdict": original.verdict,
            "utility": round(orig_utility, 6),
            "utility_ci": [round(v, 6) for v in orig_ci],
            "checks": [{"id": c.id, "value": c.value, "status": c.status} for c in original.checks],
        },
        "utility": {
            "metric": "accuracy",
            "data": held_out.source,
            "floor": None if floor is None else round(floor, 6),
            "rule": floor_rule,
        },
        "trainings": 0,
        "clip_search_trainings": 0,
        "chosen_epsilon": None,
        "rows": [],
    }
    if original.verdict == "pass":
        section.update(status="not_needed", reason="the original model passes the policy; nothing was retrained")
        return Outcome(_with_section(original, section, clock), "not_needed")
    if privacy_status(original.checks) == "pass":  # inconclusive only for reasons no retraining changes
        blocked = unresolvable(original.checks)
        section.update(
            status="cannot_help",
            reason="nothing fails; the inconclusive check(s) cannot be decided on this data whatever the model "
            f"({'; '.join(f'{c.id}: {c.reason}' for c in blocked)}), so retraining would not change the verdict",
        )
        return Outcome(_with_section(original, section, clock), "cannot_help")

    settings = settings_for(policy, recipe, len(train))
    clip_rows: list[dict[str, Any]] = []
    if rem.max_grad_norm == "auto":
        say("choosing the clip norm (noise-free runs at C = 10^k)")
        brief = max(1, math.ceil(settings.epochs / 3))
        where = {"device": run.device, "executor": executor_for(run), "threads": run.threads}  # Ray: C's in parallel
        with limit_threads(run.threads):
            clip, clip_rows = search_clip_norm(recipe, train.x, train.y, seed, settings, epochs=brief, **where)
        settings = settings.with_clip(clip)
    section["settings"] = {
        "epochs": settings.epochs,
        "batch_size": settings.batch_size,
        "max_grad_norm": settings.max_grad_norm,
        "max_grad_norm_mode": "auto" if rem.max_grad_norm == "auto" else "fixed",
        "clip_search": clip_rows,
        "delta": settings.delta,
        "delta_rule": "auto: 1/(10·N)" if rem.delta == "auto" else "policy",
        "accountant": settings.accountant,
        "max_physical_batch_size": settings.max_physical_batch_size,
        "n_train": len(train),
        "start": f"public pre-trained weights {recipe.pretrained}"
        if recipe.pretrained
        else "fresh initialisation (never the audited checkpoint)",
    }
    section["clip_search_trainings"] = len(clip_rows)
    candidates: list[Candidate] = []
    memo = {} if memo is None else memo
    searching = True

    def evaluate(i: int) -> Candidate:
        eps = float(rem.epsilons[i])
        if eps not in memo:
            label = f"DP-SGD ε={eps:g}"
            say(f"{label}: training (model {len(candidates) + 1})")
            with limit_threads(run.threads):
                model, record = train_dp(
                    recipe, train.x, train.y, seed, settings=settings, target_epsilon=eps, device=run.device
                )
            dp_recipe = DPRecipe.from_training(recipe, record, settings)
            dp_target = Target(model, source=f"<DP-SGD ε={eps:g}>", fmt="module", extra={"dp": record.to_dict()})
            artefacts = str(Path(run.artefacts_dir) / f"dp-eps-{eps:g}") if run.artefacts_dir else None
            report = check_model(
                dp_target,
                data,
                policy,
                recipe=dp_recipe,
                options=run.replace(artefacts_dir=artefacts, progress=lambda msg: say(f"{label}: {msg}")),
            )
            util, util_ci = measure_utility(dp_target, held_out, policy.confidence)
            memo[eps] = Candidate(eps, model, dp_recipe, record, report, util, util_ci, floor)
        cand = memo[eps]
        candidates.append(cand)
        row = {**cand.row(), "in_search": searching}
        section["rows"].append(row)
        if on_row:
            on_row(row)
        return cand

    chosen, broke, reason = _search(evaluate, len(rem.epsilons), rem.strategy)
    section["trainings"] = len(candidates)
    if sweep:
        searching = False
        for i, eps in enumerate(rem.epsilons):
            if all(c.epsilon != eps for c in candidates):
                evaluate(i)
    section["architecture_changes"] = candidates[0].training.architecture_changes if candidates else []
    section["rows"].sort(key=lambda r: -r["epsilon"])
    section["selection_leakage"] = SELECTION_STATEMENT.format(n=len(candidates), c=len(clip_rows))
    if chosen is None:
        section.update(status="no_epsilon", first_broken=broke, reason=reason)
        report = _with_section(original, section, clock)
        report = report.model_copy(update={"summary": f"{original.summary} — remediation: {reason}"})
        return Outcome(report, "no_epsilon", candidates=candidates)
    section.update(
        status="hardened",
        chosen_epsilon=chosen.epsilon,
        chosen={
            "epsilon": chosen.epsilon,
            "epsilon_spent": chosen.training.to_dict()["epsilon"],
            "utility": round(chosen.utility, 6),
            **{k: v for k, v in chosen.training.to_dict().items() if k not in ("target_epsilon", "epsilon")},
        },
        reason=(
            f"DP-SGD at ε = {chosen.epsilon:g} (δ = {settings.delta:.3g}) "
            + ("passes every check" if chosen.report.verdict == "pass" else "passes every check the data can resolve")
            + f" with utility {chosen.utility:.4f} (original {orig_utility:.4f}"
            + (f", floor {floor:.4f})" if floor is not None else ")")
        ),
    )
    summary = f"{chosen.report.summary} — hardened: {section['reason']}; {len(candidates)} training(s)"
    if rem.audit:
        from privgate.audits.dpsgd import audit_remediation

        say(f"auditing DP-SGD at ε = {chosen.epsilon:g} with gradient canaries (one more training)")
        section["audit"] = audit_remediation(
            recipe, train, settings, chosen.epsilon, rem.audit_canaries, policy.confidence, seed, run.threads
        )
        section["audit_summary"] = section["audit"]["summary"]
        summary += f"; {section['audit']['summary']}"
        if section["audit"]["verdict"] == "fail":  # the chosen ε is provably not delivered: hand out no model
            section.update(status="audit_failed", reason=section["audit"]["summary"])
            report = _with_section(chosen.report, section, clock).model_copy(
                update={"verdict": "fail", "summary": summary}
            )
            return Outcome(report, "audit_failed", candidates=candidates)
    report = _with_section(chosen.report, section, clock).model_copy(update={"summary": summary})
    return Outcome(report, "hardened", chosen.model, chosen.recipe, chosen, candidates)


@dataclass(frozen=True)
class _Clock:
    """When :func:`remediate` started, when its search started, and seconds spent auditing before it was called."""

    start: float
    search: float
    earlier: float


def _with_section(report: Report, section: dict[str, Any], clock: _Clock) -> Report:
    """``report`` with the remediation section; ``duration_s`` is the whole run, each audit counted once.

    ``report`` is the original's or the chosen candidate's, whose own
    ``duration_s`` is already inside the time measured here.
    """
    now = time.perf_counter()
    section["seconds"] = round(now - clock.search, 3)
    return report.model_copy(update={"remediation": section, "duration_s": round(clock.earlier + now - clock.start, 3)})


__all__ = [
    "Candidate",
    "Outcome",
    "SELECTION_STATEMENT",
    "UtilityData",
    "check_can_remediate",
    "measure_utility",
    "privacy_status",
    "remediate",
    "settings_for",
    "unresolvable",
    "utility_data",
    "utility_floor",
]
