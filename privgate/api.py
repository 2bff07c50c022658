"""The one entry: one function per job, each taking a typed settings object and the run's options.

:func:`check`, :func:`harden`, :func:`audit_ldp`, :func:`audit_dpsgd`, :func:`audit_federation` and
:func:`simulate_federation` take their settings (:mod:`privgate.settings`) and one
:class:`~privgate.options.RunOptions`, and return a report of the one family
(:class:`~privgate.report.model.BaseReport`). Inputs are validated at the door (:mod:`privgate.inputs.door`);
nothing is written — files a job produces come back for the caller to write. The CLI, the pytest plugin and
the action only adapt to these functions. Nothing below this module calls back up into it. The job table
and the rest: docs/internals-core.md.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from privgate.inputs import door
from privgate.inputs.coerce import as_dataset, as_recipe
from privgate.inputs.data import Dataset
from privgate.options import RunOptions
from privgate.policy import Policy, as_policy
from privgate.report.model import Report
from privgate.settings import (
    CheckSettings,
    DataLike,
    DpsgdAuditSettings,
    FederationAuditSettings,
    HardenSettings,
    LdpAuditSettings,
    SimulationSettings,
)


def _split(
    cls: type, first: Any, positional: tuple[Any, ...], options: RunOptions | None, kw: dict[str, Any]
) -> tuple[Any, RunOptions]:
    """Settings of ``cls`` and the run's options from ``check``/``harden``'s arguments (module docstring)."""
    names = {f.name for f in dataclasses.fields(cls)}
    mine = {k: kw.pop(k) for k in list(kw) if k in names}
    if isinstance(first, cls):
        if any(v is not None for v in positional):
            raise TypeError(f"{cls.__name__} given: pass the policy and data inside it, not beside it")
        settings = dataclasses.replace(first, **mine) if mine else first
    else:
        policy, members, nonmembers = positional
        if policy is None or members is None or nonmembers is None:
            raise TypeError("check/harden need a model, a policy, members and non-members")
        settings = cls(model=first, policy=policy, members=members, nonmembers=nonmembers, **mine)
    run = RunOptions.of(options, **kw)
    # 'cuda' (or --devices, which means it) on a machine without one, or --devices naming a GPU it lacks: exit 2
    # before loading; 'auto' is resolved once the inputs are loaded (resolving imports torch, and a run refused on
    # its policy or data need not)
    return settings, run.resolved() if run.device == "cuda" or run.devices is not None else run


def load_inputs(settings: CheckSettings, seed: int = 0) -> door.Inputs:
    """The inputs of a check: its policy loaded first (a bad one refused before anything else is read), then the
    model, data and recipe at the door (:func:`privgate.inputs.door.load_inputs`)."""
    return door.load_inputs(dataclasses.replace(settings, policy=as_policy(settings.policy)), seed)


def check(
    settings: CheckSettings | Any,
    policy: Policy | str | Path | None = None,
    members: DataLike = None,
    nonmembers: DataLike = None,
    *,
    options: RunOptions | None = None,
    **kw: Any,
) -> Report:
    """Audit a model against a policy on known members and non-members.

    Args:
        settings: a :class:`~privgate.settings.CheckSettings`, or the model (a path, an
            ``nn.Module`` returning logits, a scikit-learn classifier or a :class:`Target`)
            followed by ``policy``, ``members`` and ``nonmembers``.
        policy: a :class:`Policy`, a built-in name or a policy file.
        members: the training examples, as ``(x, y)``, a file or ``module:function``.
        nonmembers: same-distribution examples the model never saw.
        options: how the run is carried out (:class:`~privgate.options.RunOptions`).
        **kw: fields of :class:`CheckSettings` (``population=``, ``recipe=``, ``trust_checkpoint=`` …)
            and of :class:`RunOptions` (``seed=``, ``threads=``, ``cache_dir=``, ``device=`` …).

    Returns:
        The decided :class:`Report`; ``report.verdict`` is ``pass``, ``fail`` or ``inconclusive``.
    """
    s, run = _split(CheckSettings, settings, (policy, members, nonmembers), options, kw)
    i = load_inputs(s, run.seed)  # the kind of model decided once, at the door (privgate.inputs.door)
    from privgate.gate import check_model  # scipy, scikit-learn: bad input exits 2 without them

    return check_model(i.target, i.data, i.policy, recipe=i.recipe, options=run, budget_s=s.budget_s)  # auto: decided


def plan(
    policy: Policy | str | Path,
    members: DataLike,
    nonmembers: DataLike,
    *,
    share: float = 0.0,
    label_column: str = "label",
    base: Path | None = None,
) -> Any:
    """How many members and non-members decide each check of ``policy``, before any model is audited.

    Reads the audit data as :func:`check` does (an unbalanced set is sub-sampled as the audit would), and sizes
    every check at its Bonferroni-split confidence (:func:`privgate.planning.plan`) for a model ``share`` of the
    way from leaking nothing (0) to the threshold. Returns a :class:`privgate.planning.Planned` (exit 3 when
    the data cannot decide a check).
    """
    from privgate.errors import PrivgateError
    from privgate.inputs.data import AuditData
    from privgate.planning import Planned
    from privgate.planning import plan as plan_checks

    if not (0.0 <= share < 1.0):
        raise PrivgateError(f"share {share:g}: the assumed value is a share of the way to the threshold, in [0, 1).")
    pol = as_policy(policy)
    data = AuditData(
        as_dataset(members, "members", label_column, base), as_dataset(nonmembers, "non-members", label_column, base)
    )
    m, n = len(data.members), len(data.nonmembers)
    return Planned(pol.name, m, n, share, plan_checks(pol, m, n, share=share))


def write_records(report: Report, path: str | Path) -> Report:
    """Write every audited row's membership scores of ``report`` (from :func:`check`) to ``path``, atomically.

    ``path`` ends in ``.csv`` or ``.parquet`` (pyarrow); the columns are described in
    :mod:`privgate.report.records`. Returns the report referencing the file (``report.records``: path, rows,
    columns), for a JSON report written after it; the scores themselves are also ``report.records_table()``.
    """
    from privgate.io.atomic import write_atomic
    from privgate.report.records import attach

    referenced, data = attach(report, path, flag="records path")
    write_atomic(path, data)
    return referenced


@dataclass
class Hardening:
    """What :func:`harden` decided.

    Attributes:
        report: the report (``job: harden``): the original audit's checks, and its
            ``remediation`` section; when hardened, ``target`` describes the hardened model.
        status: ``not_needed``, ``cannot_help``, ``hardened``, ``no_epsilon`` (``no_setting`` for a capacity
            search), ``budget_exceeded`` or ``audit_failed``.
        model: the hardened model (``None`` unless hardened): an ``nn.Module``, a language model, or the fitted
            scikit-learn estimator of a capacity search.
        files: the hardened model's files to write, ``{path: (what, bytes)}`` (empty unless hardened).
    """

    report: Report
    status: str
    model: Any = None
    files: dict[Path, tuple[str, bytes]] = field(default_factory=dict)

    @property
    def exit_code(self) -> int:
        return self.report.exit_code


def harden(
    settings: HardenSettings | Any,
    policy: Policy | str | Path | None = None,
    members: DataLike = None,
    nonmembers: DataLike = None,
    *,
    options: RunOptions | None = None,
    **kw: Any,
) -> Hardening:
    """Audit a model; if it fails, retrain it from scratch with DP-SGD at decreasing ε until the policy passes.

    Same arguments as :func:`check` (with :class:`HardenSettings`); the recipe is
    required (it is how the model is retrained) and the policy must allow
    remediation — both checked before the model and data are loaded. A
    scikit-learn model without a recipe has no DP-SGD to run: its own capacity
    settings are searched instead, with no DP guarantee (:mod:`privgate.dp.capacity_task`). The input
    checkpoint is only read and nothing is written: the hardened model's files
    come back in :attr:`Hardening.files` for the caller to write together with
    its reports, after checking their paths (:mod:`privgate.io.guards`).
    """
    s, run = _split(HardenSettings, settings, (policy, members, nonmembers), options, kw)
    s = dataclasses.replace(s, policy=as_policy(s.policy))  # a bad policy: refused before torch is imported
    from privgate.dp.remediate import search
    from privgate.dp.task import task_class

    task = task_class(s.model, s.recipe).open(s, run)  # by the kind of model; its bad input refused before any work
    outcome = search(task, on_row=s.on_row, options=run)  # auto: decided on the inputs
    report = outcome.report.model_copy(update={"job": "harden"})
    files: dict[Path, tuple[str, bytes]] = {}
    if outcome.status == "hardened" and outcome.candidate is not None and report.remediation is not None:
        report, files = task.files(report, outcome.candidate)
    return Hardening(report, outcome.status, outcome.model, files)


def _entry(value: Any, dirs: tuple[Path, ...], load: Callable[[str, list[Path]], Any]) -> tuple[Any, str | None]:
    """A user function given as ``module:function`` (imported from the project) or as the function itself."""
    if value is None or callable(value):
        return value, None if value is None else getattr(value, "__name__", None)
    return load(str(value), list(dirs) or [Path.cwd()]), str(value)


def _data(value: DataLike | None, role: str, label_column: str, dirs: tuple[Path, ...]) -> Dataset | None:
    return None if value is None else as_dataset(value, role, label_column, (list(dirs) or [Path.cwd()])[0])


def audit_ldp(settings: LdpAuditSettings, options: RunOptions | None = None) -> Any:
    """Play Matsumoto et al.'s (2022, arXiv 2206.09122) adversaries against an LDP randomiser; bound its ε from below.

    Returns an :class:`~privgate.audits.report.LdpAuditReport` (``fail``: a lower bound, valid at the
    stated confidence, exceeds a claimed ε).
    """
    from privgate.audits.entry import load_mechanism
    from privgate.errors import PrivgateError
    from privgate.executors import executor_for

    run = RunOptions.of(options)
    if (settings.recipe is None) != (settings.data is None):
        raise PrivgateError(
            "recipe and data go together: θ_t is the recipe trained on the data (without both, the bundled digits "
            "model)."
        )
    mechanism, name = _entry(settings.mechanism, settings.search_dirs, load_mechanism)  # before torch loads
    from privgate.audits.ldp import LdpSettings
    from privgate.audits.ldp import audit_ldp as play
    from privgate.audits.ldp_names import ADVERSARIES, DISTINGUISHERS

    game = LdpSettings(
        epsilons=tuple(settings.epsilons),
        clip=settings.clip,
        trials=settings.trials,
        adversaries=tuple(settings.adversaries or ADVERSARIES),
        distinguishers=tuple(settings.distinguishers or DISTINGUISHERS),
        confidence=settings.confidence,
        seed=run.seed,
    )
    recipe = as_recipe(settings.recipe, list(settings.search_dirs))
    data = _data(settings.data, "data", settings.label_column, settings.search_dirs)
    runner = executor_for(run)  # a missing extra or a wrong address: bad input before any work
    return play(
        game, recipe=recipe, data=data, mechanism=mechanism, mechanism_name=name, progress=settings.on_trials,
        threads=run.threads, executor=runner,
    )  # fmt: skip


def audit_dpsgd(settings: DpsgdAuditSettings, options: RunOptions | None = None) -> Any:
    """Train once with m canaries and bound the run's ε from below (Steinke, Nasr & Jagielski 2023, arXiv 2305.08846).

    White-box (gradient canaries inside privgate's DP-SGD) with ``recipe``, black-box (mislabelled
    input canaries) with the user's ``train``; with a language-model recipe (``.yaml``) and text ``data``,
    one DP fine-tune with text canaries (:func:`privgate.lm.oneaudit.audit_lm_recipe`).
    Returns a :class:`~privgate.audits.report.DpsgdAuditReport`.
    """
    from privgate.audits.entry import load_trainer
    from privgate.errors import PrivgateError

    run = RunOptions.of(options)
    if settings.recipe is not None and settings.train is not None:
        raise PrivgateError("give a recipe (privgate's DP-SGD, white-box) or a trainer (black-box), not both.")
    if settings.recipe is not None and settings.data is None:
        raise PrivgateError("a recipe needs data: the recipe's model must fit the data it trains on.")
    from privgate.inputs.lm_recipe import is_lm_recipe

    if is_lm_recipe(settings.recipe):  # a language model's DP fine-tune: text canaries (privgate.lm.oneaudit)
        return _audit_lm_dpsgd(settings, run)
    trainer, name = _entry(settings.train, settings.search_dirs, load_trainer)  # before torch loads
    from privgate.audits.dpsgd import DpsgdSettings
    from privgate.audits.dpsgd import audit_dpsgd as one_run

    claim = DpsgdSettings(
        epsilon=settings.epsilon, delta=settings.delta, canaries=settings.canaries, confidence=settings.confidence,
        seed=run.seed, clip=settings.clip,
    )  # fmt: skip
    return one_run(
        claim,
        recipe=as_recipe(settings.recipe, list(settings.search_dirs)),
        data=_data(settings.data, "data", settings.label_column, settings.search_dirs),
        train=trainer,
        train_name=name,
        threads=run.threads,
        progress=run.progress,
    )


def _audit_lm_dpsgd(settings: DpsgdAuditSettings, run: RunOptions) -> Any:
    from privgate.audits.dpsgd import DpsgdSettings
    from privgate.inputs.coerce import as_lm_recipe, resolved
    from privgate.lm.oneaudit import audit_lm_recipe

    dirs = tuple(settings.search_dirs) or (Path.cwd(),)
    claim = DpsgdSettings(
        epsilon=settings.epsilon, delta=settings.delta, canaries=settings.canaries, confidence=settings.confidence,
        seed=run.seed, clip=settings.clip,
    )  # fmt: skip
    recipe = as_lm_recipe(settings.recipe, dirs, required=True)
    return audit_lm_recipe(recipe, str(resolved(str(settings.data), dirs[0])), claim, run.resolved())


def _federated_attacks(attacks: tuple[str, ...] | None, policy: Policy | None) -> tuple[str, ...]:
    from privgate.audits.federated.decide import attacks_named
    from privgate.audits.federated.run import DEFAULT_ATTACKS

    names = list(attacks or DEFAULT_ATTACKS)
    if policy is not None:
        names += [a for a in attacks_named(policy) if a not in names]
    return tuple(names)


def audit_federation(settings: FederationAuditSettings, options: RunOptions | None = None) -> Any:
    """Attack a real federation's checkpoints (Gao 2024, University of Zurich) and, with a policy, decide it.

    Returns a :class:`~privgate.audits.federated.report.FederationReport` (``job: fl-audit``); with a
    policy, its federated checks are decided by :func:`privgate.audits.federated.decide.decide_report`.
    """
    from privgate.audits.federated.audit import audit_checkpoints
    from privgate.audits.federated.decide import decide_report, has_federated_checks
    from privgate.audits.federated.manifest import load_manifest
    from privgate.audits.federated.run import Settings
    from privgate.errors import PolicyError

    run = RunOptions.of(options)
    manifest = load_manifest(settings.manifest)
    policy = as_policy(settings.policy) if settings.policy is not None else None
    if policy is not None and not has_federated_checks(policy):
        raise PolicyError(
            f"{policy.source or policy.name}: policy '{policy.name}' has no federated check; `privgate fl audit` "
            "decides checks with a 'federated:' block (docs/policies.md)."
        )
    measured = Settings(
        attacks=_federated_attacks(settings.attacks, policy), fpr=settings.fpr, confidence=settings.confidence
    )
    result = audit_checkpoints(manifest, measured, run)
    if policy is None:
        return result.report
    return decide_report(result.report, policy, result.federations[0])


@dataclass
class Simulation:
    """What :func:`simulate_federation` produced: the report and, with ``save_dir``, the federation's files."""

    report: Any
    files: dict[Path, tuple[str, bytes]] = field(default_factory=dict)

    @property
    def exit_code(self) -> int:
        return self.report.exit_code


