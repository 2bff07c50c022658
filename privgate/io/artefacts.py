"""Attack artefacts (e.g. model-inversion reconstructions) saved next to the report.

An attack returns files as ``AttackResult.extras["artefacts"] = {name: bytes}``;
they never go into the JSON report. When the caller gives a directory (the CLI
uses ``--artefacts DIR``, by default ``<report>.artefacts/`` next to the
``--json`` path), each file is written atomically to ``DIR/<attack>/<name>``
and the report lists the paths in the attack's ``extras["artefacts"]``.
Without a directory nothing is written: privgate never writes files the user
did not ask for.
"""

from __future__ import annotations

import re
from pathlib import Path

from privgate.io.atomic import write_atomic

_SAFE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")


def save_artefacts(attack: str, files: dict[str, bytes], directory: str | Path) -> list[str]:
    """Write one attack's artefacts under ``directory/attack/``; returns the paths written."""
    written = []
    for name, data in sorted(files.items()):
        if not _SAFE.match(name) or not _SAFE.match(attack):
            raise ValueError(f"attack '{attack}' returned an artefact with an unsafe name {name!r}")
        path = Path(directory) / attack / name
        write_atomic(path, data)
        written.append(str(path))
    return written


def default_directory(report_path: str | Path) -> Path:
    """``report.json`` → ``report.artefacts/`` in the same folder."""
    p = Path(report_path)
    return p.with_name(p.stem + ".artefacts")
