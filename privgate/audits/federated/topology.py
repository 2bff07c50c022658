"""Who aggregates with whom: the federation's graph (networkx) and its FedAvg mixing matrix.

Topologies of decentralised FL (Beltrán et al. 2023, arXiv 2211.08413), those Gao's (2024, University of
Zurich) audit compares: ``fully``, ``star`` (node 0 the hub), ``ring``, ``random:P`` (Erdős–Rényi from the
seed), ``none`` (local only) or a graph file (``.edgelist``/``.txt``, ``.graphml``, ``.gml``, node-link
``.json``). Node i averages its closed neighbourhood weighted by rows (FedAvg per node, McMahan et al. 2017,
arXiv 1602.05629): θ_i ← Σ_{j ∈ N[i]} W_ij θ_j, W_ij = n_j / Σ_{k ∈ N[i]} n_k; W is row-stochastic, so
aggregation is ``W @ Θ``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import networkx as nx
import numpy as np

from privgate.errors import PrivgateError, shown

#: The named topologies (besides ``random:P`` and graph files).
NAMED = ("fully", "star", "ring", "none")
GRAPH_SUFFIXES = (".edgelist", ".txt", ".graphml", ".gml", ".json")


class TopologyError(PrivgateError):
    """A topology that cannot be built: a bad name, probability or graph file."""


@dataclass(frozen=True)
class Topology:
    """A federation's graph on nodes ``0 … N − 1``.

    Attributes:
        name: as given (``ring``, ``random:0.3``, a file's path).
        kind: ``fully``, ``star``, ``ring``, ``random``, ``none`` or ``file``.
        graph: the undirected networkx graph (no self-loops).
        labels: each node's name (a graph file's own node names; else ``"0"`` … ``"N-1"``).
    """

    name: str
    kind: str
    graph: nx.Graph
    labels: tuple[str, ...]

    @property
    def n(self) -> int:
        return self.graph.number_of_nodes()

    @property
    def edges(self) -> list[list[int]]:
        """Edges as sorted ``[a, b]`` pairs, a < b."""
        return sorted([min(a, b), max(a, b)] for a, b in self.graph.edges())

    def neighbours(self, i: int) -> list[int]:
        return sorted(self.graph.neighbors(i))

    def hops(self) -> np.ndarray:
        """``[N, N]`` shortest-path lengths (0 on the diagonal, −1 between disconnected nodes)."""
        d = np.full((self.n, self.n), -1, dtype=int)
        for i, lengths in nx.all_pairs_shortest_path_length(self.graph):
            for j, k in lengths.items():
                d[i, j] = k
        return d

    def hub(self) -> int | None:
        """The hub of a star (node 0), else None."""
        return 0 if self.kind == "star" else None

    def describe(self) -> dict[str, Any]:
        degrees = [d for _, d in self.graph.degree()]
        return {
            "name": self.name,
            "kind": self.kind,
            "nodes": self.n,
            "labels": list(self.labels),
            "edges": self.edges,
            "connected": bool(self.n <= 1 or nx.is_connected(self.graph)),
            "mean_degree": float(np.mean(degrees)) if degrees else 0.0,
        }


def mixing_matrix(topology: Topology, sizes: np.ndarray | list[int]) -> np.ndarray:
    """FedAvg's row-stochastic ``[N, N]`` matrix: ``W_ij = n_j / Σ_{k ∈ N[i]} n_k`` on the closed neighbourhood."""
    n = np.asarray(sizes, dtype=float)
    if len(n) != topology.n:
        raise ValueError(f"{len(n)} sample counts for {topology.n} nodes")
    adj = nx.to_numpy_array(topology.graph, nodelist=range(topology.n), weight=None) > 0
    adj |= np.eye(topology.n, dtype=bool)
    w = np.where(adj, n[None, :], 0.0)
    return w / w.sum(axis=1, keepdims=True)


