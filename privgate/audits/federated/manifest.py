"""A real federation's checkpoints: ``federation.yaml``, validated at the door with file/line errors.

The manifest names the recipe, the topology (or ``edges``), the shared non-members and each node's data and
checkpoints (a list, or a ``{round}``/``{node}`` pattern with ``rounds: R`` checked by :func:`check_pattern`,
at most :data:`MAX_ROUNDS` rounds and :data:`MAX_CHECKPOINTS` checkpoints); paths are relative to its folder,
repeated YAML keys are refused, and a checkpoint is TorchScript or a state_dict loaded with
``weights_only=True`` (never a pickle). :func:`manifest_files` lays a simulation out this way. The format:
``docs/federated.md``; its rules: ``docs/internals-dp-audits.md``.
"""

from __future__ import annotations

import io
import re
import string
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from privgate.errors import PrivgateError, shown
from privgate.inputs.textfile import read_limited
from privgate.inputs.validation import FieldError, describe
from privgate.inputs.yamlsafe import load_yaml, locate

MANIFEST_VERSION = 1
#: Most rounds a ``{round}`` pattern may expand to, and most checkpoints (nodes × rounds) one manifest may name:
#: each is a model file to load, so far more than a federation keeps (and a 100-million-round pattern
#: would fill memory with names before the first file is looked for).
MAX_ROUNDS = 10_000
MAX_CHECKPOINTS = 100_000


