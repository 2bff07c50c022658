"""Numbers in reports: which values are finite numbers, JSON's stand-in for the others, and numbers for people.

:func:`finite_or_none` is what a report *stores*: JSON has no NaN or ±∞, so a non-finite float is ``null``
(an unmeasured metric has no value, never 0). :func:`is_finite_number` is what a reader may *compute with*:
a finite ``int`` or ``float``, never a ``bool`` — a report read back may hold anything
(docs/threat-model.md). :func:`num` and :func:`sig` print a number for people (``n/a`` otherwise);
:func:`duration` a number of seconds.
"""

from __future__ import annotations

import math
from typing import Any


def finite_or_none(v: Any) -> Any:
    """``None`` for a NaN or infinite float; ``v`` unchanged otherwise (``None``, ints, strings included)."""
    return None if isinstance(v, float) and not math.isfinite(v) else v


def is_finite_number(v: Any) -> bool:
    """Whether ``v`` is a finite ``int`` or ``float`` (a ``bool`` is not a number here)."""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def num(v: float | None, digits: int = 3, missing: str = "n/a") -> str:
    """A number for people with ``digits`` decimals; ``missing`` for absent or non-finite values."""
    return f"{v:.{digits}f}" if is_finite_number(v) else missing


def sig(v: float | None, digits: int = 3, missing: str = "n/a") -> str:
    """A number for people with ``digits`` significant digits; ``missing`` for absent or non-finite values."""
    return f"{v:.{digits}g}" if is_finite_number(v) else missing


def duration(seconds: float) -> str:
    """``seconds`` for people, in its largest whole unit (``3 hours``, ``12 minutes``, ``40 seconds``)."""
    for unit, size in (("years", 365 * 86400), ("days", 86400), ("hours", 3600), ("minutes", 60)):
        if seconds >= size:
            return f"{seconds / size:,.0f} {unit}"
    return f"{seconds:.0f} seconds"


__all__ = ["duration", "finite_or_none", "is_finite_number", "num", "sig"]
