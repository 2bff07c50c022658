"""What a table decodes to, bounded before it is materialised: Parquet from its footer and compact reads, CSV by a scan.

The rest (design, limits, derivations): docs/internals-inputs.md.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from privgate.errors import DataError, clip, shown

#: The most a table may decode to (rows × cells and strings, as privgate holds them): 2 GiB.
MAX_TABLE_BYTES = 2 << 30
#: Bytes of one cell: a number in a float64 array; a Python object (a string, a boxed number) and its pointer.
CELL_NUMBER, CELL_OBJECT = 8, 64
#: The longest CSV line read (a line of a table, not a document).
MAX_LINE = 1 << 20
#: Decoded bytes of one batch of a column whose values may share prefixes (DELTA_BYTE_ARRAY), at worst.
BATCH_BYTES = 64 << 20
_SCAN = 1 << 20


def _gib(n: float) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.0f} MiB"


def _refuse(p: Path, size: str, most: int) -> DataError:
    return DataError(f"{p}: the table decodes to {size}, more than the {_gib(most)} privgate reads; audit a sample "
                     "of its rows.")  # fmt: skip


# --------------------------------------------------------------------------- Parquet


def _flat(t: Any) -> bool:
    """Whether an Arrow type is one privgate reads as a column: a number, boolean, text, category, date or time."""
    import pyarrow as pa

    ty = pa.types
    if ty.is_dictionary(t):
        return _flat(t.value_type) and not ty.is_dictionary(t.value_type)
    return any(
        f(t)
        for f in (ty.is_integer, ty.is_floating, ty.is_boolean, ty.is_string, ty.is_large_string, ty.is_binary,
                  ty.is_large_binary, ty.is_fixed_size_binary, ty.is_timestamp, ty.is_date, ty.is_decimal, ty.is_null)
    ) or str(t) in ("string_view", "binary_view")  # fmt: skip


def _variable(t: Any) -> bool:
    """Whether values of an Arrow type have their own lengths (text, bytes): decoded sizes the footer cannot tell."""
    import pyarrow as pa

    ty = pa.types
    t = t.value_type if ty.is_dictionary(t) else t
    return (
        ty.is_string(t)
        or ty.is_large_string(t)
        or ty.is_binary(t)
        or ty.is_large_binary(t)
        or str(t)
        in (
            "string_view",
            "binary_view",
        )
    )


def _decoded(col: Any) -> int:
    """The decoded bytes of a column's values (a ChunkedArray, dictionary chunks counted as their rows point)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    total = 0
    for chunk in col.chunks:
        if pa.types.is_dictionary(chunk.type):
            lengths = pc.fill_null(pc.binary_length(chunk.dictionary), 0).to_numpy(zero_copy_only=False)
            idx = chunk.indices.drop_null().to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
            total += int(np.bincount(idx, minlength=len(lengths)) @ lengths.astype(np.int64))
        else:
            total += int(pc.sum(pc.binary_length(chunk)).as_py() or 0)
    return total


