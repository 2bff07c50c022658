"""``--records FILE``: every audited row's membership scores, written with the reports (:mod:`privgate.report.records`).

The path is checked before any work (its extension, pyarrow for Parquet) and named to the output guard; the file
is encoded after the audit and committed together with the reports, all or none; the JSON report references it.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from privgate.io.guards import Named

records_option = click.option(
    "--records",
    "records_path",
    type=click.Path(dir_okay=False),
    help="Write every audited row's membership scores here (.csv or .parquet): its 0-based row in its own input "
    "file, side, split, label, one score per attack (higher = more likely member) and each TPR-at-FPR check's "
    "decision at its calibrated threshold. The JSON report references the file.",
)


def planned_records(path: str | None) -> list[Named]:
    """The records file as the output guard names it; an unknown extension or Parquet without pyarrow: exit 2."""
    from privgate.io.guards import Named
    from privgate.report.records import check_path

    if not path:
        return []
    check_path(path)
    return [Named(Path(path), "the records file (--records)")]


def with_records(report: Any, path: str | None) -> tuple[Any, dict[Path, tuple[str, bytes]]]:
    """``report`` referencing the records file, and that file's bytes to commit with the reports."""
    from privgate.report.records import attach

    if not path:
        return report, {}
    report, data = attach(report, path)
    return report, {Path(path): ("records file", data)}


__all__ = ["planned_records", "records_option", "with_records"]
