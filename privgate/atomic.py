"""Atomic file output: every file privgate writes appears whole or not at all.

Write to a temporary file in the destination folder, flush and fsync it, then
``os.replace`` it over the destination, so an interrupted run never leaves a
half-written report, model or cache entry, and a reader never sees one.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_atomic(path: str | Path, data: str | bytes, mode: int = 0o644) -> Path:
    """Write ``data`` (text as UTF-8, or bytes) to ``path`` atomically; returns the path."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, p)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return p