class ManifestError(PrivgateError):
    """A federation manifest that cannot be read, validated or resolved."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class NodeSpec(_Strict):
    name: str = Field(min_length=1)
    data: str = Field(description="The node's training data: .npz, .pt or .csv.")
    checkpoints: list[str] | str = Field(description="One checkpoint per round, or a pattern with {round}.")


class ManifestSpec(_Strict):
    version: int = MANIFEST_VERSION
    name: str = "federation"
    recipe: str | None = None
    topology: str | None = None
    edges: list[list[int]] | None = None
    rounds: int | None = Field(default=None, ge=1, le=MAX_ROUNDS)
    nonmembers: str
    population: str | None = None
    label_column: str = "label"
    nodes: list[NodeSpec] = Field(min_length=1)

    @field_validator("version")
    @classmethod
    def _version(cls, v: int) -> int:
        if v != MANIFEST_VERSION:
            raise ValueError(f"this privgate reads manifest version {MANIFEST_VERSION}, not {v}")
        return v

    @field_validator("edges")
    @classmethod
    def _edges(cls, v: list[list[int]] | None) -> list[list[int]] | None:
        if v is not None and any(len(e) != 2 for e in v):
            raise ValueError("every edge is a pair of node indices [a, b]")
        return v


@dataclass
class Manifest:
    """A validated manifest with every path resolved against its folder."""

    path: Path
    spec: ManifestSpec
    checkpoints: list[list[Path]]  # [node][round]
    data: list[Path]
    nonmembers: Path
    population: Path | None

    @property
    def base(self) -> Path:
        return self.path.parent

    @property
    def rounds(self) -> int:
        return len(self.checkpoints[0])

    @property
    def names(self) -> list[str]:
        return [n.name for n in self.spec.nodes]


def _at(tree: yaml.Node | None, source: Path, loc: tuple[Any, ...], message: str) -> ManifestError:
    line, _ = locate(tree, loc)
    where = f"line {line}: " if line else ""
    field = ".".join(str(p) if not isinstance(p, int) else f"[{p}]" for p in loc).replace(".[", "[")
    return ManifestError(f"{source}: {where}{field}: {message}.")


#: A checkpoint pattern's fields: ``{round}`` or ``{node}`` with at most a zero-padded width (``{round:03d}``).
_FIELDS = ("round", "node")
_SPEC = re.compile(r"(0?(?:[1-9]|1[0-2]))?d?")


def check_pattern(pattern: str, rounds: int | None = None) -> str | None:
    """Why ``pattern`` is not a checkpoint pattern, or None.

    Only ``{round}`` and ``{node}`` (the node's index from 0), each with at
    most a zero-padded integer width of 12 (``{round:03d}``), and ``{{``/``}}``
    for braces: no attribute or item access (``{round.real.__class__}``), no
    conversion, no other format spec (``{round:0999999999d}``). A federation of
    one round may name its one checkpoint without ``{round}``.
    """
    try:
        parts = list(string.Formatter().parse(pattern))
    except ValueError as exc:
        return str(exc)
    fields = [(name, conv, spec) for _, name, spec, conv in parts if name is not None]
    for name, conv, spec in fields:
        if name not in _FIELDS:
            return f"{{{name}}} is not a field; only {{round}} and {{node}} are"
        if conv is not None:
            return f"conversion !{conv} is not allowed"
        if not _SPEC.fullmatch(spec or ""):
            return f"format '{spec}' is not allowed; only an integer width up to 12, such as {{round:03d}}"
    if rounds != 1 and not any(name == "round" for name, _, _ in fields):
        return "it has no {round}"
    return None


def _expand(pattern: str, rounds: int | None, tree: yaml.Node | None, source: Path, i: int) -> list[str]:
    where = ("nodes", i, "checkpoints")
    problem = check_pattern(pattern, rounds)
    if problem is not None:
        raise _at(tree, source, where, f"bad pattern {shown(pattern, 80)}: {problem}")
    if rounds is None:
        raise _at(tree, source, where, "a {round} pattern needs a top-level 'rounds: R'")
    return [pattern.format(round=r, node=i) for r in range(1, rounds + 1)]


def load_manifest(path: str | Path, *, code: bool = True) -> Manifest:
    """Read and validate ``federation.yaml``; every error names the file, the line and the field.

    ``code=False`` (``--no-config-code``): a ``recipe``, code privgate would import and run, is refused.
    """
    p = Path(path)
    spec, tree = _parse(p, code)
    _check_nodes(spec, tree, p)
    ckpts = _checkpoints(spec, tree, p)
    files, nonmembers, population = _data_files(spec, tree, p)
    return Manifest(p, spec, ckpts, files, nonmembers, population)


def _parse(p: Path, code: bool) -> tuple[ManifestSpec, yaml.Node | None]:
    """The manifest's spec and its YAML tree (for line numbers); ``code=False`` refuses a ``recipe``."""
    if not p.is_file():
        raise ManifestError(f"{p}: federation manifest not found.")
    text = read_limited(p, "federation manifest", ManifestError)
    data, tree = load_yaml(text, str(p), ManifestError)
    if not isinstance(data, dict):
        raise ManifestError(f"{p}: a federation manifest is a YAML mapping with 'nonmembers' and 'nodes'.")
    try:
        spec = ManifestSpec.model_validate(data)
    except ValidationError as exc:
        raise ManifestError(describe(exc, tree, str(p), ManifestSpec)) from None
    except FieldError as exc:  # pragma: no cover - validators raise ValueError
        raise _at(tree, p, exc.loc, str(exc)) from None
    if not code and spec.recipe is not None:
        raise _at(
            tree, p, ("recipe",),
            "names a training recipe, code privgate would import and run; --no-config-code "
            "($PRIVGATE_NO_CONFIG_CODE) refuses code a file names: audit TorchScript checkpoints, which need no "
            "recipe, or run without the flag where the manifest is trusted",
        )  # fmt: skip
    return spec, tree


def _check_nodes(spec: ManifestSpec, tree: yaml.Node | None, p: Path) -> None:
    """Node names used once, edges between two nodes, and no more checkpoints than privgate reads."""
    n = len(spec.nodes)
    if len({node.name for node in spec.nodes}) != n:
        seen: set[str] = set()
        for i, node in enumerate(spec.nodes):
            if node.name in seen:
                raise _at(tree, p, ("nodes", i, "name"), f"{shown(node.name)} is used twice")
            seen.add(node.name)
    if spec.edges is not None:
        for j, (a, b) in enumerate(spec.edges):
            if not (0 <= a < n and 0 <= b < n) or a == b:
                raise _at(tree, p, ("edges", j), f"[{a}, {b}] is not a pair of two node indices 0 … {n - 1}")
    if spec.rounds is not None and n * spec.rounds > MAX_CHECKPOINTS:
        raise _at(
            tree, p, ("rounds",),
            f"{n} nodes × {spec.rounds} rounds name {n * spec.rounds:,} checkpoints, more than the "
            f"{MAX_CHECKPOINTS:,} privgate reads from one manifest",
        )  # fmt: skip


def _checkpoints(spec: ManifestSpec, tree: yaml.Node | None, p: Path) -> list[list[Path]]:
    """Every node's checkpoint files, one per round, each there; as many rounds for every node."""
    ckpts: list[list[Path]] = []
    for i, node in enumerate(spec.nodes):
        listed = isinstance(node.checkpoints, list)
        names = node.checkpoints if listed else _expand(node.checkpoints, spec.rounds, tree, p, i)
        if not names:
            raise _at(tree, p, ("nodes", i, "checkpoints"), "lists no checkpoint")
        paths = [p.parent / c for c in names]
        for r, cp in enumerate(paths):
            if not cp.is_file():
                loc = ("nodes", i, "checkpoints", r) if listed else ("nodes", i, "checkpoints")
                raise _at(tree, p, loc, f"checkpoint {cp} not found")
        ckpts.append(paths)
    lengths = {len(c) for c in ckpts}
    if len(lengths) > 1:
        i = next(i for i, c in enumerate(ckpts) if len(c) != len(ckpts[0]))
        raise _at(
            tree, p, ("nodes", i, "checkpoints"),
            f"{len(ckpts[i])} rounds, but node {shown(spec.nodes[0].name)} has {len(ckpts[0])}; every node needs one "
            "checkpoint per round",
        )  # fmt: skip
    return ckpts


def _data_files(spec: ManifestSpec, tree: yaml.Node | None, p: Path) -> tuple[list[Path], Path, Path | None]:
    """Each node's data file, the non-members' and the population's (when named), each there."""
    base = p.parent
    files = []
    for i, node in enumerate(spec.nodes):
        f = base / node.data
        if not f.is_file():
            raise _at(tree, p, ("nodes", i, "data"), f"data file {f} not found")
        files.append(f)
    nonmembers = base / spec.nonmembers
    if not nonmembers.is_file():
        raise _at(tree, p, ("nonmembers",), f"data file {nonmembers} not found")
    population = base / spec.population if spec.population else None
    if population is not None and not population.is_file():
        raise _at(tree, p, ("population",), f"data file {population} not found")
    return files, nonmembers, population


def npz_bytes(x: np.ndarray, y: np.ndarray) -> bytes:
    """One data file of the layout (``x``, ``y`` in an ``.npz``), as bytes."""
    buf = io.BytesIO()
    np.savez(buf, x=x, y=y)
    return buf.getvalue()


def state_bytes(state: dict[str, Any]) -> bytes:
    """One state_dict checkpoint of the layout (``torch.save`` of detached, contiguous tensors), as bytes."""
    import torch

    buf = io.BytesIO()
    torch.save({k: v.detach().clone().contiguous() for k, v in state.items()}, buf)
    return buf.getvalue()


def checkpoint_name(r: int, node: int | str) -> str:
    """Where the layout keeps a node's model after round ``r`` (1-based): ``rounds/r01/node0.pt``."""
    stem = f"node{node}" if isinstance(node, int) else node
    return f"rounds/r{r:02d}/{stem}.pt"


def manifest_text(
    *,
    name: str,
    recipe: str | None,
    topology: str,
    edges: list[list[int]],
    nonmembers: str,
    nodes: list[dict[str, Any]],
    population: str | None = None,
    comment: str = "",
) -> bytes:
    """``federation.yaml`` for ``nodes`` (``{name, data, checkpoints}``, paths relative to its folder), as bytes."""
    doc: dict[str, Any] = {"version": MANIFEST_VERSION, "name": name}
    if recipe:
        doc["recipe"] = recipe
    doc.update({"topology": topology, "edges": edges, "nonmembers": nonmembers})
    if population is not None:
        doc["population"] = population
    doc["nodes"] = nodes
    head = "# privgate federation manifest (privgate fl audit federation.yaml)\n"
    head += "".join(f"# {line}\n" if line else "#\n" for line in comment.splitlines())
    return (head + yaml.safe_dump(doc, sort_keys=False, default_flow_style=None, width=100)).encode()


def manifest_files(
    folder: Path,
    *,
    name: str,
    recipe: str | None,
    topology: str,
    edges: list[list[int]],
    node_names: list[str],
    node_data: list[tuple[np.ndarray, np.ndarray]],
    nonmembers: tuple[np.ndarray, np.ndarray],
    states: list[list[dict[str, Any]]],
    population: tuple[np.ndarray, np.ndarray] | None = None,
) -> dict[Path, bytes]:
    """Every file of a federation in the manifest layout (``states[r][i]``: node i after round r), as bytes."""
    files: dict[Path, bytes] = {}
    nodes = []
    for i, (label, (x, y)) in enumerate(zip(node_names, node_data)):
        files[folder / "data" / f"node{i}.npz"] = npz_bytes(x, y)
        cps = []
        for r, round_states in enumerate(states, start=1):
            rel = checkpoint_name(r, i)
            files[folder / rel] = state_bytes(round_states[i])
            cps.append(rel)
        nodes.append({"name": label, "data": f"data/node{i}.npz", "checkpoints": cps})
    files[folder / "data" / "nonmembers.npz"] = npz_bytes(*nonmembers)
    pop = None
    if population is not None and len(population[1]):
        files[folder / "data" / "population.npz"] = npz_bytes(*population)
        pop = "data/population.npz"
    files[folder / "federation.yaml"] = manifest_text(
        name=name, recipe=recipe, topology=topology, edges=edges, nonmembers="data/nonmembers.npz", nodes=nodes,
        population=pop,
    )  # fmt: skip
    return files


__all__ = [
    "MANIFEST_VERSION", "Manifest", "ManifestError", "ManifestSpec", "checkpoint_name", "load_manifest",
    "manifest_files", "manifest_text", "npz_bytes", "state_bytes",
]  # fmt: skip
