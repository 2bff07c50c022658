"""Tables as tables (issue 34 item 2): Parquet, CSV with text columns and DataFrames, read as the pipeline was fitted.

Every way a table can be wrong is one sentence naming the file, the column or the row, and exit 2 — through
the CLI in a subprocess, as a user meets it. The numbers (string labels mapped through ``classes_``, the rows
the model sees, the attacks that cannot read text) come from in-process runs through :mod:`privgate.api`.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from tables_case import table

from privgate import AuditData, api
from privgate.errors import DataError
from privgate.inputs.data import load_dataset


def _nonmembers(tables, tmp_path, change) -> str:
    frame = pd.read_parquet(tables / "n.parquet")
    frame = change(frame)
    path = tmp_path / "n.parquet"
    frame.to_parquet(path)
    return str(path)


def _missing_column(f):
    return f.drop(columns="amount")


def _text_in_a_number_column(f):
    return f.assign(age=f["age"].astype(str) + " years")


def _unknown_label(f):
    f.loc[f.index[4], "label"] = "unknown"
    return f


def _nan(f):
    f.loc[f.index[6], "amount"] = np.nan
    return f


def _a_member_among_nonmembers(f):
    members = pd.read_parquet(f.attrs["members"])
    return pd.concat([f.iloc[:9], members.iloc[20:21], f.iloc[9:]])


BAD_TABLES = [
    pytest.param(
        "lr.skops",
        _missing_column,
        ["n.parquet: the non-members have no column 'amount', which the members", "m.parquet) have"],
        id="missing-column",
    ),
    pytest.param(
        "lr.skops",
        _text_in_a_number_column,
        ["n.parquet: column 'age' holds text in the non-members but numbers in the members"],
        id="wrong-type",
    ),
    pytest.param(
        "rf.skops",
        _unknown_label,
        ["n.parquet: row 5 has the label 'unknown', which is not one of the model's classes ('bad', 'fair', 'good')"],
        id="unknown-label",
    ),
    # a logistic regression takes no NaN (a random forest does: scikit-learn >= 1.4 routes missing values)
    pytest.param(
        "lr.skops",
        _nan,
        [
            "n.parquet: the model cannot score row 7 of the non-members, where column 'amount' is "
            "missing (NaN) (Input X contains NaN)"
        ],
        id="nan",
    ),
    pytest.param(
        "rf.skops",
        _a_member_among_nonmembers,
        ["n.parquet: 1 member row(s) also appear among the non-members", "first: members row 21 is non-members row 10"],
        id="overlap",
    ),
]


def _with_members(tables, change):
    def changed(f):
        f.attrs["members"] = str(tables / "m.parquet")
        return change(f)

    return changed


@pytest.mark.parametrize("model, change, needles", BAD_TABLES)
def test_a_bad_table_is_one_sentence_naming_the_file_column_or_row(tables, tmp_path, model, change, needles):
    """In process, each way in: a :class:`DataError` (exit 2) whose message is one sentence naming the place."""
    nonmembers = _nonmembers(tables, tmp_path, _with_members(tables, change))
    with pytest.raises(DataError) as refused:
        api.check(tables / model, "internal", tables / "m.parquet", nonmembers)
    assert refused.value.exit_code == 2
    message = " ".join(str(refused.value).split())
    assert message.endswith(".") and message.count(". ") == 0, message
    for n in needles:
        assert n in message, (n, message)


def test_the_cli_refuses_a_bad_table_in_one_sentence_with_exit_2_before_reading_the_model(tables, tmp_path):
    """The CLI's side of it, once: the sentence on stderr, no traceback, exit 2, no report written — and before the
    ``.skops`` file is read: its types are checked when it loads, after the data, since reading its schema imports
    skops, every scikit-learn module and torch (4.6 s of CPU for a refusal that costs 0.9 s without them)."""
    from test_cli import _cli_imports

    nonmembers = _nonmembers(tables, tmp_path, _missing_column)
    out = tmp_path / "report.json"
    args = ["check", str(tables / "lr.skops"), "--policy", "internal", "--members", str(tables / "m.parquet"),
            "--nonmembers", nonmembers, "--no-step-summary", "--json", str(out)]  # fmt: skip
    r = _cli_imports(args, ("skops", "torch", "sklearn"))
    assert r.stdout.strip().splitlines()[-1] == "EXIT 2 LOADED -", r.stdout + r.stderr
    assert "Traceback" not in r.stderr + r.stdout
    err = " ".join(r.stderr.split())
    assert err.startswith("error:") and err.count(". ") == 0, err
    assert "n.parquet: the non-members have no column 'amount', which the members" in err and "m.parquet) have" in err
    assert not out.exists()


def test_the_nan_a_forest_takes_is_audited(tables, tmp_path):
    """NaN is refused only where the model cannot take it: scikit-learn's forests route missing values."""
    frame = pd.read_parquet(tables / "n.parquet")
    frame.loc[frame.index[6], "amount"] = np.nan
    report = api.check(tables / "rf.skops", "internal", tables / "m.parquet", (frame.drop(columns="label"),
                       frame["label"]))  # fmt: skip
    assert report.data["nonmembers"]["n"] == 200 and report.target["format"] == "skops"