def simulate_federation(settings: SimulationSettings, options: RunOptions | None = None) -> Simulation:
    """Simulate a decentralised federation (Gao 2024, University of Zurich) and measure who infers whose data.

    Returns the :class:`Simulation`: its ``FederationReport`` (``job: fl-simulate``, measured, no
    verdict) and, when ``save_dir`` is set, every topology's rounds in the manifest layout as files to write.
    """
    from privgate.audits.federated.run import Settings, simulate
    from privgate.audits.federated.save import saved_federations

    run = RunOptions.of(options)
    measured = Settings(
        attacks=_federated_attacks(settings.attacks, None), fpr=settings.fpr, confidence=settings.confidence,
        reference_models=settings.reference_models,
    )  # fmt: skip
    dirs = list(settings.search_dirs)
    recipe = as_recipe(settings.recipe, dirs)
    data = _data(settings.data, "training data", settings.label_column, settings.search_dirs)
    source = {
        "recipe": settings.recipe if isinstance(settings.recipe, str) else getattr(recipe, "name", None),
        "data": settings.data if isinstance(settings.data, (str, Path)) else getattr(data, "source", None),
        "nodes": settings.nodes,
        "rounds": settings.rounds,
    }
    result = simulate(
        recipe, data, list(settings.topologies) or ["fully"], nodes=settings.nodes, rounds=settings.rounds,
        distribution=settings.distribution, local_epochs=settings.local_epochs, holdout_fraction=settings.holdout,
        population_fraction=settings.population, settings=measured, run=run,
        source={k: str(v) if isinstance(v, Path) else v for k, v in source.items()},
    )  # fmt: skip
    files: dict[Path, tuple[str, bytes]] = {}
    if settings.save_dir is not None:
        spec = settings.recipe if isinstance(settings.recipe, str) else str(source["recipe"])
        files = saved_federations(result, Path(settings.save_dir), spec)
    return Simulation(result.report, files)


__all__ = [
    "CheckSettings",
    "DpsgdAuditSettings",
    "FederationAuditSettings",
    "HardenSettings",
    "Hardening",
    "LdpAuditSettings",
    "Simulation",
    "SimulationSettings",
    "audit_dpsgd",
    "audit_federation",
    "audit_ldp",
    "check",
    "harden",
    "plan",
    "simulate_federation",
    "write_records",
]
