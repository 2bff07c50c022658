"""The model meets the table: columns in the model's order, labels through its ``classes_``, every row scored once.

The rest (design, limits, derivations): docs/internals-inputs.md.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from privgate.errors import DataError, out_of_memory, shown
from privgate.inputs.suggest import did_you_mean
from privgate.inputs.tables import _first, _pandas, _plain

if TYPE_CHECKING:
    from privgate.inputs.data import AuditData, Dataset
    from privgate.inputs.target import Target

#: Rows scored at once when every row is checked against the model.
SCORE_CHUNK = 4096


def fit_to_model(data: AuditData, target: Target) -> None:
    """Align every table of ``data`` with the model, in place, or say in one sentence why the model cannot read it.

    A scikit-learn model (:class:`~privgate.inputs.targets.sklearn.SklearnModel`)
    gets the columns it was fitted on, in its order (``feature_names_in_``), and
    labels mapped to its ``classes_``; it learns the frame layout
    (:meth:`SklearnModel.bind`) and scores every row once. Any other model takes
    numbers only: the numeric reader's sentence, text or a NaN is refused naming
    the row and column, and labels must be class indices.
    """
    from privgate.inputs.targets.sklearn import SklearnModel

    roles = (("members", data.members), ("non-members", data.nonmembers), ("population", data.population))
    sets = [(role, d) for role, d in roles if d is not None]
    left: list[Any] = []
    if isinstance(target.model, SklearnModel):
        left = left_out(data.members, target.model)
        done = {role: aligned(d, target.model) for role, d in sets}
        schema = done["members"].schema
        assert schema is not None
        target.model.bind(schema)
        for role, d in done.items():
            _score_all(d, target.model, role)
    else:
        done = {role: _for_numbers(d, target.fmt) for role, d in sets}
    data.members, data.nonmembers = done["members"], done["non-members"]
    data.population = done.get("population")
    if left:  # rows that differed only there are one row to the model
        listed = ", ".join(shown(c, 40) for c in left[:8]) + (f" and {len(left) - 8} more" if len(left) > 8 else "")
        data.warnings.append(
            f"the table's column(s) {listed} are not among the columns the model was fitted on (its "
            "feature_names_in_) and were left out of the audit"
        )
        data.left_out = tuple(str(c) for c in left)
        data.settle_overlap(" in the columns the model reads")


def left_out(d: Dataset, model: Any) -> list[Any]:
    """The columns of table ``d`` a scikit-learn model was not fitted on (an ID column …), in the table's order."""
    wanted = model.feature_names
    s = d.schema
    return [] if wanted is None or s is None else [c for c in s.columns if c not in set(wanted)]


def aligned(d: Dataset, model: Any) -> Dataset:
    """One table aligned with a scikit-learn model (its columns in the model's order, labels through its
    ``classes_``), without scoring its rows: what :func:`fit_to_model` does to each table of the audit, and to the
    member set a hardening refits on. The same on an aligned table."""
    s = d.schema
    assert s is not None
    wanted = model.feature_names
    x, columns, dtypes = d.x, s.columns, s.dtypes
    if wanted is not None:
        missing = [c for c in wanted if c not in s.columns]
        if missing:
            names = ", ".join(shown(str(c), 40) for c in s.columns[:12]) + (", …" if len(s.columns) > 12 else "")
            raise DataError(
                f"{d.source}: no column {shown(missing[0], 60)}, which the model was fitted on"
                f"{did_you_mean(str(missing[0]), [str(c) for c in s.columns])} (the table's columns: {names})."
            )
        order = [s.columns.index(c) for c in wanted]
        x, columns, dtypes = x[:, order], tuple(wanted), tuple(s.dtypes[i] for i in order)
    elif model.n_features is not None and model.n_features != len(s.columns):
        raise DataError(
            f"{d.source}: the model takes {model.n_features} features (it was fitted on an array without column "
            f"names) but the table has {len(s.columns)} columns besides the label."
        )
    classes = list(model.classes_)
    index = {_key(c): i for i, c in enumerate(classes)}
    values = s.label_values(d.y)
    y = np.empty(len(values), dtype=np.int64)
    for i, v in enumerate(values):
        k = index.get(_key(v))
        if k is None:
            row = int(d.rows[i]) + 1 if d.rows is not None else i + 1
            listed = ", ".join(shown(_plain(c), 40) for c in classes[:10]) + (", …" if len(classes) > 10 else "")
            raise DataError(
                f"{d.source}: row {row} has the label {shown(_plain(v), 60)}, which is not one of the model's "
                f"classes ({listed})."
            )
        y[i] = k
    schema = replace(s, columns=columns, dtypes=dtypes, labels=tuple(_plain(c) for c in classes))
    if schema.numeric and x.dtype == object:
        x = schema.frame(x).to_numpy(dtype=np.float64, na_value=np.nan)
    return replace(d, x=x, y=y, schema=schema)


