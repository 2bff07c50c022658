"""``privgate check --budget SECONDS``: a time budget for the audit's attacks (:mod:`privgate.attacks.budget`).

The attacks run cheapest first; one whose estimated cost does not fit in what
is left is not run, the report's attack table and warnings name it, and a
check it could have decided is not passed on the others (inconclusive, exit 3).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click


def budget_option(f: Callable[..., Any]) -> Callable[..., Any]:
    """Add ``--budget SECONDS`` to a command."""
    return click.option(
        "--budget",
        type=click.FloatRange(min=0, min_open=True, max=1e9),
        metavar="SECONDS",
        help="Time budget for the attacks: they run cheapest first, and one whose estimated cost does not fit in "
        "what is left is not run (named in the report); a check it could have decided is then inconclusive.",
    )(f)


def budget_setting(flags: dict[str, Any]) -> dict[str, Any]:
    """``budget_s`` of the settings: the flag (None: no budget)."""
    return {"budget_s": flags.get("budget")}


__all__ = ["budget_option", "budget_setting"]
