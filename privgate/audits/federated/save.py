"""A simulated federation saved in the manifest layout (``fl simulate --save``), so ``fl audit`` can read it back."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from privgate.audits.federated.manifest import manifest_files


def slug(name: str) -> str:
    """A topology's name as a folder name."""
    keep = "".join(c if c.isalnum() or c in "-_." else "-" for c in Path(name).name)
    return keep.strip("-") or "topology"


def saved_federations(result: Any, folder: Path, recipe: str) -> dict[Path, tuple[str, bytes]]:
    """Every topology's federation of a simulation ``result`` in the manifest layout, under ``folder/<topology>/``.

    Returns ``{path: (what, bytes)}``, not yet written (:func:`privgate.io.staging.commit` writes them).
    """
    split, ds = result.split, result.data
    out: dict[Path, tuple[str, bytes]] = {}
    for fed in result.federations:
        topo = fed.topology
        files = manifest_files(
            folder / slug(topo.name), name=f"simulation-{slug(topo.name)}", recipe=recipe,
            topology=topo.name if topo.kind != "file" else "edges", edges=topo.edges, node_names=list(topo.labels),
            node_data=[(ds.x[s], ds.y[s]) for s in split.shards], nonmembers=(ds.x[split.holdout], ds.y[split.holdout]),
            states=fed.trajectory.states,
            population=(ds.x[split.population], ds.y[split.population]) if len(split.population) else None,
        )  # fmt: skip
        out.update({p: ("saved federation file", data) for p, data in files.items()})
    return out


__all__ = ["saved_federations", "slug"]
