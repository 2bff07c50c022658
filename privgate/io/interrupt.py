"""Interrupts at the CLI boundary: Ctrl-C exits 130 and SIGTERM 143, never 1 ("the model leaks").

SIGINT already raises :class:`KeyboardInterrupt` in Python. :func:`sigterm_raises`
makes SIGTERM (what CI runners, ``timeout`` and ``kill`` send) raise
:class:`Terminated`, a ``KeyboardInterrupt``, so the same cleanup runs for
both: ``finally`` blocks and ``except BaseException`` handlers remove
temporary files and release the cache lock, and no output is half-written
(:mod:`privgate.io.atomic`). ``except Exception`` handlers in library code do not
catch either, so an interrupt is never mistaken for a failed attack.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

#: Exit status of a run stopped by SIGINT / SIGTERM (128 + the signal number, as shells report it).
EXIT_SIGINT = 128 + int(signal.SIGINT)
EXIT_SIGTERM = 128 + int(signal.SIGTERM)


class Terminated(KeyboardInterrupt):
    """Raised in the main thread when the process receives SIGTERM."""


def _raise_terminated(signum: int, frame: FrameType | None) -> None:
    raise Terminated(f"received signal {signum}")


@contextmanager
def sigterm_raises() -> Iterator[None]:
    """Within the block (main thread only), SIGTERM raises :class:`Terminated`; the old handler comes back after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def exit_status(exc: KeyboardInterrupt) -> tuple[int, str]:
    """(exit code, signal name) of an interrupt: 143 for SIGTERM, 130 for SIGINT."""
    return (EXIT_SIGTERM, "SIGTERM") if isinstance(exc, Terminated) else (EXIT_SIGINT, "SIGINT")


__all__ = ["EXIT_SIGINT", "EXIT_SIGTERM", "Terminated", "exit_status", "sigterm_raises"]
