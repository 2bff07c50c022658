"""Hostile tables and data files (issue 41 items 5, 6 and 8): what they decode to is bounded before it is read.

Each way in is one sentence and exit 2, never exit 4 or the machine's memory: a data file behind a link to a
device, a FIFO or a folder (every format); a Parquet file whose dictionary, run-length or prefix encoding decodes to
gigabytes, or whose columns are nested; a CSV with a line of hundreds of megabytes. The attacker's way in runs
through the CLI in a subprocess under an address-space limit (``run_cli(..., memory=)``); the variants run in
process through :func:`privgate.inputs.data.load_dataset` and the bound itself with a small limit
(:mod:`privgate.inputs.tablesize`). A table with more columns than its model was fitted on (an ID column) is
audited on the model's columns, and the report names those left out.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from cases import LOSS_ONLY, run_cli

from privgate.errors import DataError
from privgate.inputs.data import load_dataset
from privgate.inputs.tablesize import check_csv, check_parquet
from privgate.inputs.text import load_texts

#: What a run may map beyond its imports: far less than any of these files decodes to.
MEMORY = 2 << 30


def _bad(r, *needles) -> str:
    assert r.returncode == 2, (r.returncode, r.stdout[-2000:], r.stderr[-2000:])
    assert "Traceback" not in r.stderr + r.stdout
    err = " ".join(r.stderr.split())
    assert err.startswith("error:") and len(err) <= 600, err[:2000]
    for n in needles:
        assert n in err, (n, err)
    return err


def _check(d: Path, members: Path, nonmembers: Path, *extra: str, memory: int | None = MEMORY):
    return run_cli(
        "check",
        str(d / "model.skops"),
        "--policy",
        str(d / "loss.yaml"),
        "--members",
        str(members),
        "--nonmembers",
        str(nonmembers),
        "--no-step-summary",
        *extra,
        cwd=d,
        memory=memory,
    )


@pytest.fixture
def id_table(tmp_path) -> Path:
    """Rows ``a`` (an ID), ``b`` and ``label`` as Parquet and CSV, and a logistic regression fitted on ``['b']``."""
    import skops.io as sio
    from sklearn.linear_model import LogisticRegression

    rng = np.random.default_rng(0)
    for name, first in (("m", 0), ("n", 1000)):
        b = rng.normal(size=80)
        frame = pd.DataFrame({"a": np.arange(first, first + 80), "b": b, "label": (b + rng.normal(size=80) > 0) * 1})
        frame.to_parquet(tmp_path / f"{name}.parquet")
        frame.to_csv(tmp_path / f"{name}.csv", index=False)
    members = pd.read_parquet(tmp_path / "m.parquet")
    sio.dump(LogisticRegression().fit(members[["b"]], members["label"]), tmp_path / "model.skops")
    (tmp_path / "loss.yaml").write_text(LOSS_ONLY)
    return tmp_path


# --------------------------------------------------------------------------- item 6: regular files only


def test_a_csv_linked_to_dev_zero_is_one_sentence_not_all_memory(id_table):
    """Before: ``m.csv -> /dev/zero`` read until memory ran out (exit 4)."""
    (id_table / "zero.csv").symlink_to("/dev/zero")
    _bad(
        _check(id_table, id_table / "zero.csv", id_table / "n.csv"),
        "zero.csv: the members file is a device or socket, not a regular file.",
    )


@pytest.mark.parametrize("suffix", [".npz", ".pt", ".csv", ".parquet", ".jsonl"])
@pytest.mark.parametrize("kind", ["/dev/zero", "/dev/urandom", "fifo", "folder"])
def test_every_data_format_refuses_what_is_not_a_regular_file(tmp_path, suffix, kind):
    """Every data format, every kind of file that is not one: a link to a device, a FIFO (opening it would wait for
    a writer forever), a link to a folder. Before: /dev/zero behind .npz read until memory ran out, a FIFO hung."""
    path = tmp_path / f"m{suffix}"
    if kind == "fifo":
        os.mkfifo(path)
    else:
        (tmp_path / "folder").mkdir()
        path.symlink_to(tmp_path / "folder" if kind == "folder" else kind)
    with pytest.raises(DataError) as refused:
        if suffix == ".jsonl":
            load_texts(path, "members")
        else:
            load_dataset(path, "members")
    message = str(refused.value)
    assert refused.value.exit_code == 2 and message.startswith(f"{path}: ")
    expected = {"fifo": "is a FIFO, not a regular file", "folder": "a folder", "/dev/zero": "a device or socket"}
    assert expected.get(kind, "a device or socket") in message or "is a directory" in message, message


# --------------------------------------------------------------------------- item 5: decoded sizes


def test_a_parquet_dictionary_that_decodes_to_gigabytes_is_refused_before_it_is_read(id_table):
    """Before: 1.3 kB whose one dictionary value (100 kB) 100,000 rows point at decoded to 9.3 GiB: exit 4."""
    rows = 100_000
    idx = pa.array(np.zeros(rows, dtype=np.int32))
    job = pa.DictionaryArray.from_arrays(idx, pa.array(["x" * 100_000]))
    pq.write_table(pa.table({"b": job, "label": np.zeros(rows, np.int64)}), id_table / "d.parquet", compression="zstd")
    assert (id_table / "d.parquet").stat().st_size < 4096
    _bad(
        _check(id_table, id_table / "d.parquet", id_table / "n.parquet"),
        "d.parquet: the table decodes to more than",
        "(its text column 'b': 9.3 GiB), more than the 2.0 GiB",
    )


def _parquet(tmp_path: Path, table: pa.Table, **kw) -> tuple[Path, pq.ParquetFile]:
    path = tmp_path / "t.parquet"
    pq.write_table(table, path, **kw)
    return path, pq.ParquetFile(path)


def test_run_length_zeros_are_bounded_by_rows_times_width(tmp_path):
    """A million int64 zeros are a few kB run-length encoded and 8 MB decoded: the footer's row count bounds them."""
    zeros = np.zeros(1_000_000, np.int64)
    path, pf = _parquet(tmp_path, pa.table({"b": zeros, "label": zeros}))
    assert path.stat().st_size < 64_000
    with path.open("rb") as f, pytest.raises(DataError, match=r"at least 15 MiB \(1,000,000 rows × 2 columns\)"):
        check_parquet(pf, f, path, most=8 << 20)
    with path.open("rb") as f:
        check_parquet(pf, f, path, most=16 << 20)  # the same file under a limit it fits


