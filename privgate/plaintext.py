"""Plain text from a string someone else controls: no control characters, no lone surrogates, a bounded length.

The base of every output dialect (:mod:`privgate.report.safe` builds rich
markup, XML, Markdown and HTML on it) and what a message that quotes a file's
name or a library's words uses on its own (:mod:`privgate.io.guards`): a path
or a warning printed to a terminal must not carry an escape sequence that
rewrites the screen, nor a bidirectional override that shows text in another
order than it is read.
"""

from __future__ import annotations

import re
from typing import Any

#: C0 controls except tab and newline, DEL, C1 controls (CSI, OSC, ST...), Unicode line/paragraph separators
#: and the bidirectional overrides that make text display in another order than it is read ("Trojan Source",
#: Boucher & Anderson 2021, arXiv 2111.00169).
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
#: Lone surrogates: cannot be encoded as UTF-8 (a write would raise).
_SURROGATE = re.compile("[\ud800-\udfff]")
#: The longest text kept from one value; more is cut with an ellipsis (a 1 GB message must not reach a log).
MAX_TEXT = 20_000


def text(value: Any) -> str:
    """``value`` as a string: ``""`` for None, ``str()`` otherwise (a ``__str__`` that raises gives its type name)."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    try:
        return str(value)
    except Exception:  # noqa: BLE001 — a writer must never fail on a value
        return f"<{type(value).__name__}>"


def clean(value: Any, *, newlines: bool = True, most: int = MAX_TEXT) -> str:
    """``value`` without control characters: no terminal escape sequence (ESC, CSI, OSC), no bidi override.

    Tab becomes a space; newlines are kept (``newlines=False`` turns them into
    spaces); lone surrogates become U+FFFD; text longer than ``most`` is cut
    with ``…``.
    """
    s = text(value)
    if len(s) > most:
        s = s[:most] + "…"
    s = s.replace("\r\n", "\n").replace("\r", "\n").replace("\t", " ")
    if not newlines:
        s = s.replace("\n", " ")
    s = _CONTROL.sub("", s)
    return _SURROGATE.sub("\ufffd", s)


def no_surrogates(value: Any) -> Any:
    """``value`` with lone surrogates (a file name that is not UTF-8, read with ``surrogateescape``) as U+FFFD;
    other values unchanged. For documents that keep every other character, such as the JSON report."""
    return _SURROGATE.sub("\ufffd", value) if isinstance(value, str) else value


def one_line(value: Any, most: int = MAX_TEXT) -> str:
    """:func:`clean` on one line (newlines become spaces): for table cells and headings."""
    return clean(value, newlines=False, most=most)


__all__ = ["MAX_TEXT", "clean", "no_surrogates", "one_line", "text"]