def check_parquet(pf: Any, source: BinaryIO, p: Path, most: int = MAX_TABLE_BYTES) -> None:
    """Refuse, in one sentence, a Parquet table that is nested or decodes to more than ``most`` bytes.

    Args:
        pf: the file's ``pyarrow.parquet.ParquetFile`` (its footer read).
        source: the open file, to read its text columns again as dictionaries.
        p: its path, for messages.
        most: the largest decoded size accepted.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema, meta = pf.schema_arrow, pf.metadata
    for field in schema:
        if not _flat(field.type):
            kind = "a nested type" if pa.types.is_nested(field.type) else "a type"
            raise DataError(
                f"{p}: column {shown(field.name, 60)} holds {clip(str(field.type), 80)}, {kind} privgate cannot "
                "audit; it reads flat columns of numbers, booleans, text, categories and dates."
            )
    rows, columns = meta.num_rows, len(schema)
    numeric = all(pa.types.is_integer(f.type) or pa.types.is_floating(f.type) or pa.types.is_boolean(f.type)
                  for f in schema)  # fmt: skip
    cells = rows * columns * (CELL_NUMBER if numeric else CELL_OBJECT)
    encoded = sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups))
    if max(cells, encoded) > most:
        what = f"{rows:,} rows × {columns} columns" if cells >= encoded else "its pages, uncompressed"
        raise _refuse(p, f"at least {_gib(max(cells, encoded))} ({what})", most)
    text = [f.name for f in schema if _variable(f.type)]
    if not text:
        return
    source.seek(0)
    compact = pq.ParquetFile(source, read_dictionary=text)  # a dictionary page stays one copy of each value
    prefixed = _prefixed(meta, text)
    total = cells
    for name in text:
        if name in prefixed:  # values built from the previous one's prefix: read in batches of bounded size
            rows_per = max(1, BATCH_BYTES // max(prefixed[name], 1))
            plain = pq.ParquetFile(source)  # (pyarrow reads such a column as values, not as a dictionary)
            parts = (b.column(0) for b in plain.iter_batches(batch_size=rows_per, columns=[name]))
            sizes = (_decoded(pa.chunked_array([a])) for a in parts)
        else:
            sizes = iter([_decoded(compact.read(columns=[name]).column(0))])
        held = 0
        for size in sizes:
            total, held = total + size, held + size
            if total > most:
                raise _refuse(p, f"more than {_gib(total)} (its text column {shown(name, 60)}: {_gib(held)})", most)


def _prefixed(meta: Any, text: list[str]) -> dict[str, int]:
    """Text columns with a prefix-encoded chunk (DELTA_BYTE_ARRAY), each with its largest chunk's uncompressed size
    (no value of a chunk is longer)."""
    out: dict[str, int] = {}
    for g in range(meta.num_row_groups):
        rg = meta.row_group(g)
        for j in range(rg.num_columns):
            c = rg.column(j)
            if c.path_in_schema in text and "DELTA_BYTE_ARRAY" in c.encodings:
                out[c.path_in_schema] = max(out.get(c.path_in_schema, 0), c.total_uncompressed_size)
    return out


# --------------------------------------------------------------------------- CSV


def check_csv(f: BinaryIO, p: Path, most: int = MAX_TABLE_BYTES) -> None:
    """Refuse a CSV with a line longer than :data:`MAX_LINE` or whose rows could decode to more than ``most`` bytes.

    One pass over the bytes (a MiB at a time): the lines, the longest one, and the header's separators; the
    bound is lines × columns × :data:`CELL_OBJECT` plus the file (every string is in it).
    """
    size = os.fstat(f.fileno()).st_size
    f.seek(0)
    lines, start, pos, header = 0, 0, 0, -1  # complete lines, where the open one starts, bytes read, header's end
    while block := f.read(_SCAN):
        ends = np.flatnonzero(np.frombuffer(block, dtype=np.uint8) == 10) + pos
        pos += len(block)
        lengths = ends - np.r_[start, ends[:-1] + 1][: len(ends)]
        over = np.flatnonzero(lengths > MAX_LINE)
        if len(ends) and header < 0:
            header = int(ends[0])
        if len(ends):
            start = int(ends[-1]) + 1
        if len(over) or pos - start > MAX_LINE:
            line = lines + (int(over[0]) if len(over) else len(ends)) + 1
            raise DataError(f"{p}: line {line} is longer than {_gib(MAX_LINE)}, more than a line of a table holds.")
        lines += len(ends)
    f.seek(0)
    first = f.read(pos if header < 0 else header)
    columns = first.count(b",") + 1
    rows = lines + (pos > start)
    bound = rows * columns * CELL_OBJECT + size
    if bound > most:
        raise _refuse(p, f"up to {_gib(bound)} ({rows:,} lines × {columns} columns)", most)
    f.seek(0)


__all__ = ["BATCH_BYTES", "CELL_NUMBER", "CELL_OBJECT", "MAX_LINE", "MAX_TABLE_BYTES", "check_csv", "check_parquet"]
