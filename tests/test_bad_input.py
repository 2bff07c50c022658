"""Bad input: one sentence naming the thing at fault, exit code 2, no traceback, no file touched.

Each kind of refusal is shown once through the CLI in a subprocess (the sentence on stderr, exit 2, no traceback);
the variants of a kind, whose refusal the CLI prints the same way, raise their sentence through the same door in
process (:func:`privgate.api.check`, the CLI's report: tests/test_front_door.py): a
:class:`~privgate.errors.PrivgateError` with exit code 2 is what the CLI prints as its one line ``error: …``.
"""

from __future__ import annotations

import hashlib
import pickle

import inproc
import numpy as np
import pytest
import torch
from cases import make_model, run_cli

from privgate import PrivgateError


def _digest(paths):
    return {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in paths if p.is_file()}


def _assert_bad(r, *needles):
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr + r.stdout
    err = r.stderr.strip()
    assert err.startswith("error:"), err
    assert len(err.splitlines()) <= 3, err  # one sentence (rich may wrap it)
    for n in needles:
        assert n in err, (n, err)


def _refused(case, model, members=None, nonmembers=None, policy="internal", *needles, **kw):
    """The run of :func:`_run` in process: refused with a PrivgateError of exit code 2 whose message is one sentence
    holding every needle (``kw``: settings such as ``recipe=``, ``search_dirs=``, ``label_column=``)."""
    with pytest.raises(PrivgateError) as err:
        inproc.check(model, str(policy), members or case.members, nonmembers or case.nonmembers, **kw)
    msg = str(err.value)
    assert err.value.exit_code == 2 and "\n" not in msg.strip(), msg
    for n in needles:
        assert n in msg, (n, msg)
    return msg


def _run(case, model, members=None, nonmembers=None, policy="internal", *extra, cwd=None):
    return run_cli(
        "check",
        str(model),
        "--policy",
        str(policy),
        "--members",
        str(members or case.members),
        "--nonmembers",
        str(nonmembers or case.nonmembers),
        *extra,
        cwd=cwd,
    )


@pytest.fixture
def files_unchanged(case):
    before = _digest(sorted(case.dir.iterdir()))
    yield
    assert _digest(sorted(case.dir.iterdir())) == before


def test_missing_model(case, tmp_path, files_unchanged):
    _assert_bad(_run(case, tmp_path / "nope.pt"), "nope.pt", "not found")


