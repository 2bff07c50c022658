"""The two federated audits end to end: simulate federations (``fl simulate``), or audit saved checkpoints.

:func:`simulate` splits one data set (seeded) into node shards, shared
held-out non-members and, for the reference attacks, the attacker's
population; trains the federation under every requested topology on the same
split (one task per topology, side by side on the Ray executor,
:mod:`privgate.executors`); attacks every round; and returns the report with every trajectory (to
save in the manifest layout, :mod:`privgate.audits.federated.manifest`).
:func:`audit` does the same from a manifest's checkpoints.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

import numpy as np

from privgate import __version__
from privgate.audits.federated.attacks import METRIC_ATTACKS, REFERENCE_ATTACKS, Victims
from privgate.audits.federated.evaluate import Evaluation, evaluate, topology_result
from privgate.audits.federated.simulate import Trajectory, node_log_proba, train_federation
from privgate.audits.federated.split import Distribution, SplitError, holdout, parse_distribution, shards
from privgate.audits.federated.topology import Topology, parse_topology
from privgate.errors import PrivgateError
from privgate.executors import executor_for
from privgate.inputs.data import Dataset
from privgate.options import RunOptions
from privgate.recipe import Recipe
from privgate.report.jobs.federation import FederationReport, TopologyResult

if TYPE_CHECKING:
    from privgate.audits.federated.reference_attacks import ReferenceScorer

#: Gao's (2024, University of Zurich) metric attacks run by default.
DEFAULT_ATTACKS: tuple[str, ...] = tuple(METRIC_ATTACKS)


@dataclass(frozen=True)
class Settings:
    """What the attacks measure: which attacks, the FPR of TPR@FPR, the confidence of the intervals."""

    attacks: tuple[str, ...] = DEFAULT_ATTACKS
    fpr: float = 0.01
    confidence: float = 0.95
    every_round: bool = True
    reference_models: int = 4

    def __post_init__(self) -> None:
        known = (*METRIC_ATTACKS, *REFERENCE_ATTACKS)
        bad = [a for a in self.attacks if a not in known]
        if bad or not self.attacks:
            raise PrivgateError(
                f"unknown federated attack {bad[0]!r} (use {', '.join(known)})" if bad else "no attack selected."
            )
        if not 0 < self.fpr < 1:
            raise PrivgateError(f"--fpr must be between 0 and 1, got {self.fpr:g}.")
        if not 0.5 < self.confidence < 1:
            raise PrivgateError(f"--confidence must be between 0.5 and 1, got {self.confidence:g}.")
        if self.reference_models < 2 or self.reference_models % 2:
            raise PrivgateError(f"--reference-models must be even and at least 2, got {self.reference_models}.")

    @property
    def needs_references(self) -> bool:
        return any(a in REFERENCE_ATTACKS for a in self.attacks)


@dataclass
class Split:
    """Who holds which rows (indices into the data set)."""

    shards: list[np.ndarray]
    holdout: np.ndarray
    population: np.ndarray
    distribution: Distribution


@dataclass
class Audited:
    """One topology's federation: its models, what the attacks found, and its report section."""

    topology: Topology
    evaluation: Evaluation
    victims: Victims
    result: TopologyResult
    trajectory: Trajectory | None = None


@dataclass
class FederationRun:
    """A whole run: the report and, per topology, what produced it."""

    report: FederationReport
    federations: list[Audited]
    split: Split | None = None
    data: Dataset | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def split_data(
    y: np.ndarray, nodes: int, distribution: str, holdout_fraction: float, population_fraction: float, seed: int
) -> Split:
    """Held-out non-members, the attacker's population (when > 0), then the node shards of the rest."""
    dist = parse_distribution(distribution)
    if not 0 < holdout_fraction < 1:
        raise SplitError(f"--holdout must be between 0 and 1, got {holdout_fraction:g}.")
    if not 0 <= population_fraction < 1:
        raise SplitError(f"--population must be between 0 and 1, got {population_fraction:g}.")
    fractions = (holdout_fraction, population_fraction) if population_fraction > 0 else (holdout_fraction,)
    parts = holdout(len(y), fractions, seed)
    train, held = parts[0], parts[1]
    population = parts[2] if len(parts) > 2 else np.zeros(0, dtype=np.int64)
    node_rows = [train[s] for s in shards(y[train], nodes, dist, seed)]
    return Split(node_rows, held, population, dist)


def federation_environment(run: RunOptions) -> dict[str, Any]:
    from privgate.report.provenance import environment

    return environment(run, libraries=("networkx",))


def _scorer(
    recipe: Recipe, x: np.ndarray, y: np.ndarray, split: Split, epochs: int, settings: Settings, run: RunOptions
):
    if not settings.needs_references:
        return None
    from privgate.audits.federated.reference_attacks import reference_scorer

    return reference_scorer(
        recipe, x, y, split.population, epochs=epochs, models=settings.reference_models, seed=run.seed, run=run
    )


def _population_fraction(settings: Settings, fraction: float | None, rounds: int, local_epochs: int) -> float:
    """The attacker's share of the rows (default: 0.2 with reference attacks, else none); refuses bad run sizes."""
    if fraction is None:
        fraction = 0.2 if settings.needs_references else 0.0
    if settings.needs_references and fraction <= 0:
        raise PrivgateError("the reference attacks (rmia, lira) need --population > 0 (the attacker's own rows).")
    if rounds < 1 or local_epochs < 1:
        raise PrivgateError("--rounds and --local-epochs must be at least 1.")
    return fraction


