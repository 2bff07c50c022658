"""AuditData: known members and non-members of the target's training set.

The rest (design, limits, derivations): docs/internals-inputs.md.
"""

from __future__ import annotations

import csv
import hashlib
import io
import sys
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

import numpy as np

from privgate.errors import DataError, PrivgateError, clip, out_of_memory, shown
from privgate.inputs.dataset import Dataset, row_hashes
from privgate.inputs.entrypoints import import_factory
from privgate.inputs.suggest import did_you_mean
from privgate.inputs.textfile import open_regular

if TYPE_CHECKING:
    from privgate.inputs.target import Target

#: Members/non-members ratio above which the larger set is sub-sampled.
IMBALANCE_RATIO = 2.0


def _as_array(v: Any) -> np.ndarray:
    """``v`` as a NumPy array; a torch tensor (only possible once torch is imported) is detached first."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(v, torch.Tensor):
        return v.detach().cpu().numpy()
    return np.asarray(v)


def _as_dataset(x: Any, y: Any, source: str, role: str) -> Dataset:
    if type(x).__name__ == "DataFrame" and "pandas" in type(x).__module__:  # a table (pandas not imported here)
        from privgate.inputs.tables import from_frame

        return from_frame(x, y, source, role)
    try:
        xa, ya = _as_array(x), _as_array(y)
    except Exception as exc:
        raise DataError(f"{source}: {role} could not be read as arrays ({exc.__class__.__name__}).") from None
    if xa.dtype.kind not in "biuf":
        raise DataError(f"{source}: {role} inputs must be numeric, got dtype {xa.dtype}.")
    if xa.ndim < 2:
        raise DataError(f"{source}: {role} inputs must have one row per example (2-D or more), got shape {xa.shape}.")
    if ya.ndim != 1:
        raise DataError(f"{source}: {role} labels must be 1-D, got shape {ya.shape}.")
    if len(xa) != len(ya):
        raise DataError(f"{source}: {role} has {len(xa)} inputs but {len(ya)} labels.")
    if len(ya) == 0:
        raise DataError(f"{source}: {role} is empty.")
    if ya.dtype.kind == "f":
        if not np.all(np.isfinite(ya)) or not np.all(ya == np.round(ya)):
            raise DataError(f"{source}: {role} labels must be integer class indices.")
    elif ya.dtype.kind not in "biu":
        raise DataError(f"{source}: {role} labels must be integer class indices, got dtype {ya.dtype}.")
    ya = ya.astype(np.int64)
    if ya.min() < 0:
        raise DataError(f"{source}: {role} has negative labels (min {ya.min()}); labels must be class indices 0..K-1.")
    xa = xa.astype(np.float32, copy=False)  # no second copy of float32 data
    bad = ~np.isfinite(xa).reshape(len(xa), -1).all(axis=1)
    if bad.any():
        raise DataError(
            f"{source}: {role} has {int(bad.sum())} row(s) with NaN or infinite values (first at row "
            f"{int(np.argmax(bad))})."
        )
    return Dataset(xa, ya, source)


def _load_npz(p: Path, f: BinaryIO, role: str) -> Dataset:
    from privgate.inputs.npzlimits import check_npz

    check_npz(p, source=f)  # declared shapes and sizes, before numpy allocates anything
    try:
        f.seek(0)
        with np.load(f, allow_pickle=False) as z:
            keys = set(z.files)
            if not {"x", "y"} <= keys:
                raise DataError(f"{p}: expected arrays 'x' and 'y' in the .npz file, found {sorted(keys) or 'none'}.")
            return _as_dataset(z["x"], z["y"], str(p), role)
    except (zipfile.BadZipFile, OSError, ValueError, EOFError, zlib.error) as exc:
        raise DataError(f"{p}: not a readable .npz file ({exc.__class__.__name__}).") from None


def _load_pt(p: Path, f: BinaryIO, role: str) -> Dataset:
    import torch  # only a .pt data file needs it: refused runs stay free of the torch import

    try:
        obj = torch.load(f, map_location="cpu", weights_only=True)
    except Exception as exc:
        raise DataError(
            f"{p}: not a readable tensor file, or it holds pickled objects ({exc.__class__.__name__})."
        ) from None
    if not isinstance(obj, dict) or not {"x", "y"} <= set(obj):
        raise DataError(f"{p}: expected a dict with tensors 'x' and 'y'.")
    return _as_dataset(obj["x"], obj["y"], str(p), role)


def _load_csv(p: Path, f: BinaryIO, role: str, label_column: str) -> Dataset:
    """A CSV with a header row; every error names the file's line (1-based, as an editor shows it) and the column."""
    from privgate.inputs.tablesize import check_csv

    check_csv(f, p)  # its lines and columns bound what it decodes to, before a cell is parsed
    text = io.TextIOWrapper(f, encoding="utf-8", newline="")
    try:
        reader = csv.reader(text)
        rows = [(reader.line_num, r) for r in reader]
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise DataError(f"{p}: cannot read CSV ({exc.__class__.__name__}: {clip(str(exc))}).") from None
    finally:
        text.detach()  # the file stays open: the table reader may read it again
    rows = [(line, r) for line, r in rows if r and any(v.strip() for v in r)]  # blank lines are not rows
    if len(rows) < 2:
        raise DataError(f"{p}: CSV needs a header row and at least one data row.")
    header_line, raw_header = rows[0]
    header = [h.strip() for h in raw_header]
    if label_column not in header:
        shown_cols = ", ".join(clip(h, 40) for h in header[:12]) + (", …" if len(header) > 12 else "")
        raise DataError(
            f"{p}: no label column {shown(label_column)} in the CSV header (line {header_line}; columns: "
            f"{shown_cols}){did_you_mean(label_column, header)}."
        )
    li = header.index(label_column)
    body = rows[1:]
    for line, r in body:
        if len(r) != len(header):
            raise DataError(f"{p}: line {line} has {len(r)} values but the header has {len(header)} columns.")

    def cell(i: int, j: int) -> str:
        return f"{p}: line {body[i][0]}, column {shown(header[j])}: {shown(body[i][1][j].strip())}"

    try:
        table = np.array([r for _, r in body], dtype=np.float64)
    except ValueError:  # a cell that is not a number: a table of text columns (privgate.inputs.tables)
        from privgate.inputs.tables import read_csv

        for i, (_, r) in enumerate(body):
            for j, v in enumerate(r):
                try:
                    float(v)
                except ValueError:
                    return read_csv(p, f, role, label_column, f"{cell(i, j)} is not a number.")
        raise
    bad = np.argwhere(~np.isfinite(table))
    if len(bad):
        raise DataError(f"{cell(*bad[0])} is not a finite number.")
    labels = table[:, li]
    bad = np.flatnonzero((labels < 0) | (labels != np.round(labels)))
    if len(bad):
        raise DataError(f"{cell(int(bad[0]), li)} is not a class label (0, 1, 2, …).")
    found = _as_dataset(np.delete(table, li, axis=1), labels, str(p), role)
    columns = tuple(h for j, h in enumerate(header) if j != li)
    integral = np.all(table == np.round(table), axis=0)
    dtypes = tuple(np.dtype(np.int64 if integral[j] else np.float64) for j in range(len(header)) if j != li)
    from privgate.inputs.tables import Schema  # the names a pipeline fitted on a DataFrame selects columns by

    return Dataset(found.x, found.y, found.source, Schema(columns, dtypes, label_column), np.arange(len(found)))


