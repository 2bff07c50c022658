"""The one entry: one function per job, each taking a typed settings object and the run's options.

==========================  ===============================  ======================================
job                         settings (:mod:`privgate.settings`)  returns
==========================  ===============================  ======================================
:func:`check`               :class:`CheckSettings`           :class:`~privgate.report.model.Report`
:func:`harden`              :class:`HardenSettings`          :class:`Hardening` (report, model, files)
:func:`audit_ldp`           :class:`LdpAuditSettings`        ``LdpAuditReport``
:func:`audit_dpsgd`         :class:`DpsgdAuditSettings`      ``DpsgdAuditReport``
:func:`audit_federation`    :class:`FederationAuditSettings` ``FederationReport``
:func:`simulate_federation` :class:`SimulationSettings`      :class:`Simulation` (report, files)
==========================  ===============================  ======================================

Every report is of one family (:class:`~privgate.report.model.BaseReport`), so
every format writer serves every job. Inputs are loaded and validated here, at
the door (paths, ``module:attr`` specs or objects in memory); nothing is
written: files a job produces (a hardened model, a saved federation) come back
for the caller to write with its reports (:mod:`privgate.io.staging`). The CLI,
the pytest plugin and the action only adapt to these functions, and the same
settings and options give the same report through any of them. How a run is
carried out travels as one :class:`~privgate.options.RunOptions`; :func:`check`
and :func:`harden` also take a model, policy and data positionally and the
common settings by keyword (``seed=``, ``recipe=`` …), for library users.
Nothing below this module calls back up into it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from privgate.errors import DataError
from privgate.inputs.data import AuditData, Dataset, load_dataset
from privgate.inputs.entrypoints import load_recipe
from privgate.inputs.targets import check_model_path
from privgate.lm.loading import is_model_dir
from privgate.options import RunOptions
from privgate.policy import Policy, load_policy
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

if TYPE_CHECKING:  # torch comes with these: a run refused on its policy or data never imports it
    from privgate.inputs.target import Target
    from privgate.recipe import Recipe


def as_dataset(value: DataLike, role: str, label_column: str = "label", base: Path | None = None) -> Dataset:
    """A :class:`Dataset` from a Dataset, an ``(x, y)`` pair, a file path or a ``module:function``."""
    if isinstance(value, Dataset):
        return value
    if isinstance(value, (str, Path)):
        return load_dataset(value, role, label_column, base)
    if isinstance(value, (tuple, list)) and len(value) == 2:
        from privgate.inputs.data import _as_dataset

        return _as_dataset(value[0], value[1], f"<{role}>", role)
    raise DataError(f"{role}: expected (x, y), a Dataset, a file path or module:function, got {type(value).__name__}.")


def as_target(
    model: Any,
    recipe: Recipe | None = None,
    trust_checkpoint: bool = False,
    access: Any = None,
    trust_types: tuple[str, ...] = (),
) -> Target:
    """A :class:`Target` from a Target, a path or endpoint URL, an ``nn.Module``, a Booster or a fitted classifier.

    ``access`` (:class:`privgate.inputs.targets.endpoint.Access`) says how an endpoint URL is queried;
    ``trust_types``, which types a ``.skops`` file may name besides scikit-learn's, numpy's and scipy's.
    """
    import torch
    from torch import nn

    from privgate.inputs.target import Target

    if isinstance(model, Target):
        return model
    if isinstance(model, (str, Path)):
        return Target.load(model, recipe, trust_checkpoint, access, trust_types)
    if isinstance(model, (nn.Module, torch.jit.ScriptModule)):
        return Target(model, source=f"<{type(model).__name__}>", fmt="module")
    from privgate.inputs.targets import wrap_booster

    booster = wrap_booster(model)  # an xgboost/lightgbm Booster in memory
    if booster is not None:
        return Target(booster, booster.source, booster.fmt)
    from privgate.inputs.targets.sklearn import wrap_estimator  # a fitted scikit-learn classifier

    estimator = wrap_estimator(model, f"<{type(model).__name__}>")
    return Target(model if estimator is None else estimator, source=f"<{type(model).__name__}>", fmt="sklearn")


def as_policy(policy: Policy | str | Path) -> Policy:
    return policy if isinstance(policy, Policy) else load_policy(policy)


def as_recipe(recipe: Recipe | str | None, search_dirs: list[Path] | None = None) -> Recipe | None:
    from privgate.inputs.targets.sklearn import is_estimator
    from privgate.recipe import Recipe
    from privgate.sklearn_recipe import SklearnRecipe
    from privgate.tree_recipe import TreeRecipe

    if recipe is None or isinstance(recipe, (Recipe, TreeRecipe, SklearnRecipe)):
        return recipe
    if is_estimator(recipe) and not isinstance(recipe, type):  # an unfitted scikit-learn estimator in memory
        return SklearnRecipe(recipe, name=type(recipe).__name__)  # type: ignore[return-value]
    return load_recipe(recipe, search_dirs)


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
    # 'cuda' on a machine without one: exit 2 before loading; 'auto' is resolved once the inputs are
    # loaded (resolving imports torch, and a run refused on its policy or data need not)
    return settings, run.resolved() if run.device == "cuda" else run


@dataclass
class Inputs:
    """Everything a model audit needs, loaded and validated at the door."""

    policy: Policy
    recipe: Recipe | None
    target: Target
    data: AuditData
    members: Dataset  # the whole member set (AuditData may sub-sample it to balance the audit)


def load_inputs(settings: CheckSettings, seed: int = 0) -> Inputs:
    """Policy, recipe, model and audit data of ``settings``; bad input is one :class:`PrivgateError`."""
    dirs = list(settings.search_dirs)
    # the policy, the model's path and the data first: a run refused on them never imports torch
    pol = as_policy(settings.policy)
    if isinstance(settings.model, (str, Path)):
        check_model_path(settings.model, settings.trust_types)
    base = (dirs or [Path.cwd()])[0]

    def dataset(value: DataLike, role: str) -> Dataset:
        return as_dataset(value, role, settings.label_column, base)

    train = dataset(settings.members, "members")
    population = dataset(settings.population, "population") if settings.population is not None else None
    data = AuditData(train, dataset(settings.nonmembers, "non-members"), population, seed=seed)
    rec = as_recipe(settings.recipe, dirs)
    target = as_target(settings.model, rec, settings.trust_checkpoint, settings.access, settings.trust_types)
    return Inputs(pol, rec, target, data, train)


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
    if isinstance(s.model, (str, Path)) and is_model_dir(s.model):  # a Hugging Face directory: privgate.lm
        from privgate.lm.api import audit_text_paths

        return audit_text_paths(s, run)
    i = load_inputs(s, run.seed)
    from privgate.gate import check_model  # scipy, scikit-learn: bad input exits 2 without them

    return check_model(i.target, i.data, i.policy, recipe=i.recipe, options=run.resolved())


@dataclass
class Hardening:
    """What :func:`harden` decided.

    Attributes:
        report: the report (``job: harden``): the original audit's checks, and its
            ``remediation`` section; when hardened, ``target`` describes the hardened model.
        status: ``not_needed``, ``cannot_help``, ``hardened``, ``no_epsilon`` or ``audit_failed``.
        model: the hardened ``nn.Module`` (``None`` unless hardened).
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
    remediation — both checked before the model and data are loaded. The input
    checkpoint is only read and nothing is written: the hardened model's files
    come back in :attr:`Hardening.files` for the caller to write together with
    its reports, after checking their paths (:mod:`privgate.io.guards`).
    """
    s, run = _split(HardenSettings, settings, (policy, members, nonmembers), options, kw)
    if isinstance(s.model, (str, Path)) and is_model_dir(s.model):  # a language model: DP fine-tuning (privgate.lm)
        from privgate.lm.harden import harden_lm

        return harden_lm(s, run)
    pol, rec = as_policy(s.policy), as_recipe(s.recipe, list(s.search_dirs))
    from privgate.dp.hardened import default_output, hardened_files  # torch: after the policy is known good
    from privgate.dp.remediate import check_can_remediate, remediate

    check_can_remediate(pol, rec)  # an unusable remediation setup fails before the model and data are loaded
    i = load_inputs(dataclasses.replace(s, policy=pol, recipe=rec), run.seed)
    run = run.resolved()
    outcome = remediate(i.target, i.data, i.policy, i.recipe, train=i.members, on_row=s.on_row, options=run)
    report = outcome.report.model_copy(update={"job": "harden"})
    files: dict[Path, tuple[str, bytes]] = {}
    if outcome.status == "hardened" and outcome.model is not None and report.remediation is not None:
        from privgate.dp.card import model_card
        from privgate.dp.hardened import files_named

        given = s.model if isinstance(s.model, (str, Path)) else "model.pt"  # an in-memory model: a name to offer
        out = Path(s.output_model) if s.output_model else default_output(given)
        card = model_card(report.remediation, model_file=str(out), verdict=report.verdict, summary=report.summary)
        written_files, written = hardened_files(outcome.model, out, i.members.x, card)
        named = files_named(out)
        files = {path: (named[path], data) for path, data in written_files.items()}
        section = report.remediation.model_copy(update={"output": written, "input_sha256": i.target.sha256})
        described = {
            "path": written["torchscript"],
            "format": "torchscript",
            "sha256": written["torchscript_sha256"],
            "white_box": True,
            "parameters": sum(p.numel() for p in outcome.model.parameters()),
            "state_dict": written["state_dict"],
            "hardened_from": {"path": str(i.target.source), "sha256": i.target.sha256},
            "dp": outcome.candidate.training.to_dict() if outcome.candidate else {},
            **{k: report.target[k] for k in ("accuracy", "outputs") if k in report.target},  # the hardened model's own
        }
        report = report.model_copy(update={"remediation": section, "target": described})
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
    from privgate.lm.recipe import is_lm_recipe

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
    from privgate.lm.api import _resolve
    from privgate.lm.harden import _recipe
    from privgate.lm.oneaudit import audit_lm_recipe

    dirs = tuple(settings.search_dirs) or (Path.cwd(),)
    claim = DpsgdSettings(
        epsilon=settings.epsilon, delta=settings.delta, canaries=settings.canaries, confidence=settings.confidence,
        seed=run.seed, clip=settings.clip,
    )  # fmt: skip
    recipe = _recipe(settings.recipe, dirs)
    return audit_lm_recipe(recipe, str(_resolve(str(settings.data), dirs[0])), claim, run.resolved())


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
    "Inputs",
    "LdpAuditSettings",
    "Simulation",
    "SimulationSettings",
    "as_dataset",
    "as_policy",
    "as_recipe",
    "as_target",
    "audit_dpsgd",
    "audit_federation",
    "audit_ldp",
    "check",
    "harden",
    "load_inputs",
    "simulate_federation",
]