def test_truncated_checkpoint(case, tmp_path, files_unchanged):
    bad = tmp_path / "trunc.pt"
    bad.write_bytes(case.leaky_state.read_bytes()[: case.leaky_state.stat().st_size // 2])
    _assert_bad(_run(case, bad, None, None, "internal", "--recipe", case.recipe_spec, cwd=case.dir), "trunc.pt")
    bad_ts = tmp_path / "trunc_ts.pt"
    bad_ts.write_bytes(case.leaky_ts.read_bytes()[:3000])
    _refused(case, bad_ts, None, None, "internal", "trunc_ts.pt")


def test_checkpoint_that_is_not_a_model(case, tmp_path, files_unchanged):
    p = tmp_path / "list.pt"
    torch.save([1, 2, 3], p)
    _assert_bad(_run(case, p), "list.pt", "not a model")
    txt = tmp_path / "notes.pt"
    txt.write_text("hello")
    _refused(case, txt, None, None, "internal", "notes.pt")


def test_pickled_module_refused_unless_trusted(case, tmp_path, files_unchanged):
    p = tmp_path / "whole.pt"
    torch.save(make_model(), p)
    _assert_bad(_run(case, p), "whole.pt", "--trust-checkpoint")
    # trusted, it is audited (the flag reaches the loader through the CLI: the scikit-learn pickle below)
    assert inproc.check(p, "internal", case.members, case.nonmembers, trust_checkpoint=True).exit_code in (0, 1, 3)


def test_sklearn_pickle_needs_trust_then_works(case, tmp_path):
    from sklearn.linear_model import LogisticRegression

    d = np.load(case.members)
    est = LogisticRegression(max_iter=200).fit(d["x"], d["y"])
    p = tmp_path / "est.pkl"
    p.write_bytes(pickle.dumps(est))
    _refused(case, p, None, None, "internal", "est.pkl", "--trust-checkpoint")  # the CLI's: the pickled module above
    r = _run(case, p, None, None, "internal", "--trust-checkpoint")
    assert r.returncode == 0, r.stdout + r.stderr


def test_weights_that_do_not_fit_the_recipe(case, tmp_path):
    p = tmp_path / "other.pt"
    torch.save(torch.nn.Linear(3, 2).state_dict(), p)
    # the recipe found from the working folder: the CLI's, test_truncated_checkpoint
    _refused(
        case, p, None, None, "internal", "other.pt", "do not fit", recipe=case.recipe_spec, search_dirs=(case.dir,)
    )


def test_recipe_that_does_not_import(case):
    _assert_bad(
        _run(case, case.leaky_state, None, None, "internal", "--recipe", "no_such_module:RECIPE", cwd=case.dir),
        "no_such_module",
    )
    _refused(case, case.leaky_state, None, None, "internal", "MISSING", recipe="tiny_recipe:MISSING",
             search_dirs=(case.dir,))  # fmt: skip


def test_feature_count_mismatch(case, tmp_path):
    p = tmp_path / "wide.npz"
    np.savez(p, x=np.zeros((50, 7), np.float32), y=np.zeros(50, np.int64))
    q = tmp_path / "wide_n.npz"
    np.savez(q, x=np.ones((50, 7), np.float32), y=np.zeros(50, np.int64))
    _refused(case, case.leaky_ts, p, q, "internal", "wide.npz", "cannot run on the audit data")


def test_labels_out_of_range(case, tmp_path):
    d = np.load(case.members)
    p = tmp_path / "labels.npz"
    y = d["y"].copy()
    y[3] = 9
    np.savez(p, x=d["x"], y=y)
    _refused(case, case.leaky_ts, p, None, "internal", "labels.npz", "up to 9", "4 classes")


def test_empty_member_set(case, tmp_path):
    p = tmp_path / "empty.npz"
    np.savez(p, x=np.zeros((0, 20), np.float32), y=np.zeros(0, np.int64))
    _assert_bad(_run(case, case.leaky_ts, p), "empty.npz", "empty")


def test_nan_in_data(case, tmp_path):
    d = np.load(case.nonmembers)
    x = d["x"].copy()
    x[5, 2] = np.nan
    p = tmp_path / "nan.npz"
    np.savez(p, x=x, y=d["y"])
    _assert_bad(_run(case, case.leaky_ts, None, p), "nan.npz", "NaN")


def test_overlapping_members_and_nonmembers(case, tmp_path):
    m, n = np.load(case.members), np.load(case.nonmembers)
    x = np.concatenate([n["x"][:-7], m["x"][:7]])
    y = np.concatenate([n["y"][:-7], m["y"][:7]])
    p = tmp_path / "overlap.npz"
    np.savez(p, x=x, y=y)
    _assert_bad(_run(case, case.leaky_ts, None, p), "overlap.npz", "7 member row(s)")


def test_npz_without_arrays_and_unknown_format(case, tmp_path):
    p = tmp_path / "keys.npz"
    np.savez(p, a=np.zeros(3))
    _assert_bad(_run(case, case.leaky_ts, p), "keys.npz", "'x' and 'y'")
    q = tmp_path / "data.feather"
    q.write_text("x")
    _assert_bad(_run(case, case.leaky_ts, q), "data.feather", "unsupported")
    q = tmp_path / "data.parquet"  # a table format since issue 34: read, and refused as not Parquet
    q.write_text("x")
    _assert_bad(_run(case, case.leaky_ts, q), "data.parquet", "not a readable Parquet file")


def test_csv_data_and_missing_label_column(case, tmp_path):
    def to_csv(path, npz, label="label"):
        d = np.load(npz)
        header = ",".join([f"f{i}" for i in range(20)] + [label])
        rows = np.column_stack([d["x"], d["y"]])
        np.savetxt(path, rows, delimiter=",", header=header, comments="", fmt="%.6g")

    m, n = tmp_path / "m.csv", tmp_path / "n.csv"
    to_csv(m, case.members)
    to_csv(n, case.nonmembers)
    assert inproc.check(case.safe_ts, "internal", m, n).exit_code == 0
    to_csv(m, case.members, label="target")
    _refused(case, case.safe_ts, m, n, "internal", "m.csv", "no label column 'label'")
    r = _run(case, case.safe_ts, m, n, "internal", "--label-column", "target")
    assert r.returncode == 2 and "n.csv" in r.stderr  # n.csv still uses 'label'


def test_malformed_yaml_names_the_line(case, tmp_path):
    p = tmp_path / "broken.yaml"
    p.write_text("name: x\nsensitivity: internal\nchecks:\n  - id: a\n   attack: loss\n")
    _assert_bad(_run(case, case.safe_ts, None, None, p), "broken.yaml", "line 5", "invalid YAML")


def test_schema_error_names_field_and_line(case, tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text(
        "name: x\nsensitivity: internal\nrelease: api\nchecks:\n"
        "  - {id: a, attack: loss, metric: accuracy, max: 0.8}\n"
        "  - id: b\n    attack: loss\n    metric: accuracyy\n    max: 0.8\n"
    )
    _assert_bad(_run(case, case.safe_ts, None, None, p), "bad.yaml", "line 8", "checks[1].metric")
    r = run_cli("policy", "validate", str(p))
    _assert_bad(r, "checks[1].metric")


@pytest.mark.parametrize(
    "body, needle",
    [
        ("sensitivity: internal\nrelease: api\nchecks: []\n", "name"),
        ("name: x\nsensitivity: secret\nrelease: api\n", "sensitivity"),
        ("name: x\nsensitivity: internal\nrelease: api\nchecks: []\n", "needs at least one check"),
        (
            "name: x\nsensitivity: internal\nrelease: api\nchecks:\n  - {id: a, attack: nosuch, metric: auc, "
            "max: 0.7}\n",
            "unknown attack 'nosuch'",
        ),
        (
            "name: x\nsensitivity: internal\nrelease: api\nchecks:\n  - {id: a, attack: loss, metric: "
            "tpr_at_fpr, max: 0.1}\n",
            "needs 'fpr'",
        ),
        (
            "name: x\nsensitivity: internal\nrelease: api\nchecks:\n  - {id: a, attack: loss, metric: auc, max: 1.7}\n",
            "between 0 and 1",
        ),
        (
            "name: x\nsensitivity: internal\nrelease: api\nattacks:\n  loss: {colour: red}\nchecks:\n  - {id: "
            "a, attack: loss, metric: auc, max: 0.7}\n",
            "attacks.loss",
        ),
        (
            "name: x\nsensitivity: strictly_confidential\nrelease: model\nchecks:\n  - {id: a, attack: loss, "
            "metric: auc, max: 0.7}\n",
            "white-box",
        ),
        (
            "name: x\nsensitivity: internal\nrelease: api\nchecks:\n  - {id: a, attack: gradient, metric: "
            "auc, max: 0.7}\n",
            "needs the model's weights",
        ),
        (
            "name: x\nsensitivity: internal\nrelease: api\nchecks:\n  - {id: a, attack: loss, metric: auc, "
            "max: 0.7}\n  - {id: a, attack: loss, metric: accuracy, max: 0.7}\n",
            "used twice",
        ),
        (
            "name: x\nsensitivity: internal\nrelease: api\nremediation: {epsilons: [1, 5]}\nchecks:\n  - {id: "
            "a, attack: loss, metric: auc, max: 0.7}\n",
            "decreasing",
        ),
        ("- just\n- a list\n", "mapping"),
    ],
)
def test_policy_validation_errors(tmp_path, body, needle):
    p = tmp_path / "p.yaml"
    p.write_text(body)
    _assert_bad(run_cli("policy", "validate", str(p)), "p.yaml", needle)


def test_unknown_policy_name_and_missing_file(case):
    _assert_bad(_run(case, case.safe_ts, None, None, "stricter"), "unknown policy 'stricter'", "strict")
    _assert_bad(_run(case, case.safe_ts, None, None, "nope/strict.yaml"), "nope/strict.yaml", "not found")


def test_usage_errors_exit_2(case):
    r = run_cli("check", str(case.safe_ts), "--members", str(case.members), "--nonmembers", str(case.nonmembers))
    assert r.returncode == 2 and "no policy given" in r.stderr
    r = run_cli("check", "--policy", "internal", "--seed", "abc")
    assert r.returncode == 2


def test_bad_config(tmp_path):
    (tmp_path / "privgate.toml").write_text("modle = 'x.pt'\n")
    _assert_bad(run_cli("check", cwd=tmp_path), "privgate.toml", "unknown key 'modle'")
    (tmp_path / "privgate.toml").write_text("seed = 'zero'\n")
    _assert_bad(run_cli("check", cwd=tmp_path), "'seed' must be a int")
    (tmp_path / "privgate.toml").write_text("seed = [\n")
    _assert_bad(run_cli("check", cwd=tmp_path), "invalid TOML")


def test_unbalanced_audit_set_is_subsampled_with_warning(case, tmp_path):
    import json

    d = np.load(case.nonmembers)
    p = tmp_path / "few.npz"
    np.savez(p, x=d["x"][:100], y=d["y"][:100])
    report = inproc.check(case.safe_ts, "internal", case.members, p)  # the report the CLI writes and prints
    assert report.exit_code in (0, 3)
    rep = json.loads(inproc.render(report, "json")["json"])
    assert rep["data"]["members"]["n"] == 100 and rep["data"]["balanced_from"] == {"members": 300, "nonmembers": 100}
    assert any("unbalanced" in w for w in rep["warnings"])
    assert "unbalanced" in inproc.console(report)