def test_prefix_encoded_text_is_read_in_bounded_batches_and_refused(tmp_path):
    """DELTA_BYTE_ARRAY: 400 values of 20 kB sharing a prefix are 8 MB decoded from a few kB."""
    prefix = "p" * 20_000
    table = pa.table({"b": [prefix + str(i) for i in range(400)], "label": np.zeros(400, np.int64)})
    path, pf = _parquet(tmp_path, table, use_dictionary=False, column_encoding={"b": "DELTA_BYTE_ARRAY"})
    assert path.stat().st_size < 64_000
    with path.open("rb") as f, pytest.raises(DataError, match=r"\(its text column 'b': "):
        check_parquet(pf, f, path, most=4 << 20)
    with path.open("rb") as f:
        check_parquet(pf, f, path, most=16 << 20)


@pytest.mark.parametrize(
    "column, shown",
    [
        (pa.array([[1, 2], [3]] * 3), "list<element: int64>, a nested type"),
        (pa.array([[("k", 1)], [("j", 2)]] * 3, type=pa.map_(pa.string(), pa.int64())), "map<string, int64"),
        (pa.array([{"x": 1}, {"x": 2}] * 3), "struct<x: int64>, a nested type"),
        (pa.array([1, 2] * 3, type=pa.duration("s")), "duration[s], a type privgate cannot audit"),
    ],
)
def test_nested_and_unreadable_columns_are_one_sentence(tmp_path, column, shown):
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"b": column, "label": [0, 1] * 3}), path)
    with pytest.raises(DataError, match=re.escape(f"t.parquet: column 'b' holds {shown}")) as refused:
        load_dataset(path, "members")
    assert refused.value.exit_code == 2


