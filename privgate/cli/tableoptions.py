"""``privgate check`` options that say how the audit's rows are read: the label column, and duplicated rows.

A row that is both a member and a non-member is refused unless
``--drop-duplicates`` (config ``drop_duplicates``) drops it from both sides
(:mod:`privgate.inputs.duplicates`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click


def table_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """Add ``--label-column`` and ``--drop-duplicates`` to a command."""
    f = click.option(
        "--drop-duplicates",
        is_flag=True,
        default=None,
        help="Drop rows whose features and label are both among the members and the non-members from both sides, "
        "and keep a row repeated within a side once (the report counts what went; the blind baseline checks the "
        "rows left). Default: such rows are refused. Else the config's 'drop_duplicates'.",
    )(f)
    return click.option("--label-column", help="Label column of CSV and Parquet tables (default 'label').")(f)


def table_settings(flags: dict[str, Any], pick: Callable[[str, Any], Any], cfg: Any) -> dict[str, Any]:
    """``label_column`` and ``drop_duplicates`` of the settings: the flags, else the config's keys."""
    return {
        "label_column": flags["label_column"] or cfg.get("label_column") or "label",  # a column's name, never a path
        "drop_duplicates": bool(pick("drop_duplicates", flags["drop_duplicates"])),
    }


__all__ = ["table_options", "table_settings"]
