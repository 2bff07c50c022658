"""Atomic file output: every file privgate writes appears whole or not at all.

:func:`write_atomic` (one file) and :func:`write_together` (a set): each payload goes to a fsynced temporary file
``.NAME.privgate-PID-XXXXXXXX.tmp`` beside its destination, then all are moved with ``os.replace``. A failure or an
interrupt removes the temporaries and puts back what a rename had replaced; SIGINT and SIGTERM are held back during
the renames (:func:`signals_held`). Temporaries of a killed process are removed by the next write of the same name.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import shutil
import signal
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from types import FrameType

#: Part of every temporary name privgate creates: ``.NAME.privgate-PID-RANDOM.tmp``.
TEMP_MARK = ".privgate-"
TEMP_SUFFIX = ".tmp"
_NAME_CHARS = 120  # of NAME kept in a temporary name, so it stays under the 255-byte limit


def temp_name(path: str | Path) -> Path:
    """A fresh temporary path beside ``path``, recognisable as privgate's and as this process's."""
    p = Path(path)
    return p.with_name(f".{p.name[:_NAME_CHARS]}{TEMP_MARK}{os.getpid()}-{secrets.token_hex(4)}{TEMP_SUFFIX}")


def _owner(entry: str, prefix: str) -> int | None:
    """The PID in a temporary name ``prefix + 'PID-RANDOM.tmp'``, or None when the name is not one."""
    if not (entry.startswith(prefix) and entry.endswith(TEMP_SUFFIX)):
        return None
    pid, sep, _ = entry[len(prefix) : -len(TEMP_SUFFIX)].partition("-")
    return int(pid) if sep and pid.isdigit() else None


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process, or no way to tell: leave its files alone
        return True
    return True


def remove_stale(path: str | Path) -> list[Path]:
    """Remove temporary files (or folders) beside ``path`` left by a privgate process that is gone."""
    p = Path(path)
    if os.name != "posix":
        return []
    prefix = f".{p.name[:_NAME_CHARS]}{TEMP_MARK}"
    removed = []
    try:
        entries = list(os.scandir(p.parent))
    except OSError:
        return []
    for entry in entries:
        pid = _owner(entry.name, prefix)
        if pid is None or _alive(pid):
            continue
        try:
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path)
            else:
                os.unlink(entry.path)
            removed.append(Path(entry.path))
        except OSError:
            pass
    return removed


def make_parents(folder: Path) -> list[Path]:
    """``mkdir -p folder``; returns the folders it created, outermost first (to undo it)."""
    missing = []
    for d in (folder, *folder.parents):
        if d.exists() or d.is_symlink():
            break
        missing.append(d)
    folder.mkdir(parents=True, exist_ok=True)
    return list(reversed(missing))


def remove_empty(folders: list[Path]) -> None:
    """Remove the folders :func:`make_parents` created, innermost first, where they are still empty."""
    for d in reversed(folders):
        with contextlib.suppress(OSError):
            d.rmdir()


def _as_bytes(data: str | bytes) -> bytes:
    return data.encode("utf-8") if isinstance(data, str) else bytes(data)


def _named(exc: OSError, path: Path) -> OSError:
    """The same error, naming ``path`` (``exc.filename``), so callers can say which file failed."""
    if exc.filename == str(path):
        return exc
    named = OSError(exc.errno, exc.strerror or str(exc), str(path))  # OSError picks the subclass from errno
    named.__cause__ = exc
    return named


def _regular_or_absent(path: Path) -> None:
    """Refuse (OSError naming ``path``) a destination that exists and is not a regular file: a FIFO, a device,
    a socket or a folder is never replaced (privgate.io.guards.special_kind), and neither is a symbolic link —
    the rename would put a file where the link was (the CLI refuses links earlier, privgate.io.guards)."""
    from privgate.io.guards import special_kind

    kind = special_kind(path)
    if kind:
        raise OSError(errno.EEXIST, f"it exists and is {kind}, not a regular file; left as it is", str(path))
    if os.path.islink(path):
        raise OSError(errno.EEXIST, "it is a symbolic link, which privgate never replaces; left as it is", str(path))


def _write_temp(path: Path, payload: bytes, mode: int) -> Path:
    """``payload`` in a new temporary file beside ``path``, flushed and fsynced; removed again on failure."""
    tmp = temp_name(path)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return tmp


def _keep_old(path: Path) -> Path | None:
    """A second name for the file at ``path`` (a hard link, else a copy) so a rollback can put it back."""
    keep = temp_name(path)
    if path.is_symlink():  # refused before (_regular_or_absent); one made since is put back on a rollback
        os.symlink(os.readlink(path), keep)
    elif path.is_file():
        try:
            os.link(path, keep)
        except OSError:
            shutil.copy2(path, keep)
    else:
        return None
    return keep


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextmanager
def signals_held() -> Iterator[None]:
    """Hold SIGINT and SIGTERM back for the block; one that arrives is delivered as soon as it ends.

    Python runs signal handlers in the main thread only, between bytecodes, so
    the main thread swaps its handlers for one that only records the signal,
    then restores them and raises what came. (Masking the signal would not do:
    the kernel may deliver it to another thread, e.g. one of torch's.) Other
    threads are never interrupted by a handler and need nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pending: list[int] = []

    def hold(signum: int, frame: FrameType | None) -> None:
        pending.append(signum)

    previous = {}
    for sig in (signal.SIGINT, signal.SIGTERM):
        handler = signal.getsignal(sig)
        if handler is not None and handler is not signal.SIG_IGN:  # None: set outside Python, leave it alone
            previous[sig] = signal.signal(sig, hold)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if pending:
            signal.raise_signal(pending[0])


def write_together(
    files: Mapping[str | Path, str | bytes], mode: int = 0o644, modes: Mapping[Path, int] | None = None
) -> list[Path]:
    """Write every ``{path: data}`` (text as UTF-8, or bytes) so that all appear, or none does.

    Each file gets ``mode``, or its own from ``modes`` (``{path: mode}``, e.g. the mode of the file it replaces).

    An existing file at a destination is replaced only by the final rename; on
    any failure it is put back as it was.

    Returns:
        The destination paths, in the order given.

    Raises:
        OSError: the first error, its ``filename`` the destination being written; a destination that exists
            and is not a regular file (FIFO, device, socket, folder, symbolic link) is refused before anything
            is written.
        ValueError: one destination given twice.
    """
    items = [(Path(p), _as_bytes(data)) for p, data in files.items()]
    seen: set[str] = set()
    for p, _ in items:
        _regular_or_absent(p)
        key = os.path.realpath(p)
        if key in seen:
            raise ValueError(f"{p}: given twice in one write")
        seen.add(key)
    created: list[Path] = []
    temps: list[tuple[Path, Path]] = []
    done: list[tuple[Path, Path | None]] = []  # (destination, what it held before) for renamed files
    try:
        for p, payload in items:
            try:
                created += make_parents(p.parent)
                remove_stale(p)
                temps.append((p, _write_temp(p, payload, (modes or {}).get(p, mode))))
            except OSError as exc:
                raise _named(exc, p) from None
        with signals_held():
            try:
                for p, tmp in temps:
                    try:
                        old = _keep_old(p)
                        try:
                            os.replace(tmp, p)
                        except BaseException:
                            if old is not None:
                                old.unlink(missing_ok=True)
                            raise
                    except OSError as exc:
                        raise _named(exc, p) from None
                    done.append((p, old))
            except BaseException:
                _undo(done)
                raise
            for _, old in done:
                if old is not None:
                    old.unlink(missing_ok=True)
        for folder in {p.parent for p, _ in items}:
            _fsync_dir(folder)
    except BaseException:
        for _, tmp in temps:
            tmp.unlink(missing_ok=True)
        remove_empty(created)
        raise
    return [p for p, _ in items]


def _undo(done: list[tuple[Path, Path | None]]) -> None:
    """Put back what each rename replaced (or remove the new file), last rename first."""
    for p, old in reversed(done):
        try:
            if old is not None:
                os.replace(old, p)
            else:
                p.unlink(missing_ok=True)
        except OSError:
            pass


def write_atomic(path: str | Path, data: str | bytes, mode: int = 0o644) -> Path:
    """Write ``data`` (text as UTF-8, or bytes) to ``path`` atomically; returns the path."""
    return write_together({path: data}, mode)[0]


def write_new(path: str | Path, data: str | bytes, mode: int = 0o644) -> Path:
    """Write ``data`` to ``path`` atomically, only where nothing is there yet; never replaces anything.

    The temporary file is hard-linked to ``path`` (``link`` fails when the name
    exists, atomically, unlike a check followed by a rename), then removed. On a
    file system without hard links, the name is checked and the file renamed.

    Raises:
        FileExistsError: ``path`` exists (a file, a folder or a link); nothing was written.
        OSError: any other failure, its ``filename`` the destination.
    """
    p = Path(path)
    if os.path.lexists(p):
        raise FileExistsError(errno.EEXIST, "File exists", str(p))
    created: list[Path] = []
    try:
        try:
            created = make_parents(p.parent)
            remove_stale(p)
            tmp = _write_temp(p, _as_bytes(data), mode)
        except OSError as exc:
            raise _named(exc, p) from None
        try:
            with signals_held():
                try:
                    os.link(tmp, p)
                except FileExistsError:
                    raise
                except OSError:  # no hard links here: the plain check, then the rename
                    if os.path.lexists(p):
                        raise FileExistsError(errno.EEXIST, "File exists", str(p)) from None
                    os.replace(tmp, p)
        finally:
            tmp.unlink(missing_ok=True)
        _fsync_dir(p.parent)
    except BaseException:
        remove_empty(created)
        raise
    return p


__all__ = [
    "TEMP_MARK",
    "make_parents",
    "remove_empty",
    "remove_stale",
    "signals_held",
    "temp_name",
    "write_atomic",
    "write_new",
    "write_together",
]