def load_dataset(
    spec: str | Path, role: str = "data", label_column: str = "label", base: Path | None = None
) -> Dataset:
    """Load one set from a path or a ``module:function`` factory returning ``(x, y)``."""
    s = str(spec)
    base = base or Path.cwd()
    p = Path(s) if Path(s).is_absolute() else base / s
    if ":" in s and not p.exists() and Path(s).suffix.lower() not in (".npz", ".pt", ".csv", ".parquet"):
        fn = import_factory(s, [base])
        try:
            out = fn() if callable(fn) else fn
        except PrivgateError:
            raise
        except Exception as exc:
            raise DataError(f"{s}: the data factory failed ({exc.__class__.__name__}: {exc}).") from None
        if isinstance(out, dict) and {"x", "y"} <= set(out):
            out = (out["x"], out["y"])
        if type(out).__name__ == "DataFrame" and "pandas" in type(out).__module__:  # a table with its label column
            from privgate.inputs.tables import from_frame

            return from_frame(out, None, s, role, label_column)
        if not (isinstance(out, (tuple, list)) and len(out) == 2):
            raise DataError(f"{s}: a data factory must return (x, y), got {type(out).__name__}.")
        return _as_dataset(out[0], out[1], s, role)
    if not p.exists():
        raise DataError(f"{p}: {role} file not found.")
    if p.is_dir():
        raise DataError(f"{p}: is a directory, expected a {role} file (.npz, .pt, .csv or .parquet).")
    suffix = p.suffix.lower()
    if suffix not in (".npz", ".pt", ".csv", ".parquet", ".pq"):
        raise DataError(
            f"{p}: unsupported {role} format '{suffix}' (use .npz, .pt, .csv, .parquet or module:function)."
        )
    with open_regular(p, f"the {role} file", DataError) as f:  # a FIFO or a device behind the name: refused
        if suffix == ".npz":
            return _load_npz(p, f, role)
        if suffix == ".pt":
            return _load_pt(p, f, role)
        if suffix == ".csv":
            return _load_csv(p, f, role, label_column)
        from privgate.inputs.tables import read_parquet

        return read_parquet(p, f, role, label_column)


