"""Content digests of the files privgate reads: the SHA-256 a report records for a model or data file."""

from __future__ import annotations

import hashlib
from pathlib import Path


def file_sha256(path: str | Path) -> str:
    """The hex SHA-256 of the file at ``path``, read 1 MiB at a time."""
    h = hashlib.sha256()
    with Path(path).open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


__all__ = ["file_sha256"]