def _attack_topology(
    recipe: Recipe,
    data: Dataset,
    topo: Topology,
    traj: Trajectory,
    split: Split,
    victims: Victims,
    scorer: ReferenceScorer | None,
    settings: Settings,
    rounds: int,
    local_epochs: int,
) -> Audited:
    """Attack every node of one trained topology from every node, round by round, and summarise it."""
    x, y = data.x, data.y
    ev = evaluate(
        lambda r: node_log_proba(recipe, traj.states[r], x), rounds, y, victims, split.holdout,
        settings.attacks, scorer=scorer, fpr=settings.fpr, confidence=settings.confidence,
        every_round=settings.every_round,
    )  # fmt: skip
    training = {
        "engine": traj.mode, "kernel": traj.kernel, "seconds": round(traj.seconds, 3),
        "local_epochs": local_epochs, "recipe": recipe.name,
    }  # fmt: skip
    notes = list(traj.notes) + (list(scorer.notes) if scorer is not None else [])
    classes = int(y.max()) + 1
    result = topology_result(
        topo, split.distribution.name, split.shards, y, classes, victims, ev, settings.confidence,
        training=training, notes=notes,
    )  # fmt: skip
    result.seconds["training"] = round(traj.seconds, 3)
    return Audited(topo, ev, victims, result, traj)


def simulate(
    recipe: Recipe,
    data: Dataset,
    topologies: Sequence[str],
    *,
    nodes: int = 10,
    rounds: int = 10,
    distribution: str = "iid",
    local_epochs: int = 1,
    holdout_fraction: float = 0.3,
    population_fraction: float | None = None,
    settings: Settings | None = None,
    run: RunOptions | None = None,
    source: dict[str, Any] | None = None,
) -> FederationRun:
    """Simulate the federation under each topology on one seeded split and attack every round (module docstring)."""
    settings = settings or Settings()
    run = run or RunOptions()
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    t0 = time.perf_counter()
    population_fraction = _population_fraction(settings, population_fraction, rounds, local_epochs)
    topos = [parse_topology(t, nodes, run.seed) for t in topologies]
    x, y = data.x, data.y
    split = split_data(y, nodes, distribution, holdout_fraction, population_fraction, run.seed)
    victims = Victims.build(y, split.shards, split.holdout, run.seed)
    run.say("training reference models…" if settings.needs_references else "splitting…")
    scorer = _scorer(recipe, x, y, split, local_epochs * rounds, settings, run)
    trajectories = _train_topologies(recipe, x, y, split.shards, topos, rounds, local_epochs, run)
    fed: list[Audited] = []
    for topo, traj in zip(topos, trajectories):
        run.say(f"{topo.name}: attacking every node from every node…")
        fed.append(_attack_topology(recipe, data, topo, traj, split, victims, scorer, settings, rounds, local_epochs))
    report = FederationReport(
        privgate_version=__version__,
        job="fl-simulate",
        kind="simulation",
        target={
            "format": "simulated federation",
            "recipe": recipe.name,
            "data": data.source,
            "nodes": nodes,
            "rounds": rounds,
        },  # fmt: skip
        source={
            **(source or {}),
            "rows": len(y),
            "holdout": len(split.holdout),
            "population": len(split.population),
            "recipe": recipe.name,
        },  # fmt: skip
        attacks=list(settings.attacks),
        fpr=settings.fpr,
        confidence=settings.confidence,
        topologies=[f.result for f in fed],
        summary=comparison_line([f.result for f in fed]),
        environment=federation_environment(run),
        started=started,
        duration_s=round(time.perf_counter() - t0, 3),
    )
    return FederationRun(report, fed, split, data)


def _train_topologies(
    recipe: Recipe,
    x: np.ndarray,
    y: np.ndarray,
    shards: list[np.ndarray],
    topos: list[Topology],
    rounds: int,
    local_epochs: int,
    run: RunOptions,
) -> list[Trajectory]:
    """Every topology's federation trained on the run's executor, one task per topology: their trajectories."""
    executor = executor_for(run)
    run.say(f"{', '.join(t.name for t in topos)}: training {len(shards)} nodes × {rounds} rounds ({executor.name})…")
    tasks = [(recipe, x, y, shards, topo, rounds, local_epochs, run.seed, run.engine, run.threads) for topo in topos]
    return executor.map(_train_topology, tasks, threads=run.threads)


def _train_topology(
    recipe: Recipe,
    x: np.ndarray,
    y: np.ndarray,
    shards: list[np.ndarray],
    topo: Topology,
    rounds: int,
    local_epochs: int,
    seed: int,
    engine: str,
    threads: int | None,
) -> Trajectory:
    """One topology's federation, as one task (:mod:`privgate.executors`): the topologies train side by side."""
    return train_federation(
        recipe, x, y, shards, topo, rounds=rounds, local_epochs=local_epochs, seed=seed, engine=engine, threads=threads
    )


def comparison_line(results: Sequence[TopologyResult]) -> str:
    """One line comparing the topologies: final-round self / others AUC and accuracy."""
    parts = []
    for r in results:
        s = r.summary
        parts.append(
            f"{r.topology['name']}: self {_n(s.get('self'))}, others {_n(s.get('others'))}, "
            f"accuracy {_n(s.get('mean_accuracy_final'))}"
        )
    return "final-round AUC (best attack) — " + "; ".join(parts)


def _n(v: Any) -> str:
    return "n/a" if v is None else f"{v:.3f}"


__all__ = [
    "DEFAULT_ATTACKS",
    "Audited",
    "FederationRun",
    "Settings",
    "Split",
    "comparison_line",
    "simulate",
    "split_data",
]
