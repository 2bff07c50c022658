"""``privgate fl audit``: attack a real federation's saved checkpoints (a manifest) as the simulation is attacked.

Every node's checkpoint of every round is loaded (TorchScript, or a
state_dict into the recipe's model), scores every node's training rows and the
shared non-members, and the same matrices, heatmaps and report come out. The
shared non-members must not repeat a training row of any node: one such row
would make every membership number about it wrong, so it is refused.
"""

from __future__ import annotations

import hashlib
import time
from datetime import datetime, timezone
from pathlib import Path

import networkx as nx
import numpy as np

from privgate import __version__
from privgate.audits.federated.attacks import Victims
from privgate.audits.federated.evaluate import evaluate, topology_result
from privgate.audits.federated.manifest import Manifest, ManifestError
from privgate.audits.federated.run import (
    Audited,
    FederationRun,
    Settings,
    Split,
    comparison_line,
    federation_environment,
)
from privgate.audits.federated.split import Distribution
from privgate.audits.federated.topology import Topology, parse_topology
from privgate.inputs.data import Dataset, load_dataset
from privgate.options import RunOptions
from privgate.report.jobs.federation import FederationReport


def _topology(m: Manifest, seed: int) -> Topology:
    n = len(m.spec.nodes)
    labels = tuple(m.names)
    if m.spec.edges is not None:
        g = nx.Graph()
        g.add_nodes_from(range(n))
        g.add_edges_from((a, b) for a, b in m.spec.edges)
        return Topology(
            m.spec.topology or "edges", "file" if not m.spec.topology else _kind(m.spec.topology), g, labels
        )
    if m.spec.topology:
        spec = m.spec.topology
        if (m.base / spec).exists():
            spec = str(m.base / spec)
        t = parse_topology(spec, n, seed)
        return Topology(t.name, t.kind, t.graph, labels)
    return Topology("unknown", "unknown", nx.empty_graph(n), labels)


def _kind(name: str) -> str:
    return name.split(":")[0] if name.split(":")[0] in ("fully", "star", "ring", "random", "none") else "file"


def _hashes(x: np.ndarray) -> np.ndarray:
    flat = np.ascontiguousarray(x.reshape(len(x), -1))
    return np.array([hashlib.sha1(r.tobytes()).hexdigest() for r in flat])


def _rows(m: Manifest) -> tuple[np.ndarray, np.ndarray, Split]:
    label = m.spec.label_column
    parts = [load_dataset(f.resolve(), f"node {n!r}'s data", label) for f, n in zip(m.data, m.names)]
    non = load_dataset(m.nonmembers.resolve(), "non-members", label)
    pop = load_dataset(m.population.resolve(), "population", label) if m.population else Dataset(non.x[:0], non.y[:0])
    widths = {p.x.shape[1:] for p in (*parts, non)}
    if len(widths) > 1:
        raise ManifestError(
            f"{m.path}: the nodes' data and the non-members have different row shapes {sorted(widths)}."
        )
    inside = set(np.concatenate([_hashes(p.x) for p in parts]).tolist())
    clash = int(sum(h in inside for h in _hashes(non.x)))
    if clash:
        raise ManifestError(
            f"{m.nonmembers}: {clash} non-member row(s) also appear in a node's training data; non-members must be "
            "rows no node trained on."
        )
    x = np.concatenate([p.x for p in parts] + [non.x, pop.x])
    y = np.concatenate([p.y for p in parts] + [non.y, pop.y])
    starts = np.cumsum([0] + [len(p) for p in parts])
    shards = [np.arange(starts[i], starts[i + 1]) for i in range(len(parts))]
    held = np.arange(starts[-1], starts[-1] + len(non))
    population = np.arange(held[-1] + 1 if len(held) else starts[-1], len(y))
    return x, y, Split(shards, held, population, Distribution("given"))


def audit_checkpoints(m: Manifest, settings: Settings | None = None, run: RunOptions | None = None) -> FederationRun:
    """Attack every node's checkpoint of every round on every node's data (module docstring)."""
    from privgate.inputs.entrypoints import load_recipe
    from privgate.inputs.target import Target

    settings = settings or Settings()
    run = run or RunOptions()
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    t0 = time.perf_counter()
    recipe = load_recipe(m.spec.recipe, [m.base, Path.cwd()]) if m.spec.recipe else None
    x, y, split = _rows(m)
    topo = _topology(m, run.seed)
    victims = Victims.build(y, split.shards, split.holdout, run.seed)
    scorer = None
    if settings.needs_references:
        if recipe is None:
            raise ManifestError(f"{m.path}: the reference attacks (rmia, lira) train models like a node: add 'recipe'.")
        from privgate.audits.federated.reference_attacks import reference_scorer

        scorer = reference_scorer(
            recipe, x, y, split.population, epochs=recipe.epochs, models=settings.reference_models, seed=run.seed,
            run=run,
        )  # fmt: skip

    def log_proba_of(r: int) -> np.ndarray:
        run.say(f"round {r + 1}/{m.rounds}: loading {len(m.names)} checkpoints…")
        return np.stack([Target.load(cp[r], recipe).log_proba(x) for cp in m.checkpoints])

    ev = evaluate(
        log_proba_of, m.rounds, y, victims, split.holdout, settings.attacks, scorer=scorer, fpr=settings.fpr,
        confidence=settings.confidence, every_round=settings.every_round,
    )  # fmt: skip
    notes = list(scorer.notes) if scorer is not None else []
    result = topology_result(
        topo, "given", split.shards, y, int(y.max()) + 1, victims, ev, settings.confidence, notes=notes,
        training={"manifest": str(m.path), "recipe": m.spec.recipe},
    )  # fmt: skip
    report = FederationReport(
        privgate_version=__version__,
        job="fl-audit",
        kind="audit",
        source={"manifest": str(m.path), "name": m.spec.name, "rows": len(y), "holdout": len(split.holdout)},
        target={"path": str(m.path), "format": "federation", "name": m.spec.name, "nodes": len(m.names)},
        attacks=list(settings.attacks),
        fpr=settings.fpr,
        confidence=settings.confidence,
        topologies=[result],
        summary=comparison_line([result]),
        environment=federation_environment(run),
        started=started,
        duration_s=round(time.perf_counter() - t0, 3),
    )
    return FederationRun(report, [Audited(topo, ev, victims, result)], split, Dataset(x, y, str(m.path)))


__all__ = ["audit_checkpoints"]
