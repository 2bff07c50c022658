"""Errors at privgate's boundary.

Every problem with a user's input (a file, a YAML field, a CLI flag) is a
:class:`PrivgateError` whose message is one sentence naming the thing at fault.
The CLI prints it without a traceback and exits with code 2.
"""

from __future__ import annotations

import reprlib


class PrivgateError(Exception):
    """Bad input: one clear sentence naming the file, field or flag at fault."""

    exit_code = 2


class PolicyError(PrivgateError):
    """A policy that cannot be found, parsed or validated."""


class ConfigError(PrivgateError):
    """A project configuration (pyproject.toml / privgate.toml) that is wrong."""


class TargetError(PrivgateError):
    """A model checkpoint that cannot be loaded safely or does not fit the data."""


class DataError(PrivgateError):
    """Audit data that is missing, malformed or unsound (e.g. overlapping sets)."""


class RecipeError(PrivgateError):
    """A training recipe that cannot be imported or does not build a model."""


def out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc`` (or an exception it was raised from) means the process ran out of memory.

    A :class:`MemoryError`, or torch's RuntimeErrors for the same: ``std::bad_alloc``,
    "DefaultCPUAllocator: can't allocate memory", "CUDA out of memory". Code that turns
    exceptions into input errors re-raises these: running out of memory is not bad input.
    """
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, MemoryError):
            return True
        if isinstance(e, RuntimeError):
            try:
                head = str(e)[:300].lower()
            except MemoryError:
                return True
            if "bad_alloc" in head or "can't allocate memory" in head or "out of memory" in head:
                return True
        e = e.__cause__ or e.__context__
    return False


#: Most characters of a user's value that an error message quotes.
QUOTE_LIMIT = 200


def shown(value: object, limit: int = QUOTE_LIMIT) -> str:
    """``repr(value)`` for an error message, at most ``limit`` characters, cut with "…".

    Uses :mod:`reprlib`, which elides long strings and containers while it builds
    the text, so a huge or deeply shared value (a YAML alias bomb that got
    through, a 10 MB string) costs no more to quote than a small one.
    """
    if isinstance(value, str):
        return clip(repr(value[: limit + 2]), limit)
    r = reprlib.Repr()
    r.fillvalue = "…"
    r.maxstring = r.maxother = r.maxlong = limit
    r.maxlist = r.maxtuple = r.maxdict = r.maxset = r.maxfrozenset = r.maxdeque = r.maxarray = 12
    r.maxlevel = 4
    return clip(r.repr(value), limit)


def clip(text: str, limit: int = QUOTE_LIMIT) -> str:
    """``text`` cut to at most ``limit`` characters, the cut marked with "…"."""
    return text if len(text) <= limit else text[: max(limit - 1, 0)] + "…"
