"""Audit data as tables: the rows a scikit-learn pipeline was fitted on, with their columns, dtypes and labels.

The rest (design, limits, derivations): docs/internals-inputs.md.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

import numpy as np

from privgate.errors import DataError, clip, out_of_memory, shown
from privgate.inputs.dataset import Dataset
from privgate.inputs.suggest import did_you_mean

if TYPE_CHECKING:
    import pandas as pd

#: Why attacks that perturb or learn from numeric features do not run on a table with text or category columns.
NOT_NUMERIC = (
    "'{name}' perturbs or learns from numeric features, and the table has text or category columns "
    "({columns}); it does not apply to these rows"
)
INSTALL = "pip install 'privgate[sklearn]'"


def _pandas() -> Any:
    try:
        import pandas as pd
    except ImportError:  # pragma: no cover - pandas comes with the sklearn extra
        raise DataError(f"reading tables needs pandas ({INSTALL}).") from None
    return pd


def family(dtype: Any) -> str:
    """The kind of a pandas dtype that decides whether two files' columns agree: number, bool, text, …"""
    if isinstance(dtype, np.dtype):  # numpy's own (a numeric CSV's columns): no pandas needed
        return {"b": "bool", "i": "number", "u": "number", "f": "number", "M": "date"}.get(dtype.kind, "text")
    pd = _pandas()
    t = pd.api.types
    if isinstance(dtype, pd.CategoricalDtype):
        return "category"
    if t.is_bool_dtype(dtype):
        return "bool"
    if t.is_numeric_dtype(dtype) and not t.is_complex_dtype(dtype):
        return "number"
    if t.is_datetime64_any_dtype(dtype):
        return "date"
    if t.is_string_dtype(dtype) or t.is_object_dtype(dtype):
        return "text"
    return str(dtype)


@dataclass(frozen=True)
class Schema:
    """How the columns of ``x`` read as a ``DataFrame``, and what the codes of ``y`` stand for.

    Attributes:
        columns: the feature columns, in the order of ``x``'s columns (the label column excluded).
        dtypes: their pandas dtypes.
        label: the label column's name.
        labels: the label value of each code of ``y`` (sorted); ``None``: ``y`` holds the labels themselves.
        note: why a model that takes numbers only cannot read these rows (the numeric CSV reader's sentence).
    """

    columns: tuple[Any, ...]
    dtypes: tuple[Any, ...]
    label: str = "label"
    labels: tuple[Any, ...] | None = None
    note: str | None = None

    @property
    def numeric(self) -> bool:
        """Whether every column is a number or a boolean (``x`` is then float64)."""
        return all(family(d) in ("number", "bool") for d in self.dtypes)

    def text_columns(self) -> list[Any]:
        return [c for c, d in zip(self.columns, self.dtypes) if family(d) not in ("number", "bool")]

    def frame(self, x: np.ndarray) -> pd.DataFrame:
        """The rows ``x`` as the ``DataFrame`` they were read as: these column names and dtypes.

        A value a dtype cannot hold (a perturbed, non-integer value in an integer
        column) keeps the column as float64 rather than being rounded.
        """
        pd = _pandas()
        x = np.asarray(x)
        df = pd.DataFrame(x.reshape(len(x), len(self.columns)), columns=list(self.columns), copy=False)
        wanted = {c: d for c, d in zip(self.columns, self.dtypes) if df[c].dtype != d}
        if not wanted:
            return df
        try:
            if x.dtype != object:  # float64 rows: integers and booleans only when every value is one
                return df.astype({c: d for c, d in wanted.items() if _holds(df[c].to_numpy(), d)})
            return df.astype(wanted)
        except (TypeError, ValueError):
            for c, d in wanted.items():  # a column that cannot take its dtype keeps its values: the model judges them
                with contextlib.suppress(TypeError, ValueError):
                    df[c] = df[c].astype(d)
            return df

    def label_values(self, y: np.ndarray) -> np.ndarray:
        """The label value of each row (``y`` decoded)."""
        y = np.asarray(y)
        return y if self.labels is None else np.asarray(self.labels, dtype=object)[y]

    def describe(self) -> dict[str, Any]:
        shown_labels = None if self.labels is None else [_plain(v) for v in self.labels[:50]]
        return {
            "columns": [str(c) for c in self.columns],
            "dtypes": [str(d) for d in self.dtypes],
            "label_column": str(self.label),
            "labels": shown_labels,
        }


