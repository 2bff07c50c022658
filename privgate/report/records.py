"""Every audited row's membership scores as a table (``--records FILE``): CSV or Parquet, the JSON names it.

One row per audited row, members and non-members, calibration and evaluation
split: ``row`` (the 0-based index in its own input file as given, before any
sub-sampling), ``side``, ``split``, ``label`` (as the model knows it), then
``score:ATTACK`` per attack (higher = more likely member) and, per
``tpr_at_fpr`` check, ``flagged:ATTACK@FPR``: whether the score reaches the
threshold calibrated on the calibration non-members at that FPR. The JSON
report holds only a reference (path, rows, columns), never per-row data.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from privgate.errors import PrivgateError
from privgate.stats.membership import threshold_at_fpr

#: The file types ``--records`` writes, by extension.
EXTENSIONS = (".csv", ".parquet")
INSTALL = "pip install 'privgate[sklearn]'"
BASE = "0-based index in its own input file (members or non-members) as given, before any sub-sampling"


class RecordsError(PrivgateError):
    """A records file that cannot be written as asked (its extension, a missing library)."""


def check_path(path: str | Path, flag: str = "--records") -> None:
    """Refuse, in one sentence, a records path whose extension is not .csv/.parquet, or Parquet without pyarrow."""
    ext = Path(path).suffix.lower()
    if ext not in EXTENSIONS:
        raise RecordsError(f"{flag} {path}: unknown extension '{ext}'; name a .csv or .parquet file.")
    if ext == ".parquet":
        import importlib.util

        if importlib.util.find_spec("pyarrow") is None:
            raise RecordsError(f"{flag} {path}: writing Parquet needs pyarrow ({INSTALL}); or name a .csv file.")


def build(
    rows: np.ndarray,
    membership: np.ndarray,
    calibration: np.ndarray,
    labels: Sequence[Any],
    scores: Mapping[str, np.ndarray],
    thresholds: Mapping[tuple[str, float], float] | None = None,
) -> dict[str, list[Any]]:
    """The records table as columns (module docstring), in the order of the members file then the non-members file.

    ``thresholds`` maps (attack, FPR) to a calibrated score threshold; ``labels`` are the labels as shown.
    """
    membership = np.asarray(membership, dtype=bool)
    order = np.lexsort((np.asarray(rows), ~membership))  # members first, each side by its row
    cols: dict[str, list[Any]] = {
        "row": [int(v) for v in np.asarray(rows)[order]],
        "side": ["member" if m else "non-member" for m in membership[order]],
        "split": ["calibration" if c else "evaluation" for c in np.asarray(calibration, dtype=bool)[order]],
        "label": [labels[i] for i in order],
    }
    for name, s in scores.items():
        cols[f"score:{name}"] = [float(v) for v in np.asarray(s, dtype=float)[order]]
    for (name, fpr), t in (thresholds or {}).items():
        if name in scores:
            cols[f"flagged:{name}@{fpr:g}"] = [bool(v) for v in (np.asarray(scores[name], dtype=float) >= t)[order]]
    return cols


def thresholds_of(
    checks: Sequence[Any], scores: Mapping[str, np.ndarray], membership: np.ndarray, calibration: np.ndarray
) -> dict[tuple[str, float], float]:
    """Each ``tpr_at_fpr`` check's attack and FPR → the threshold calibrated on the calibration non-members."""
    cal_out = np.asarray(calibration, dtype=bool) & ~np.asarray(membership, dtype=bool)
    out: dict[tuple[str, float], float] = {}
    for c in checks:
        name = c.chosen_attack or c.attack
        if c.metric == "tpr_at_fpr" and c.fpr and name in scores and cal_out.any():
            out[(name, float(c.fpr))] = threshold_at_fpr(np.asarray(scores[name], dtype=float)[cal_out], float(c.fpr))
    return out


def encode(columns: Mapping[str, list[Any]], path: str | Path) -> bytes:
    """The table as the bytes of a CSV or Parquet file, by ``path``'s extension (checked: :func:`check_path`)."""
    check_path(path)
    if Path(path).suffix.lower() == ".csv":
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(list(columns))
        w.writerows(zip(*columns.values()))
        return buf.getvalue().encode()
    import pyarrow as pa
    import pyarrow.parquet as pq

    sink = pa.BufferOutputStream()
    pq.write_table(pa.table(dict(columns)), sink)
    return sink.getvalue().to_pybytes()


def attach(report: Any, path: str | Path, flag: str = "--records") -> tuple[Any, bytes]:
    """``report`` referencing the records file at ``path``, and that file's bytes (nothing is written here)."""
    check_path(path, flag)
    columns = report.records_table()
    if columns is None:
        raise RecordsError(f"{flag} {path}: this kind of target has no per-row records (a classifier has).")
    return report.model_copy(update={"records": reference(columns, path)}), encode(columns, path)


def reference(columns: Mapping[str, list[Any]], path: str | Path) -> dict[str, Any]:
    """What the JSON report says of the records file: its path, rows, columns and the base of ``row``."""
    n = len(next(iter(columns.values()), []))
    return {"path": str(path), "rows": n, "columns": list(columns), "row_base": BASE}


__all__ = [
    "BASE",
    "EXTENSIONS",
    "RecordsError",
    "attach",
    "build",
    "check_path",
    "encode",
    "reference",
    "thresholds_of",
]