def _key(v: Any) -> Any:
    """A label compared by value: 1, 1.0 and numpy's 1 are one class; text stays text."""
    v = _plain(v)
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else v


def _score_all(d: Dataset, model: Any, role: str) -> None:
    """Every row through the model once; the first row it cannot score is named (bisected)."""
    for start in range(0, len(d), SCORE_CHUNK):
        part = d.x[start : start + SCORE_CHUNK]
        exc = _fails(model, part)
        if exc is None:
            continue
        lo, hi = 0, len(part)
        while hi - lo > 1:  # the first single row that fails, when a row is at fault (else the chunk's message)
            mid = (lo + hi) // 2
            if _fails(model, part[lo:mid]) is not None:
                hi = mid
            elif _fails(model, part[mid:hi]) is not None:
                lo = mid
            else:
                break
        single = hi - lo == 1 and _fails(model, part[lo:hi]) is not None
        i = start + lo
        if single:
            row = int(d.rows[i]) + 1 if d.rows is not None else i + 1
            raise DataError(
                f"{d.source}: the model cannot score row {row} of the {role}{_missing(d, i)} ({_first(exc)})."
            )
        raise DataError(f"{d.source}: the model cannot score the {role} ({_first(exc)}).")


def _fails(model: Any, x: np.ndarray) -> BaseException | None:
    try:
        model.raw(x)
    except Exception as exc:  # noqa: BLE001 - whatever the pipeline raises on rows it cannot take
        if out_of_memory(exc):
            raise
        return exc
    return None


def _missing(d: Dataset, i: int) -> str:
    """``", where column 'age' is missing"`` when row ``i`` has a missing value."""
    pd = _pandas()
    assert d.schema is not None
    gaps = [c for c, v in zip(d.schema.columns, np.asarray(d.x[i], dtype=object)) if _isna(pd, v)]
    return f", where column {shown(gaps[0], 60)} is missing (NaN)" if gaps else ""


def _isna(pd: Any, v: Any) -> bool:
    try:
        return bool(pd.isna(v))
    except (TypeError, ValueError):
        return False


def _for_numbers(d: Dataset, fmt: str) -> Dataset:
    """A table for a model that takes numbers only: numeric, finite, with class-index labels."""
    s = d.schema
    assert s is not None
    if s.note:
        raise DataError(s.note)
    if not s.numeric:
        col = s.text_columns()[0]
        j = s.columns.index(col)
        i = next((i for i, v in enumerate(d.x[:, j]) if not _isna(_pandas(), v)), 0)
        raise DataError(
            f"{d.source}: column {shown(col, 60)} holds text ({shown(d.x[i, j], 40)} in row {i + 1}); a {fmt} "
            "model takes numbers only."
        )
    bad = np.argwhere(~np.isfinite(np.asarray(d.x, dtype=np.float64)))
    if len(bad):
        i, j = (int(v) for v in bad[0])
        raise DataError(f"{d.source}: row {i + 1}, column {shown(s.columns[j], 60)} is not a finite number.")
    values = s.label_values(d.y)
    wrong = [v for v in values if not isinstance(_plain(v), (int, np.integer)) or _plain(v) < 0]
    if wrong:
        raise DataError(
            f"{d.source}: the label {shown(_plain(wrong[0]), 60)} is not a class index (0, 1, 2, …), which a "
            f"{fmt} model needs."
        )
    return replace(d, x=np.asarray(d.x, dtype=np.float32), y=np.asarray(values, dtype=np.int64), schema=None)


__all__ = ["SCORE_CHUNK", "aligned", "fit_to_model", "left_out"]