def test_honest_tables_still_read_many_row_groups_and_no_arrow_schema(tmp_path):
    """No false refusal: 500 row groups of 10 rows, and a file written without the Arrow schema, read as pandas does."""
    frame = pd.DataFrame({"job": ["clerk", "nurse"] * 2500, "age": np.arange(5000), "label": [0, 1] * 2500})
    table = pa.Table.from_pandas(frame, preserve_index=False)
    pq.write_table(table, tmp_path / "groups.parquet", row_group_size=10)
    pq.write_table(table.replace_schema_metadata(None), tmp_path / "bare.parquet", store_schema=False)
    for name in ("groups.parquet", "bare.parquet"):
        d = load_dataset(tmp_path / name, "members")
        assert d.x.shape == (5000, 2) and d.schema.columns == ("job", "age") and d.x[4999, 1] == 4999
    assert pq.ParquetFile(tmp_path / "groups.parquet").metadata.num_row_groups == 500


def test_a_csv_line_of_megabytes_is_refused_before_it_is_parsed(tmp_path):
    """A line of 1.5 million cells would be as many Python strings; the scan stops it at 1 MiB."""
    path = tmp_path / "long.csv"
    path.write_bytes(b"a,b,label\n1,2,0\n" + b"ab," * 500_000 + b"\n")
    with pytest.raises(DataError, match=r"long.csv: line 3 is longer than 1 MiB"):
        load_dataset(path, "members")


def test_a_csv_of_many_short_cells_is_bounded_by_lines_times_columns(tmp_path):
    path = tmp_path / "wide.csv"
    path.write_text("a,b,c,d,label\n" + "1,2,3,4,0\n" * 20_000)
    with path.open("rb") as f, pytest.raises(DataError, match=r"up to 6 MiB \(20,001 lines × 5 columns\)"):
        check_csv(f, path, most=4 << 20)
    assert load_dataset(path, "members").x.shape == (20_000, 4)


# --------------------------------------------------------------------------- item 8: columns the model never read


def test_an_id_column_is_left_out_and_named(id_table):
    """Before: ``a, b, label`` against a model fitted on ``['b']`` was exit 4 (cannot reshape array of size 160
    into shape (80,1)): the schema was narrowed to the model's columns, the pooled rows were not. Parquet through
    the CLI; the CSV, read into the same table, in process."""
    from privgate import api

    out = id_table / "r.json"
    r = _check(id_table, id_table / "m.parquet", id_table / "n.parquet", "--json", str(out), memory=None)
    assert r.returncode in (0, 1, 3), (r.returncode, r.stderr[-2000:])
    assert "'a' are not among the columns the model was fitted on" in " ".join(r.stdout.split())
    for report in (
        json.loads(out.read_text()),
        api.check(
            id_table / "model.skops", str(id_table / "loss.yaml"), id_table / "m.csv", id_table / "n.csv"
        ).model_dump(mode="json"),
    ):
        assert report["data"]["table"]["columns"] == ["b"] and report["data"]["table"]["left_out"] == ["a"]
        said = "the table's column(s) 'a' are not among the columns the model was fitted on (its feature_names_in_)"
        assert any(w.startswith(said + " and were left out of the audit") for w in report["warnings"])


def test_columns_in_another_order_and_rows_that_differ_only_in_the_id(id_table):
    """The pooled rows are the model's columns in its order (before: another order was read as this one), and two
    rows that differ only in a column the model never reads are one row to it: refused as on both sides."""
    from privgate import api

    members = pd.read_parquet(id_table / "m.parquet")
    members[["label", "b", "a"]].to_parquet(id_table / "m2.parquet")
    model_file = id_table / "model.skops"
    report = api.check(model_file, str(id_table / "loss.yaml"), id_table / "m2.parquet", id_table / "n.parquet")
    import skops.io as sio

    model = sio.load(id_table / "model.skops", trusted=sio.get_untrusted_types(file=id_table / "model.skops"))
    assert report.target["accuracy"]["members"]["value"] == pytest.approx(model.score(members[["b"]], members["label"]))
    twin = pd.concat([pd.read_parquet(id_table / "n.parquet"), members.iloc[[7]].assign(a=5000)])
    twin.to_parquet(id_table / "n2.parquet")
    same = r"\(same features and label in the columns the model reads; first: members row 8 is non-members row 81\)"
    with pytest.raises(DataError, match=r"1 member row\(s\) also appear among the non-members " + same):
        api.check(model_file, str(id_table / "loss.yaml"), id_table / "m.parquet", id_table / "n2.parquet")
