"""What one CLI run writes — reports, attack artefacts, a hardened model — written as one unit.

Nothing reaches its destination until the run has finished: artefacts go to a hidden staging folder beside the
artefacts folder (``.NAME.privgate-PID-XXXXXXXX.tmp/``), reports and the hardened model are rendered in memory, and
:func:`commit` writes them all with :func:`privgate.io.atomic.write_together`: every file appears, or none does. An
error, Ctrl-C or SIGTERM removes the staging folder; one left by a killed run is removed by the next run.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

from privgate.errors import PrivgateError
from privgate.io.atomic import make_parents, remove_empty, remove_stale, temp_name, write_together
from privgate.io.guards import Named, inside, refuse_imported, stream_of

if TYPE_CHECKING:
    from privgate.report.model import Report


class Staging:
    """A hidden folder where attacks save artefacts during the run, moved to ``final`` by :func:`commit`.

    Use as a context manager; ``path`` is what the audit gets as its
    ``artefacts_dir`` (None when there is no artefacts folder).
    """

    def __init__(self, final: str | Path | None) -> None:
        self.final = Path(final) if final else None
        self.root = temp_name(self.final) if self.final else None
        self._created: list[Path] = []

    @property
    def path(self) -> str | None:
        return str(self.root) if self.root else None

    def __enter__(self) -> Staging:
        if self.final is not None and self.root is not None:
            remove_stale(self.final)
            try:
                self._created = make_parents(self.final.parent)
            except OSError as exc:
                raise PrivgateError(
                    f"{self.final}: cannot create the artefacts folder "
                    f"({exc.strerror or exc.__class__.__name__}); nothing was written."
                ) from None
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if self.root is None or self.final is None:
            return
        shutil.rmtree(self.root, ignore_errors=True)
        remove_empty(self._created)
        if (
            isinstance(exc, OSError) and exc.filename and inside(Path(exc.filename), self.root)
        ):  # an artefact could not be staged
            where = self.final / os.path.relpath(os.path.realpath(exc.filename), os.path.realpath(self.root))
            raise PrivgateError(
                f"{where}: cannot write the attack artefact ({exc.strerror or exc.__class__.__name__}); "
                f"nothing was written."
            ) from None

    def files(self) -> dict[Path, bytes]:
        """Every staged file, keyed by where it goes in the artefacts folder."""
        if self.root is None or self.final is None or not self.root.is_dir():
            return {}
        return {
            self.final / p.relative_to(self.root): p.read_bytes() for p in sorted(self.root.rglob("*")) if p.is_file()
        }

    def relocate(self, report: Report) -> Report:
        """A copy of ``report`` whose artefact paths name the artefacts folder instead of the staging folder."""
        if self.root is None or self.final is None:
            return report
        root, final = self.root, self.final

        def moved(item: object) -> object:
            p = Path(str(item))
            try:
                return str(final / p.relative_to(root))
            except ValueError:
                return item

        out = report.model_copy(deep=True)
        for attack in out.attacks:
            paths = attack.extras.get("artefacts")
            if isinstance(paths, list):
                attack.extras["artefacts"] = [moved(p) for p in paths]
        for record in (out.exposed or {}).get("records", []):
            if record.get("image"):
                record["image"] = moved(record["image"])
        return out


def commit(files: Mapping[Path, tuple[str, str | bytes]]) -> list[Path]:
    """Write ``{path: (what, data)}`` all together, or nothing.

    A path that is the file of a Python module the run imported (the user's
    recipe, what it imports) is refused first (:func:`privgate.io.guards.refuse_imported`):
    a recipe function may import a module only when it is called, after the
    CLI's own early check. A path that is a link to this process's standard
    output or error (``/dev/stdout``, :func:`privgate.io.guards.stream_of`) is
    written to that stream once every file is in place.

    Raises:
        PrivgateError: a path is an imported module's file, or a file cannot be
            written (disk full, no permission): one sentence naming it; nothing was written.
    """
    refuse_imported(Named(p, f"the {what}") for p, (what, _) in files.items())
    streams = {p: stream_of(p) for p in files}
    try:
        written = write_together({p: data for p, (_, data) in files.items() if streams[p] is None})
    except OSError as exc:
        failed = Path(exc.filename) if exc.filename else None
        what = files[failed][0] if failed in files else "the outputs"
        where = failed if failed is not None else ", ".join(str(p) for p in files)
        raise PrivgateError(
            f"{where}: cannot write the {what} ({exc.strerror or exc.__class__.__name__}); nothing was written."
        ) from None
    for p, fd in streams.items():
        if fd is not None:
            _to_stream(fd, p, *files[p])
            written.append(p)
    return written


def _to_stream(fd: int, path: Path, what: str, data: str | bytes) -> None:
    """Write ``data`` to file descriptor ``fd`` (stdout or stderr) after what Python has buffered for it."""
    payload = data.encode("utf-8") if isinstance(data, str) else bytes(data)
    try:
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:
                stream.flush()
        view = memoryview(payload)
        while view:
            view = view[os.write(fd, view) :]
    except OSError as exc:
        name = "standard output" if fd == 1 else "standard error"
        raise PrivgateError(
            f"{path}: cannot write the {what} to {name} ({exc.strerror or exc.__class__.__name__})."
        ) from None


__all__ = ["Staging", "commit"]