def _probability(text: str, spec: str) -> float:
    try:
        p = float(text)
    except ValueError:
        p = math.nan
    if not 0.0 <= p <= 1.0:
        raise TopologyError(f"topology {shown(spec)}: random:P needs an edge probability P between 0 and 1.")
    return p


def _read_graph(path: Path) -> nx.Graph:
    suffix = path.suffix.lower()
    try:
        if suffix in (".edgelist", ".txt"):
            return nx.read_edgelist(path, comments="#", data=False)
        if suffix == ".graphml":
            return nx.read_graphml(path)
        if suffix == ".gml":
            return nx.read_gml(path, label="id")
        import json

        return nx.node_link_graph(json.loads(path.read_text(encoding="utf-8")), edges="links")
    except (OSError, UnicodeDecodeError) as exc:
        raise TopologyError(f"{path}: cannot read the graph file ({exc.__class__.__name__}).") from None
    except Exception as exc:  # networkx raises many types for malformed files
        first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else exc.__class__.__name__
        raise TopologyError(f"{path}: not a readable graph file ({first}).") from None


def _natural(label: Any) -> tuple[int, Any]:
    text = str(label)
    return (0, int(text)) if text.lstrip("-").isdigit() else (1, text)


def from_file(path: str | Path, n: int | None = None) -> Topology:
    """A topology read from a graph file; its nodes, sorted (numbers numerically), become nodes 0 … N − 1."""
    p = Path(path)
    if not p.is_file():
        raise TopologyError(f"{p}: graph file not found.")
    if p.suffix.lower() not in GRAPH_SUFFIXES:
        raise TopologyError(f"{p}: unsupported graph file '{p.suffix}' (use {', '.join(GRAPH_SUFFIXES)}).")
    g = _read_graph(p)
    if g.is_directed():
        g = g.to_undirected()
    labels = sorted(g.nodes(), key=_natural)
    if not labels:
        raise TopologyError(f"{p}: the graph has no nodes.")
    if n is not None and len(labels) != n:
        raise TopologyError(f"{p}: the graph has {len(labels)} nodes but the federation has {n}.")
    index = {label: i for i, label in enumerate(labels)}
    graph = nx.Graph()
    graph.add_nodes_from(range(len(labels)))
    graph.add_edges_from((index[a], index[b]) for a, b in g.edges() if a != b)
    return Topology(str(p), "file", graph, tuple(str(label) for label in labels))


def parse_topology(spec: str, n: int, seed: int = 0) -> Topology:
    """Build the topology named by ``spec`` on ``n`` nodes (see the module docstring)."""
    s = str(spec).strip()
    if n < 1:
        raise TopologyError(f"a federation needs at least one node, got {n}.")
    labels = tuple(str(i) for i in range(n))
    if s == "fully":
        g = nx.complete_graph(n)
    elif s == "star":
        g = nx.star_graph(n - 1) if n > 1 else nx.empty_graph(1)
    elif s == "ring":
        g = nx.cycle_graph(n) if n > 2 else nx.path_graph(n)
    elif s == "none":
        g = nx.empty_graph(n)
    elif s.startswith("random:"):
        p = _probability(s.split(":", 1)[1], s)
        rng = np.random.SeedSequence([int(seed), 0xE2D0]).generate_state(1)[0]
        g = nx.erdos_renyi_graph(n, p, seed=int(rng))
        return Topology(s, "random", g, labels)
    elif Path(s).suffix.lower() in GRAPH_SUFFIXES or Path(s).exists():
        return from_file(s, n)
    else:
        from privgate.inputs.suggest import did_you_mean

        raise TopologyError(
            f"unknown topology {shown(s)}{did_you_mean(s, NAMED)} (use fully, star, ring, random:P, none or a "
            f"graph file: {', '.join(GRAPH_SUFFIXES)})."
        )
    return Topology(s, s, g, labels)


__all__ = ["GRAPH_SUFFIXES", "NAMED", "Topology", "TopologyError", "from_file", "mixing_matrix", "parse_topology"]