def _row_hashes(d: Dataset) -> np.ndarray:
    if d.x.dtype == object or (d.schema is not None and d.schema.labels is not None):  # by value, with the label
        return row_hashes(d)
    flat = np.ascontiguousarray(d.x.reshape(len(d), -1))
    return np.array(
        [
            hashlib.blake2b(row.tobytes() + int(lbl).to_bytes(8, "little", signed=True), digest_size=12).digest()
            for row, lbl in zip(flat, d.y)
        ]
    )


@dataclass
class AuditData:
    """Members, non-members and optional population data, validated on construction.

    Args:
        members: examples the target was trained on.
        nonmembers: examples from the same distribution it never saw.
        population: more same-distribution data for reference models.
        seed: drives the sub-sampling of an unbalanced audit set.
        drop_duplicates: drop rows on both sides from both, and repeats within a side, rather than refuse them.
    """

    members: Dataset
    nonmembers: Dataset
    population: Dataset | None = None
    seed: int = 0
    warnings: list[str] = field(default_factory=list)
    balanced_from: dict[str, int] | None = None
    #: each audit member's row in the members file as given (they differ after sub-sampling or dropping)
    member_rows: np.ndarray | None = None
    #: each audit non-member's row in the non-members file as given
    nonmember_rows: np.ndarray | None = None
    #: drop rows on both sides from both, and repeats within a side, rather than refuse them
    drop_duplicates: bool = False
    #: what ``drop_duplicates`` removed (:class:`privgate.inputs.duplicates.Dropped`)
    dropped: Any = None
    #: a table's columns the model was not fitted on, left out of the audit
    left_out: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        from privgate.inputs.tables import unify  # tables: one schema; arrays: unchanged

        roles = [("members", self.members), ("non-members", self.nonmembers), ("population", self.population)]
        self.members, self.nonmembers, self.population = unify(roles)  # type: ignore[assignment]
        sets = [("members", self.members), ("non-members", self.nonmembers)]
        if self.population is not None:
            sets.append(("population", self.population))
        shape = self.members.x.shape[1:]
        for role, d in sets[1:]:
            if d.x.shape[1:] != shape:
                raise DataError(f"{d.source}: {role} rows have shape {d.x.shape[1:]} but members rows have {shape}.")
        self.member_rows, self.nonmember_rows = np.arange(len(self.members)), np.arange(len(self.nonmembers))
        self.settle_overlap()
        n1, n0 = len(self.members), len(self.nonmembers)
        if max(n1, n0) > IMBALANCE_RATIO * min(n1, n0):
            rng = np.random.default_rng(np.random.SeedSequence([self.seed, 0xBA1]))
            k = min(n1, n0)
            self.balanced_from = {"members": n1, "nonmembers": n0}
            if n1 > n0:
                chosen = np.sort(rng.choice(n1, k, replace=False))
                self.member_rows = self.member_rows[chosen]
                self.members = self.members.subset(chosen)
            else:
                chosen = np.sort(rng.choice(n0, k, replace=False))
                self.nonmember_rows = self.nonmember_rows[chosen]
                self.nonmembers = self.nonmembers.subset(chosen)
            self.warnings.append(
                f"members ({n1}) and non-members ({n0}) are very unbalanced; sub-sampled both to {k} with "
                f"seed {self.seed}"
            )

    def settle_overlap(self, where: str = "") -> None:
        """Refuse rows both members and non-members, or drop them from both sides (``drop_duplicates``:
        :mod:`privgate.inputs.duplicates`); ``where``: what the rows were compared on, for the refusal."""
        from privgate.inputs.duplicates import settle

        found = settle(self.members, self.nonmembers, _row_hashes, self.drop_duplicates, where)
        if found is None:
            return
        keep_m, keep_n, dropped = found
        self.members, self.nonmembers = self.members.subset(np.flatnonzero(keep_m)), self.nonmembers.subset(keep_n)
        self.member_rows = (self.member_rows if self.member_rows is not None else np.arange(len(keep_m)))[keep_m]
        self.nonmember_rows = (self.nonmember_rows if self.nonmember_rows is not None else np.arange(len(keep_n)))[
            keep_n
        ]
        self.dropped = dropped if self.dropped is None else self.dropped + dropped
        if dropped.total:
            self.warnings = [w for w in self.warnings if not w.startswith("--drop-duplicates")]
            self.warnings.append(self.dropped.sentence())

    def pooled(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(x, y, membership) of the audit examples, members first."""
        x = np.concatenate([self.members.x, self.nonmembers.x])
        y = np.concatenate([self.members.y, self.nonmembers.y])
        m = np.r_[np.ones(len(self.members), bool), np.zeros(len(self.nonmembers), bool)]
        return x, y, m

    def check_against(self, target: Target) -> None:
        """Check that the data fits the model: features run through it, labels in range.

        Tables are aligned with the model first (:func:`privgate.inputs.table_fit.fit_to_model`): a
        scikit-learn pipeline's columns and ``classes_``, every row scored once.
        """
        if any(d is not None and d.schema is not None for _, d in self._sets()):
            from privgate.inputs.table_fit import fit_to_model

            fit_to_model(self, target)
        probe = self.members.x[:2]
        try:
            proba = target.predict_proba(probe)
        except PrivgateError:
            raise
        except Exception as exc:
            if out_of_memory(exc):
                raise
            msg = str(exc).strip().splitlines()[-1][:200] if str(exc).strip() else exc.__class__.__name__
            raise DataError(
                f"{self.members.source}: the model cannot run on the audit data (rows of shape "
                f"{probe.shape[1:]}): {msg}."
            ) from None
        n_classes = proba.shape[1]
        sets = [("members", self.members), ("non-members", self.nonmembers)]
        if self.population is not None:
            sets.append(("population", self.population))
        for role, d in sets:
            if int(d.y.max()) >= n_classes:
                raise DataError(
                    f"{d.source}: {role} labels go up to {int(d.y.max())} but the model has {n_classes} "
                    f"classes (labels 0..{n_classes - 1})."
                )

    def fingerprint(self) -> str:
        """SHA-256 over the members, non-members and population as audited (after any balancing sub-sample).

        Two reports with the same fingerprint measured the same examples, so
        ``privgate diff`` can compare their numbers (:mod:`privgate.report.comparable`).
        """
        parts = [f"{role}:{d.sha256() if d is not None else '-'}" for role, d in self._sets()]
        return hashlib.sha256("|".join(parts).encode()).hexdigest()

    def _sets(self) -> list[tuple[str, Dataset | None]]:
        return [("members", self.members), ("nonmembers", self.nonmembers), ("population", self.population)]

    def describe(self) -> dict[str, Any]:
        """What the report records of the data: sources, sizes, SHA-256 per set and of the whole audit set."""
        sets = {
            role: ({"source": d.source, "n": len(d), "sha256": d.sha256()} if d is not None else None)
            for role, d in self._sets()
        }
        out: dict[str, Any] = {
            **sets,
            "sha256": self.fingerprint(),
            "features": list(self.members.x.shape[1:]),
            "warnings": list(self.warnings),
        }
        if self.members.schema is not None:  # a table: its columns, dtypes and labels
            out["table"] = {**self.members.schema.describe(), **({"left_out": list(self.left_out)} if self.left_out
                                                                  else {})}  # fmt: skip
        if self.balanced_from:
            out["balanced_from"] = self.balanced_from
        if self.dropped is not None:
            out["duplicates"] = self.dropped.describe()
        return out