def _holds(values: np.ndarray, dtype: Any) -> bool:
    """Whether float ``values`` fit ``dtype`` without rounding (an integer or boolean column)."""
    kind = getattr(dtype, "kind", "f")
    finite = values[np.isfinite(values)]
    if kind in "iu":
        return bool(np.all(np.isfinite(values)) and np.all(finite == np.round(finite)))
    if kind == "b":
        return bool(np.all(np.isin(values, (0.0, 1.0))))
    return True


def _plain(v: Any) -> Any:
    """A label value as JSON holds it."""
    return v.item() if isinstance(v, np.generic) else v


# --------------------------------------------------------------------------- reading


def read_parquet(p: Path, f: BinaryIO, role: str, label_column: str) -> Dataset:
    """A Parquet table (``f``: the open file), refused when nested or larger decoded than privgate reads
    (:func:`privgate.inputs.tablesize.check_parquet`) before its rows are materialised."""
    pd = _pandas()
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise DataError(f"{p}: reading Parquet needs pyarrow ({INSTALL}).") from None
    from privgate.inputs.tablesize import check_parquet

    try:
        check_parquet(pq.ParquetFile(f), f, p)
        f.seek(0)
        frame = pd.read_parquet(f, engine="pyarrow")
    except DataError:
        raise
    except Exception as exc:  # noqa: BLE001 - pyarrow raises its own types for foreign or damaged files
        if out_of_memory(exc):
            raise
        raise DataError(f"{p}: not a readable Parquet file ({_first(exc)}).") from None
    return from_frame(frame, None, str(p), role, label_column)


def read_csv(p: Path, f: BinaryIO, role: str, label_column: str, note: str | None) -> Dataset:
    """A CSV (``f``: the open file, its size checked) read with pandas' type inference (text columns stay text);
    ``note``: the numeric reader's sentence."""
    pd = _pandas()
    try:
        f.seek(0)
        frame = pd.read_csv(f, encoding="utf-8", skipinitialspace=True)
    except Exception as exc:  # noqa: BLE001 - pandas' parser errors, a decoding error
        if out_of_memory(exc):
            raise
        raise DataError(f"{p}: cannot read CSV ({_first(exc)}).") from None
    frame.columns = [c.strip() if isinstance(c, str) else c for c in frame.columns]
    return from_frame(frame, None, str(p), role, label_column, note)