def test_string_labels_map_through_the_models_classes_and_rows_keep_their_dtypes(tables):
    """The report's accuracy is the pipeline's own on its frames: the table's labels are the model's classes."""
    import skops.io as sio

    model = sio.load(tables / "rf.skops", trusted=sio.get_untrusted_types(file=tables / "rf.skops"))
    members, nonmembers = pd.read_parquet(tables / "m.parquet"), pd.read_parquet(tables / "n.parquet")
    report = api.check(tables / "rf.skops", "internal", tables / "m.parquet", tables / "n.parquet")
    acc = report.target["accuracy"]
    truth = model.score(nonmembers.drop(columns="label"), nonmembers["label"])
    assert acc["nonmembers"]["value"] == pytest.approx(truth)
    assert acc["members"]["value"] == pytest.approx(model.score(members.drop(columns="label"), members["label"]))
    table_facts = report.data["table"]
    assert table_facts["columns"] == ["job", "housing", "age", "amount"]
    assert table_facts["labels"] == ["bad", "fair", "good"] and table_facts["label_column"] == "label"
    assert table_facts["dtypes"][2] == "int64" and table_facts["dtypes"][3] == "float64"


def test_csv_with_text_columns_reads_as_the_same_table_as_parquet(tables, tmp_path):
    """A CSV with text cells is a table (pandas' inference), row for row the Parquet file: one row of each is the
    same record, so the overlap check finds it across the two formats."""
    csv = load_dataset(tables / "m.csv", "members")
    parquet = load_dataset(tables / "m.parquet", "members")
    assert csv.x.dtype == object and csv.schema.columns == parquet.schema.columns
    assert csv.sha256() == parquet.sha256()
    members = pd.read_parquet(tables / "m.parquet")
    n = table(50, 9)
    both = pd.concat([n, members.iloc[3:4]])
    both.to_csv(tmp_path / "n.csv", index=False)
    with pytest.raises(DataError, match=r"1 member row\(s\) also appear .* members row 4 is non-members row 51"):
        AuditData(parquet, load_dataset(tmp_path / "n.csv", "non-members"))


def test_a_data_factory_returning_a_dataframe_with_its_label_column(tables, tmp_path):
    (tmp_path / "nm_rows.py").write_text(
        f"import pandas as pd\n\n\ndef nonmembers():\n    return pd.read_parquet({str(tables / 'n.parquet')!r})\n"
    )
    report = api.check(
        tables / "lr.skops", "internal", tables / "m.parquet", "nm_rows:nonmembers", search_dirs=(tmp_path,)
    )
    assert report.data["nonmembers"]["source"] == "nm_rows:nonmembers" and report.data["nonmembers"]["n"] == 200
    assert "margins" in report.target["read"]  # a logistic regression's decision function, read as logits


