"""Dataset: rows and their integer labels (a table's schema and row places beside them), hashed by value.

Where rows come from (files, factories, tables): :mod:`privgate.inputs.data` and :mod:`privgate.inputs.tables`.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Dataset:
    """Inputs ``x`` (float32, one row per example) and integer labels ``y``.

    A table (:mod:`privgate.inputs.tables`) also has its ``schema`` (columns,
    dtypes, what the codes of ``y`` stand for) and ``rows``, each row's place in
    its file (0-based), so a message can name it after sub-sampling.
    """

    x: np.ndarray
    y: np.ndarray
    source: str = "<in memory>"
    schema: Any = None
    rows: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.y)

    def subset(self, idx: np.ndarray) -> Dataset:
        rows = None if self.rows is None else self.rows[idx]
        return Dataset(self.x[idx], self.y[idx], self.source, self.schema, rows)

    def sha256(self) -> str:
        """SHA-256 of the rows as audited: dtype and shape of ``x`` and ``y``, then their bytes (a table's by value)."""
        if self.x.dtype == object:
            return table_sha256(self)
        h = hashlib.sha256()
        x, y = np.ascontiguousarray(self.x), np.ascontiguousarray(self.y)
        h.update(f"x {x.dtype.str} {x.shape}|y {y.dtype.str} {y.shape}|".encode())
        h.update(x.tobytes())
        h.update(y.tobytes())
        return h.hexdigest()


def row_hashes(d: Dataset) -> np.ndarray:
    """One 64-bit hash per row over every column and the label, by value (pandas' ``hash_pandas_object``)."""
    import pandas as pd  # a schema (or an object array) comes from pandas' readers

    if d.schema is None:  # an object array without a schema (text records): each cell by its repr
        return np.array([hashlib.blake2b(repr(tuple(r)).encode() + repr(lbl).encode(), digest_size=8).digest()
                         for r, lbl in zip(np.asarray(d.x, dtype=object).reshape(len(d), -1), d.y)])  # fmt: skip
    frame = d.schema.frame(d.x)
    frame["\0label"] = pd.Series(d.schema.label_values(d.y), dtype=object)
    return pd.util.hash_pandas_object(frame, index=False).to_numpy()


def table_sha256(d: Dataset) -> str:
    """SHA-256 of a table as audited: its schema, then every row's value hash (:func:`row_hashes`)."""
    h = hashlib.sha256()
    if d.schema is not None:
        h.update(repr(d.schema.describe()).encode())
    h.update(np.ascontiguousarray(row_hashes(d)).tobytes())
    return h.hexdigest()


__all__ = ["Dataset", "row_hashes", "table_sha256"]
