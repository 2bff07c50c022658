"""Reading a user's file: a regular file only; a settings or key file with a size limit.

Every file privgate reads is opened without blocking and checked on its open
descriptor (:func:`open_regular`), so a FIFO, a device such as ``/dev/zero``, a
socket or a folder — given, or behind a link — is one sentence, never a hang
or an endless read, and the file read is the file checked. A settings file is
a few kilobytes; one of many megabytes is a mistake (the wrong path) or
hostile, so at most :data:`MAX_BYTES` + 1 bytes of it are read.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import BinaryIO

from privgate.errors import PrivgateError

#: Largest settings file privgate reads (1 MiB).
MAX_BYTES = 1 << 20


def _size(n: int) -> str:
    return f"{n / (1 << 20):g} MiB" if n >= 1 << 20 and n % (1 << 10) == 0 else f"{n:,} bytes"


def open_regular(path: str | Path, what: str, error: type[PrivgateError] = PrivgateError) -> BinaryIO:
    """``path`` opened for reading (binary) when it is a regular file, links followed; else ``error``, one sentence.

    Args:
        path: the file.
        what: what the file is, for messages (``"the members file"``, ``"policy file"``).
        error: the :class:`PrivgateError` subclass to raise.
    """
    p = Path(path)
    try:
        # O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer forever
        fd = os.open(p, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        raise error(f"{p}: cannot read {what} ({exc.strerror or exc.__class__.__name__}).") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        kind = "a FIFO" if stat.S_ISFIFO(mode) else "a folder" if stat.S_ISDIR(mode) else "a device or socket"
        raise error(f"{p}: {what} is {kind}, not a regular file.")
    return os.fdopen(fd, "rb")


def read_regular(
    path: str | Path, what: str, error: type[PrivgateError] = PrivgateError, limit: int = MAX_BYTES
) -> tuple[bytes, os.stat_result]:
    """The bytes of ``path``, a regular file of at most ``limit`` bytes, and its status (of the open descriptor).

    Raises ``error`` (one sentence naming the file and ``what`` it is) for a FIFO, a device, a socket or a folder
    (never waiting on one, :func:`open_regular`), a larger file, or one that cannot be read.
    """
    p = Path(path)
    with open_regular(p, what, error) as f:
        st = os.fstat(f.fileno())
        try:
            data = f.read(limit + 1)
        except OSError as exc:
            raise error(f"{p}: cannot read {what} ({exc.strerror or exc.__class__.__name__}).") from None
    if len(data) > limit:
        raise error(f"{p}: {what} is larger than {_size(limit)}, the most privgate reads; is this the right file?")
    return data, st


def read_limited(
    path: str | Path, what: str, error: type[PrivgateError] = PrivgateError, limit: int = MAX_BYTES
) -> str:
    """The UTF-8 text of the regular file ``path``.

    Raises ``error`` (one sentence naming the file) when it is larger than ``limit``, not a regular file or
    unreadable.

    Args:
        path: the file.
        what: what the file is, for messages (``"policy file"``, ``"config"``).
        error: the :class:`PrivgateError` subclass to raise.
        limit: the most bytes accepted.
    """
    data, _ = read_regular(path, what, error, limit)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(f"{Path(path)}: {what} is not UTF-8 text (byte {exc.start}).") from None


__all__ = ["MAX_BYTES", "open_regular", "read_limited", "read_regular"]