def test_attacks_that_perturb_numbers_skip_text_tables_and_the_blind_baseline_encodes_them(tables):
    policy = {
        "name": "numeric-attacks", "sensitivity": "internal", "release": "api",
        "attacks": {"label_only": {}, "boundary": {}, "blind": {}, "loss": {}},
        "checks": [{"id": "auc", "attack": "best", "metric": "auc", "max": 0.99}],
    }  # fmt: skip
    import yaml

    from privgate.policy import parse_policy

    report = api.check(
        tables / "rf.skops", parse_policy(yaml.safe_dump(policy)), tables / "m.parquet", tables / "n.parquet",
        population=tables / "p.parquet",
    )  # fmt: skip
    by = {a.name: a for a in report.attacks}
    for name in ("label_only", "boundary"):
        assert by[name].status == "skipped"
        assert by[name].reason.startswith(f"'{name}' perturbs or learns from numeric features, and the table has "
                                          "text or category columns ('job', 'housing')")  # fmt: skip
    # members, non-members and population are one distribution: the data alone does not separate them
    blind = by["blind"]
    assert blind.status == "ran" and blind.auc_ci[0] < 0.5 < blind.auc_ci[1]
    assert by["loss"].status == "ran" and by["loss"].auc > 0.7  # the forest memorised its members


def test_numeric_csv_still_reads_as_numbers_for_a_torch_model_and_text_is_refused(case, tmp_path):
    """A CSV of numbers is what it was (float32 rows for a torch model); a text column is refused for it."""
    d = np.load(case.members)
    frame = pd.DataFrame(d["x"], columns=[f"f{i}" for i in range(20)]).assign(label=d["y"])
    frame.to_csv(tmp_path / "m.csv", index=False)
    members = load_dataset(tmp_path / "m.csv", "members")
    assert members.x.dtype == np.float32 and members.schema.columns[0] == "f0"
    report = api.check(case.leaky_ts, "internal", tmp_path / "m.csv", case.nonmembers)
    assert report.data["members"]["n"] == 300
    for name, npz in (("t.parquet", case.members), ("u.parquet", case.nonmembers)):
        d = np.load(npz)
        frame = pd.DataFrame(d["x"], columns=[f"f{i}" for i in range(20)]).assign(label=d["y"])
        frame.assign(f3=frame["f3"].astype(str) + "x").to_parquet(tmp_path / name)
    with pytest.raises(DataError, match=r"t.parquet: column 'f3' holds text \('.*x' in row 1\); a torchscript "):
        api.check(case.leaky_ts, "internal", tmp_path / "t.parquet", tmp_path / "u.parquet")
    with pytest.raises(DataError, match=r"the non-members are arrays without column names but the members .*t.parquet"):
        api.check(case.leaky_ts, "internal", tmp_path / "t.parquet", case.nonmembers)


def test_a_wide_table_with_text_is_no_image_for_the_exposed_records(tmp_path):
    """36 columns (a perfect square) with a text one: the exposed members are listed, no picture is drawn."""
    from sklearn.compose import make_column_transformer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import OneHotEncoder

    rng = np.random.default_rng(0)

    def wide(n: int) -> pd.DataFrame:
        f = pd.DataFrame(rng.normal(size=(n, 35)), columns=[f"v{i}" for i in range(35)])
        return f.assign(town=rng.choice(["north", "south"], n), label=rng.choice(["no", "yes"], n))

    members, nonmembers = wide(120), wide(120)
    encode = make_column_transformer((OneHotEncoder(), ["town"]), remainder="passthrough")
    model = make_pipeline(encode, LogisticRegression(max_iter=300))
    model.fit(members.drop(columns="label"), members["label"])
    rows = [(f.drop(columns="label"), f["label"]) for f in (members, nonmembers)]
    report = api.check(model, "internal", *rows, artefacts_dir=str(tmp_path))
    records = report.exposed["records"]
    assert records and all("image" not in r for r in records)
    assert not list(tmp_path.rglob("*.png"))
