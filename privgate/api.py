"""The one entry: turn what a user has (paths, arrays, modules) into a run, and run it.

* :func:`check` — audit a model against a policy (library users, the pytest plugin);
* :func:`harden` — audit it and, if it fails, retrain it with DP-SGD until the policy passes;
* :func:`audit_paths` / :func:`harden_paths` — the same from the CLI's
  :class:`Sources` (paths and ``module:attr`` specs), loaded and validated at the door.

A run's settings travel as one :class:`~privgate.options.RunOptions`; the
public functions also take the common ones by keyword (``seed=``,
``threads=``, ``cache_dir=`` …). Nothing below this module calls back up into it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from privgate.errors import DataError
from privgate.inputs.data import AuditData, Dataset, load_dataset
from privgate.inputs.entrypoints import load_recipe
from privgate.inputs.target import Target
from privgate.options import Progress, RunOptions
from privgate.policy import Policy, load_policy
from privgate.recipe import Recipe
from privgate.report.model import Report

DataLike = Any  # Dataset | (x, y) | path | "module:function"


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


def as_target(model: Any, recipe: Recipe | None = None, trust_checkpoint: bool = False) -> Target:
    """A :class:`Target` from a Target, a path, an ``nn.Module`` or a fitted scikit-learn classifier."""
    import torch
    from torch import nn

    if isinstance(model, Target):
        return model
    if isinstance(model, (str, Path)):
        return Target.load(model, recipe=recipe, trust_checkpoint=trust_checkpoint)
    if isinstance(model, (nn.Module, torch.jit.ScriptModule)):
        return Target(model, source=f"<{type(model).__name__}>", fmt="module")
    return Target(model, source=f"<{type(model).__name__}>", fmt="sklearn")


def as_policy(policy: Policy | str | Path) -> Policy:
    return policy if isinstance(policy, Policy) else load_policy(policy)


def as_recipe(recipe: Recipe | str | None, search_dirs: list[Path] | None = None) -> Recipe | None:
    if recipe is None or isinstance(recipe, Recipe):
        return recipe
    return load_recipe(recipe, search_dirs)


def _run(
    options: RunOptions | None,
    seed: int | None,
    threads: int | None,
    cache_dir: str | None,
    progress: Progress | None,
    artefacts_dir: str | None,
    device: str | None = None,
    engine: str | None = None,
) -> RunOptions:
    return RunOptions.of(
        options,
        seed=seed,
        threads=threads,
        cache_dir=cache_dir,
        progress=progress,
        artefacts_dir=artefacts_dir,
        device=device,
        engine=engine,
    ).resolved()


def _audit_data(members: DataLike, nonmembers: DataLike, population: DataLike | None, seed: int) -> AuditData:
    return AuditData(
        as_dataset(members, "members"),
        as_dataset(nonmembers, "non-members"),
        as_dataset(population, "population") if population is not None else None,
        seed=seed,
    )


def check(
    model: Any,
    policy: Policy | str | Path,
    members: DataLike,
    nonmembers: DataLike,
    *,
    population: DataLike | None = None,
    recipe: Recipe | str | None = None,
    seed: int | None = None,
    trust_checkpoint: bool = False,
    cache_dir: str | None = None,
    progress: Progress | None = None,
    artefacts_dir: str | None = None,
    threads: int | None = None,
    device: str | None = None,
    engine: str | None = None,
    options: RunOptions | None = None,
) -> Report:
    """Audit ``model`` against ``policy`` on known ``members`` and ``nonmembers``.

    Args:
        model: a path, an ``nn.Module`` returning logits, a scikit-learn
            classifier or a :class:`Target`.
        policy: a :class:`Policy`, a built-in name or a policy file.
        members: the training examples, as ``(x, y)``, a file or ``module:function``.
        nonmembers: same-distribution examples the model never saw.
        population: optional extra same-distribution data.
        recipe: how the model was trained (``module:attr`` or a :class:`Recipe`).
        seed: drives every random choice; same inputs and seed give the same numbers.
        cache_dir: the reference-model cache (default ``.privgate-cache``; ``"off"``: none).
        artefacts_dir: where attacks save files for people to look at (inversion
            reconstructions); ``None`` saves nothing.
        threads: the most threads the attacks may use (torch, BLAS, OpenMP);
            default 1, see :mod:`privgate.training.threads`.
        device: ``auto`` (default: a CUDA GPU when torch sees one), ``cpu`` or
            ``cuda`` (:mod:`privgate.device`).
        engine: how reference models train: ``auto``, ``vectorised`` or
            ``sequential`` (:mod:`privgate.training.engine`).
        options: all the run's settings at once; the keywords above override it.

    Returns:
        The decided :class:`Report`; ``report.verdict`` is ``pass``, ``fail`` or ``inconclusive``.
    """
    run = _run(options, seed, threads, cache_dir, progress, artefacts_dir, device, engine)
    pol = as_policy(policy)
    rec = as_recipe(recipe)
    target = as_target(model, rec, trust_checkpoint)
    from privgate.gate import audit  # scipy, scikit-learn: after the inputs are validated

    return audit(target, _audit_data(members, nonmembers, population, run.seed), pol, recipe=rec, options=run)


def harden(
    model: Any,
    policy: Policy | str | Path,
    members: DataLike,
    nonmembers: DataLike,
    *,
    recipe: Recipe | str,
    population: DataLike | None = None,
    seed: int | None = None,
    trust_checkpoint: bool = False,
    cache_dir: str | None = None,
    progress: Progress | None = None,
    artefacts_dir: str | None = None,
    threads: int | None = None,
    device: str | None = None,
    engine: str | None = None,
    options: RunOptions | None = None,
) -> Any:
    """Audit ``model``; if it fails, retrain it from scratch with DP-SGD at decreasing ε until the policy passes.

    Same arguments as :func:`check`; the recipe is required (it is how the
    model is retrained) and the policy must allow remediation. Returns a
    :class:`privgate.dp.remediate.Outcome`: ``outcome.report`` (with its
    ``remediation`` section), ``outcome.status`` (``not_needed``,
    ``cannot_help``, ``hardened`` or ``no_epsilon``) and, when hardened,
    ``outcome.model`` — nothing is written to disk.
    """
    from privgate.dp.remediate import check_can_remediate, remediate

    run = _run(options, seed, threads, cache_dir, progress, artefacts_dir, device, engine)
    pol = as_policy(policy)
    rec = as_recipe(recipe)
    check_can_remediate(pol, rec)
    target = as_target(model, rec, trust_checkpoint)
    return remediate(target, _audit_data(members, nonmembers, population, run.seed), pol, rec, options=run)


@dataclass
class Inputs:
    """Everything an audit needs, loaded and validated at the door."""

    policy: Policy
    recipe: Recipe | None
    target: Target
    data: AuditData
    members: Dataset  # the whole member set (AuditData may sub-sample it to balance the audit)


@dataclass(frozen=True)
class Sources:
    """Where a run's inputs come from, as the CLI and the config file give them (paths and ``module:attr`` specs).

    Attributes:
        model: the checkpoint file.
        policy: a built-in policy name or a policy file.
        members, nonmembers: the audit data (``.npz``, ``.pt``, ``.csv`` or ``module:function``).
        population: optional extra same-distribution data.
        recipe: ``module:attr`` of the training recipe (or a :class:`Recipe`).
        label_column: the label column of CSV data.
        trust_checkpoint: allow pickled checkpoints (loading them runs code).
        search_dirs: folders ``module:attr`` specs and relative data paths are looked up in (first: the base).
    """

    model: str
    policy: str | Policy
    members: str
    nonmembers: str
    population: str | None = None
    recipe: str | Recipe | None = None
    label_column: str = "label"
    trust_checkpoint: bool = False
    search_dirs: tuple[Path, ...] = ()

    def load(self, seed: int = 0) -> Inputs:
        """Load policy, recipe, model and audit data; bad input is one :class:`~privgate.errors.PrivgateError`."""
        dirs = list(self.search_dirs)
        pol = as_policy(self.policy)
        rec = as_recipe(self.recipe, dirs)
        target = Target.load(self.model, recipe=rec, trust_checkpoint=self.trust_checkpoint)
        base = (dirs or [Path.cwd()])[0]
        train = load_dataset(self.members, "members", self.label_column, base)
        data = AuditData(
            train,
            load_dataset(self.nonmembers, "non-members", self.label_column, base),
            load_dataset(self.population, "population", self.label_column, base) if self.population else None,
            seed=seed,
        )
        return Inputs(pol, rec, target, data, train)


def audit_paths(sources: Sources, options: RunOptions | None = None, **settings: Any) -> Report:
    """The CLI's path: inputs given as paths and specs, loaded and validated at the door, then audited.

    ``options`` (and single settings by keyword, as :func:`privgate.gate.audit`)
    say how the run is carried out.
    """
    run = RunOptions.of(options, **settings).resolved()  # a device that does not exist: exit 2 before loading
    i = sources.load(run.seed)
    from privgate.gate import audit  # scipy, scikit-learn: bad input exits 2 without them

    return audit(i.target, i.data, i.policy, recipe=i.recipe, options=run)


@dataclass
class Hardening:
    """What :func:`harden_paths` decided: the report, and the hardened model's files to write (none unless hardened)."""

    report: Report
    files: dict[Path, bytes] = field(default_factory=dict)


