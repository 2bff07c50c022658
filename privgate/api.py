"""The public entry points: turn what a user has (paths, arrays, modules) into an audit.

``check`` is what the pytest plugin and library users call; ``audit_paths`` is
what the CLI calls. Both end in :func:`privgate.gate.audit`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from privgate.inputs.data import AuditData, Dataset, load_dataset
from privgate.errors import DataError
from privgate.gate import Progress, audit
from privgate.policy import Policy, load_policy
from privgate.inputs.entrypoints import load_recipe
from privgate.recipe import Recipe
from privgate.report.model import Report
from privgate.inputs.target import Target

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


def check(
    model: Any,
    policy: Policy | str | Path,
    members: DataLike,
    nonmembers: DataLike,
    *,
    population: DataLike | None = None,
    recipe: Recipe | str | None = None,
    seed: int = 0,
    trust_checkpoint: bool = False,
    cache_dir: str | None = None,
    progress: Progress | None = None,
    artefacts_dir: str | None = None,
    threads: int | None = None,
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
        artefacts_dir: where attacks save files for people to look at (inversion
            reconstructions); ``None`` saves nothing.
        threads: the most threads the attacks may use (torch, BLAS, OpenMP);
            default 1, see :mod:`privgate.training.threads`.

    Returns:
        The decided :class:`Report`; ``report.verdict`` is ``pass``, ``fail`` or ``inconclusive``.
    """
    pol = as_policy(policy)
    rec = as_recipe(recipe)
    target = as_target(model, rec, trust_checkpoint)
    data = AuditData(
        as_dataset(members, "members"),
        as_dataset(nonmembers, "non-members"),
        as_dataset(population, "population") if population is not None else None,
        seed=seed,
    )
    return audit(target, data, pol, recipe=rec, seed=seed, cache_dir=cache_dir, progress=progress, artefacts_dir=artefacts_dir, threads=threads)


@dataclass
class Inputs:
    """Everything an audit needs, loaded and validated at the door from the CLI's strings."""

    policy: Policy
    recipe: Recipe | None
    target: Target
    data: AuditData
    members: Dataset  # the whole member set (AuditData may sub-sample it to balance the audit)


def load_inputs(
    model: str,
    policy: str,
    members: str,
    nonmembers: str,
    *,
    population: str | None = None,
    recipe: str | None = None,
    seed: int = 0,
    label_column: str = "label",
    trust_checkpoint: bool = False,
    search_dirs: list[Path] | None = None,
) -> Inputs:
    """Load policy, recipe, model and audit data from paths and ``module:attr`` specs."""
    pol = load_policy(policy)
    rec = as_recipe(recipe, search_dirs)
    target = Target.load(model, recipe=rec, trust_checkpoint=trust_checkpoint)
    base = (search_dirs or [Path.cwd()])[0]
    train = load_dataset(members, "members", label_column, base)
    data = AuditData(
        train,
        load_dataset(nonmembers, "non-members", label_column, base),
        load_dataset(population, "population", label_column, base) if population else None,
        seed=seed,
    )
    return Inputs(pol, rec, target, data, train)


def audit_paths(
    model: str,
    policy: str,
    members: str,
    nonmembers: str,
    *,
    population: str | None = None,
    recipe: str | None = None,
    seed: int = 0,
    label_column: str = "label",
    trust_checkpoint: bool = False,
    cache_dir: str | None = None,
    search_dirs: list[Path] | None = None,
    progress: Progress | None = None,
    artefacts_dir: str | None = None,
    threads: int | None = None,
) -> Report:
    """The CLI's path: everything given as strings, loaded and validated at the door."""
    i = load_inputs(model, policy, members, nonmembers, population=population, recipe=recipe, seed=seed,
                    label_column=label_column, trust_checkpoint=trust_checkpoint, search_dirs=search_dirs)
    return audit(i.target, i.data, i.policy, recipe=i.recipe, seed=seed, cache_dir=cache_dir, progress=progress,
                 artefacts_dir=artefacts_dir, threads=threads)


__all__ = ["Inputs", "as_dataset", "as_policy", "as_recipe", "as_target", "audit_paths", "check", "load_inputs"]