def _first(exc: BaseException) -> str:
    """The first sentence of a library's error message, clipped (one sentence in ours)."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else exc.__class__.__name__
    return clip(text.split(". ")[0].rstrip("."), 200)


def from_frame(
    frame: Any, labels: Any, source: str, role: str, label_column: str = "label", note: str | None = None
) -> Dataset:
    """A :class:`~privgate.inputs.data.Dataset` from a ``DataFrame`` and its labels (or its label column)."""
    pd = _pandas()

    if not isinstance(frame, pd.DataFrame):
        raise DataError(f"{source}: {role} must be a pandas DataFrame, got {type(frame).__name__}.")
    cols = list(frame.columns)
    dup = next((c for i, c in enumerate(cols) if c in cols[:i]), None)
    if dup is not None:
        raise DataError(f"{source}: the column {shown(dup, 60)} appears twice.")
    if labels is None:
        if label_column not in cols:
            names = ", ".join(clip(str(c), 40) for c in cols[:12]) + (", …" if len(cols) > 12 else "")
            raise DataError(
                f"{source}: no label column {shown(label_column)} (columns: {names})"
                f"{did_you_mean(label_column, [str(c) for c in cols])}."
            )
        labels, frame = frame[label_column], frame.drop(columns=[label_column])
    lab = labels.to_numpy() if isinstance(labels, (pd.Series, pd.Index)) else np.asarray(labels)
    if lab.ndim != 1 or len(lab) != len(frame):
        raise DataError(f"{source}: {role} has {len(frame)} rows but {lab.size} labels (one per row).")
    if len(frame) == 0:
        raise DataError(f"{source}: {role} is empty.")
    if frame.shape[1] == 0:
        raise DataError(f"{source}: {role} has no feature column besides the labels.")
    codes, values = _encode_labels(lab, source, role)
    dtypes = tuple(frame.dtypes)
    odd = next(((c, d) for c, d in zip(frame.columns, dtypes) if family(d) not in _FAMILIES), None)
    if odd is not None:
        raise DataError(f"{source}: column {shown(odd[0], 60)} has dtype {odd[1]}, which privgate cannot audit.")
    schema = Schema(tuple(frame.columns), dtypes, str(label_column), values, note)
    if schema.numeric:
        x = frame.to_numpy(dtype=np.float64, na_value=np.nan)
    else:
        x = frame.to_numpy(dtype=object)
    return Dataset(x, codes, source, schema=schema, rows=np.arange(len(frame)))


_FAMILIES = ("number", "bool", "text", "category", "date")


def _encode_labels(lab: np.ndarray, source: str, role: str) -> tuple[np.ndarray, tuple[Any, ...]]:
    """``(codes, sorted label values)``; a missing label or a column of numbers and text is one sentence."""
    pd = _pandas()
    missing = pd.isna(lab)
    if missing.any():
        raise DataError(f"{source}: row {int(np.argmax(missing)) + 1} of the {role} has no label.")
    if lab.dtype.kind == "f" and np.all(lab == np.round(lab)):
        lab = lab.astype(np.int64)
    elif lab.dtype.kind not in "biuf":
        lab = np.asarray([v.item() if isinstance(v, np.generic) else v for v in lab], dtype=object)
        if {type(v) for v in lab} - {str} and any(isinstance(v, str) for v in lab):
            raise DataError(f"{source}: the {role}' labels mix text and numbers; give one kind.")
    try:
        values, codes = np.unique(lab, return_inverse=True)
    except TypeError:
        raise DataError(f"{source}: the {role}' labels cannot be ordered (values of several kinds).") from None
    return codes.astype(np.int64).reshape(-1), tuple(_plain(v) for v in values)


# --------------------------------------------------------------------------- one audit: the sets agree


def unify(sets: Sequence[tuple[str, Dataset | None]]) -> list[Dataset | None]:
    """The sets of one audit with one schema: the same columns (in the members' order), dtypes and label codes.

    Sets without a schema (arrays) are left as they are when none has one; a
    numeric table beside arrays reads as arrays (its column names dropped); a
    table with text columns or text labels beside arrays is one sentence.
    """
    given = [(role, d) for role, d in sets if d is not None]
    tables = [(role, d) for role, d in given if d.schema is not None]
    if not tables:
        return [d for _, d in sets]
    if len(tables) < len(given):
        return _as_arrays(sets, tables, given)
    ref_role, ref = tables[0]
    assert ref.schema is not None
    columns = ref.schema.columns
    dtypes = list(ref.schema.dtypes)
    reordered: dict[int, np.ndarray] = {}
    for role, d in tables[1:]:
        s = d.schema
        assert s is not None
        missing = [c for c in columns if c not in s.columns]
        extra = [c for c in s.columns if c not in columns]
        if missing or extra:
            what = f"have no column {shown(missing[0], 60)}" if missing else f"have a column {shown(extra[0], 60)}"
            raise DataError(
                f"{d.source}: the {role} {what}, which the {ref_role} ({ref.source}) {'have' if missing else 'lack'}."
            )
        order = [s.columns.index(c) for c in columns]
        reordered[id(d)] = d.x[:, order] if order != list(range(len(columns))) else d.x
        for i, c in enumerate(columns):
            dtypes[i] = _agree(dtypes[i], s.dtypes[order[i]], c, (ref_role, ref.source), (role, d.source))
    union = _label_union(tables)
    out: list[Dataset | None] = []
    for _, d in sets:
        if d is None:
            out.append(None)
            continue
        assert d.schema is not None
        x = reordered.get(id(d), d.x)
        y = d.y
        if union is not None:
            y = np.searchsorted(np.asarray(union, dtype=object), d.schema.label_values(d.y).astype(object))
        schema = replace(d.schema, columns=columns, dtypes=tuple(dtypes), labels=union)
        if schema.numeric and x.dtype == object:
            x = schema.frame(x).to_numpy(dtype=np.float64, na_value=np.nan)
        out.append(replace(d, x=x, y=np.asarray(y, dtype=np.int64), schema=schema))
    return out


def _as_arrays(
    sets: Sequence[tuple[str, Dataset | None]], tables: list[tuple[str, Dataset]], given: list[tuple[str, Dataset]]
) -> list[Dataset | None]:
    """Arrays and tables mixed: every table numeric with integer labels reads as arrays, else one sentence."""
    arrays = [(role, d) for role, d in given if d.schema is None]
    for role, d in tables:
        s = d.schema
        assert s is not None
        if s.note:  # a CSV with a cell that is not a number, beside arrays: the numeric reader's sentence
            raise DataError(s.note)
        integer = s.labels is None or all(isinstance(v, (int, np.integer)) and v >= 0 for v in s.labels)
        if not s.numeric or not integer:
            raise DataError(
                f"{arrays[0][1].source}: the {arrays[0][0]} are arrays without column names but the {role} "
                f"({d.source}) are a table with text columns or labels; give every set as a table."
            )
    return [
        None if d is None else (d if d.schema is None else replace(d, y=d.schema.label_values(d.y).astype(np.int64),
                                                                     schema=None))
        for _, d in sets
    ]  # fmt: skip


def _agree(mine: Any, theirs: Any, column: Any, ref: tuple[str, str], other: tuple[str, str]) -> Any:
    """The dtype both files' column reads as; one sentence when they are of different kinds."""
    pd = _pandas()
    a, b = family(mine), family(theirs)
    if a == b == "number":
        return mine if mine == theirs else np.dtype(np.float64)
    if a == b == "category":
        if mine.ordered != theirs.ordered:
            raise DataError(f"{other[1]}: column {shown(column, 60)} is an ordered category in one file only.")
        cats = list(mine.categories) + [c for c in theirs.categories if c not in set(mine.categories)]
        return pd.CategoricalDtype(cats, ordered=mine.ordered)
    if a == b or {a, b} == {"text", "category"}:
        return mine
    raise DataError(
        f"{other[1]}: column {shown(column, 60)} holds {_plural(b)} in the {other[0]} but {_plural(a)} in the "
        f"{ref[0]} ({ref[1]}); give it one type in every file."
    )


def _plural(kind: str) -> str:
    return {"number": "numbers", "bool": "booleans", "category": "categories", "date": "dates"}.get(kind, kind)


def _label_union(tables: list[tuple[str, Dataset]]) -> tuple[Any, ...] | None:
    if all(d.schema is not None and d.schema.labels is None for _, d in tables):
        return None
    values = np.concatenate([np.asarray(d.schema.label_values(d.y), dtype=object) for _, d in tables if d.schema])
    kinds = {isinstance(v, str) for v in values}
    if len(kinds) > 1:
        raise DataError(
            f"{tables[0][1].source}: the label column {shown(tables[0][1].schema.label)} holds text in one file "  # type: ignore[union-attr]
            "and numbers in another; give it one type in every file."
        )
    return tuple(_plain(v) for v in np.unique(values))


def not_numeric(x: np.ndarray, target: Any, name: str) -> str | None:
    """Why attack ``name`` (which needs numeric features) cannot run on rows ``x``; ``None`` when it can.

    ``target``: what the attack queries (a :class:`~privgate.inputs.target.Target`, or any stand-in for one);
    the table's text columns are named from its model's schema when it has one.
    """
    if np.asarray(x).dtype != object:
        return None
    schema = getattr(getattr(target, "model", None), "schema", None)
    cols = schema.text_columns() if schema is not None else []
    listed = ", ".join(shown(c, 40) for c in cols[:5]) + (", …" if len(cols) > 5 else "") if cols else "text"
    return NOT_NUMERIC.format(name=name, columns=listed)


__all__ = [
    "NOT_NUMERIC",
    "Schema",
    "family",
    "from_frame",
    "not_numeric",
    "read_csv",
    "read_parquet",
    "unify",
]