def harden_paths(
    sources: Sources,
    options: RunOptions | None = None,
    *,
    output_model: str | None = None,
    on_row: Any = None,
    **settings: Any,
) -> Hardening:
    """``privgate check --remediate`` / ``privgate harden``: :func:`audit_paths`, then DP-SGD when the model fails.

    ``output_model`` is where the hardened model would go (default
    ``<model>.hardened.pt`` next to the input; never the input itself);
    ``on_row`` gets each ε's row as it is decided. The policy and the recipe
    are checked before anything else is loaded. The input checkpoint is only
    read, and nothing is written: the hardened model's files come back in
    :attr:`Hardening.files` for the caller to write together with its reports
    (:mod:`privgate.io.staging`), after checking their paths (:mod:`privgate.io.guards`).
    """
    from privgate.dp.hardened import default_output, hardened_files
    from privgate.dp.remediate import check_can_remediate, remediate

    run = RunOptions.of(options, **settings).resolved()
    pol, rec = as_policy(sources.policy), as_recipe(sources.recipe, list(sources.search_dirs))
    check_can_remediate(pol, rec)  # an unusable remediation setup fails before the model and data are loaded
    out = Path(output_model) if output_model else default_output(sources.model)
    i = dataclasses.replace(sources, policy=pol, recipe=rec).load(run.seed)
    outcome = remediate(i.target, i.data, i.policy, i.recipe, train=i.members, on_row=on_row, options=run)
    report = outcome.report
    files: dict[Path, bytes] = {}
    if outcome.status == "hardened" and outcome.model is not None:
        files, written = hardened_files(outcome.model, out, i.members.x)
        section = dict(report.remediation or {})
        section["output"] = written
        section["input_sha256"] = i.target.sha256
        described = {
            "path": written["torchscript"],
            "format": "torchscript",
            "sha256": written["torchscript_sha256"],
            "white_box": True,
            "parameters": sum(p.numel() for p in outcome.model.parameters()),
            "state_dict": written["state_dict"],
            "hardened_from": {"path": str(sources.model), "sha256": i.target.sha256},
            "dp": outcome.candidate.training.to_dict() if outcome.candidate else {},
            **{k: report.target[k] for k in ("accuracy", "outputs") if k in report.target},  # the hardened model's own
        }
        report = report.model_copy(update={"remediation": section, "target": described})
    return Hardening(report, files)


__all__ = [
    "Hardening",
    "Inputs",
    "as_dataset",
    "as_policy",
    "as_recipe",
    "as_target",
    "audit_paths",
    "check",
    "harden",
    "harden_paths",
    "Sources",
]
