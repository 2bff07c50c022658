"""Hostile and careless input: alias bombs, huge files, foreign entry points, CSV cells, misspelt keys.

Every case runs the CLI in a subprocess, as a user would, and expects one
sentence naming the file, line or field at fault, exit code 2, no traceback.
"""

from __future__ import annotations

import json
import textwrap

import numpy as np
import pytest
from cases import run_cli

HEAD = "name: x\nsensitivity: internal\nrelease: api\n"
CHECK = "checks:\n  - {id: a, attack: loss, metric: auc, max: 0.7}\n"


def _bad(r, *needles, most: int = 600) -> str:
    """The error sentence of a bad-input run: exit 2, no traceback, short, containing every needle."""
    assert r.returncode == 2, (r.returncode, r.stdout[-2000:], r.stderr[-2000:])
    assert "Traceback" not in r.stderr + r.stdout
    err = " ".join(r.stderr.split())
    assert err.startswith("error:") and len(err) <= most, err[:2000]
    for n in needles:
        assert n in err, (n, err)
    return err


def _validate(tmp_path, body: str, name: str = "p.yaml"):
    p = tmp_path / name
    p.write_text(body)
    return run_cli("policy", "validate", str(p), cwd=tmp_path)


def _check(case, *extra, cwd=None, members=None, nonmembers=None, policy="internal"):
    return run_cli(
        "check",
        str(case.safe_ts),
        "--policy",
        str(policy),
        "--members",
        str(members or case.members),
        "--nonmembers",
        str(nonmembers or case.nonmembers),
        *extra,
        cwd=cwd,
    )


# --------------------------------------------------------------------------- YAML


BOMB = (
    HEAD
    + textwrap.dedent(
        """\
    attacks:
      loss:
        a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]
        b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]
        c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]
        d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]
        e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]
        f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]
        g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f]
        h: &h [*g, *g, *g, *g, *g, *g, *g, *g, *g]
        i: &i [*h, *h, *h, *h, *h, *h, *h, *h, *h]
    """
    )
    + CHECK
)


def test_alias_bomb_is_refused_with_its_line(case, tmp_path):
    # 9 levels of 9 aliases: 9^9 strings once expanded; the first level above 100,000 nodes is 'f' on line 11
    err = _bad(_validate(tmp_path, BOMB), "p.yaml: line 11:", "597,871 YAML nodes", "more than the 100,000")
    assert "lol" not in err
    _bad(_check(case, policy=tmp_path / "p.yaml"), "p.yaml: line 11:")
    # an alias inside the value it names has no end
    _bad(
        _validate(tmp_path, HEAD + "attacks:\n  loss: &x {a: [*x]}\n" + CHECK),
        "p.yaml: line 5:",
        "refers to the value that contains it",
    )


def test_ordinary_anchors_still_work(tmp_path):
    body = (
        HEAD + "attacks:\n  modified_entropy: &opts {class_dependent: true}\n  true_class_confidence: *opts\n" + CHECK
    )
    r = _validate(tmp_path, body)
    assert r.returncode == 0, r.stderr
    assert "valid policy 'x' (1 checks, 3 attacks, every decision at 0.95 confidence)" in r.stdout


def test_policy_and_config_files_are_size_limited(case, tmp_path):
    big = tmp_path / "big.yaml"
    big.write_text(HEAD + CHECK + "description: " + "a" * (1 << 20) + "\n")
    _bad(run_cli("policy", "validate", str(big)), "big.yaml: policy file is larger than 1 MiB")
    _bad(_check(case, policy=big), "big.yaml: policy file is larger than 1 MiB")
    (tmp_path / "privgate.toml").write_text("# " + "x" * (1 << 20) + "\nseed = 1\n")
    _bad(run_cli("check", cwd=tmp_path), "privgate.toml: config is larger than 1 MiB")


def test_long_values_are_quoted_cut_short(tmp_path):
    body = HEAD + f"attacks:\n  shadow: {{classifier: '{'x' * 100_000}'}}\n" + CHECK
    err = _bad(_validate(tmp_path, body), "p.yaml: line 5:", "field 'attacks.shadow.classifier'", "…", most=400)
    assert err.count("x") < 250
    body = HEAD + f"attacks:\n  {'y' * 1000}: {{}}\n" + CHECK  # PyYAML's longest plain key
    # the message lists every known attack (22 with the language-model family): the key itself is what is cut short
    err = _bad(_validate(tmp_path, body), "p.yaml: line 5:", "unknown attack", "…", most=1000)
    assert err.count("y") < 500


def test_markup_in_a_value_is_printed_as_is(case, tmp_path):
    _bad(_check(case, policy="[/bold]x[red].yaml"), "[/bold]x[red].yaml: policy file not found.")


# --------------------------------------------------------------------------- semantic errors point at their line


@pytest.mark.parametrize(
    "body, where, needle",
    [
        (HEAD + "checks: []\n", "line 4: field 'checks'", "needs at least one check"),
        (
            "name: x\nsensitivity: confidential\nrelease: api\n",
            "line 2: field 'sensitivity'",
            "needs at least one check",
        ),
        (
            HEAD + "checks:\n  - id: a\n    attack: los\n    metric: auc\n    max: 0.7\n",
            "line 6: field 'checks[0].attack'",
            "unknown attack 'los' (did you mean 'loss'?)",
        ),
        (
            HEAD + CHECK + "  - id: a\n    attack: loss\n    metric: accuracy\n    max: 0.7\n",
            "line 6: field 'checks[1].id'",
            "'a' is used twice",
        ),
        (
            HEAD + "checks:\n  - id: g\n    attack: gradient\n    metric: auc\n    max: 0.7\n",
            "line 6: field 'checks[0].attack'",
            "needs the model's weights",
        ),
        (
            "name: x\nsensitivity: strictly_confidential\nrelease: model\n" + CHECK,
            "line 4: field 'checks'",
            "white-box",
        ),
        (
            HEAD + "checks:\n  - id: a\n    attack: loss\n    metric: tpr_at_fpr\n    max: 0.7\n    delta: 0.001\n",
            "line 7: field 'checks[0].metric'",
            "needs 'fpr'",
        ),
        (
            HEAD + "checks:\n  - id: a\n    attack: loss\n    metric: auc\n    maxx: 0.7\n",
            "line 8: unknown key 'maxx' in 'checks[0]'",
            "(did you mean 'max'?)",
        ),
        (
            "nmae: x\nsensitivity: internal\nrelease: api\n" + CHECK,
            "line 1: unknown key 'nmae'",
            "(did you mean 'name'?)",
        ),
        (
            HEAD + "attacks:\n  loss: {}\n  shadow:\n    modls: 4\n" + CHECK,
            "line 7: field 'attacks.shadow.modls'",
            "unknown option 'modls' (did you mean 'models'?)",
        ),
        (
            HEAD + "attacks:\n  shadow:\n    models: 3\n" + CHECK,
            "line 6: field 'attacks.shadow.models'",
            "must be even",
        ),
        (
            HEAD + "checks:\n  - id: a\n    attack: loss\n    metric: accuracyy\n    max: 0.7\n",
            "line 7: field 'checks[0].metric'",
            "got 'accuracyy' (did you mean 'accuracy'?)",
        ),
    ],
)
def test_semantic_errors_name_the_line_of_the_key(tmp_path, body, where, needle):
    _bad(_validate(tmp_path, body), f"p.yaml: {where}", needle)


def test_unknown_config_key_suggests_the_close_one(tmp_path):
    (tmp_path / "privgate.toml").write_text("modle = 'model.pt'\n")
    _bad(run_cli("check", cwd=tmp_path), "privgate.toml: unknown key 'modle' (did you mean 'model'?)")
    (tmp_path / "privgate.toml").unlink()
    (tmp_path / "pyproject.toml").write_text("[tool.privgate]\nnonmember = 'n.npz'\n")
    _bad(run_cli("check", cwd=tmp_path), "unknown key 'tool.privgate.nonmember' (did you mean 'nonmembers'?)")


# --------------------------------------------------------------------------- entry points


@pytest.mark.parametrize(
    "flag, spec, needle",
    [
        ("--members", "os:abort", "data factory 'os:abort': 'os' is a module of Python's standard library"),
        ("--recipe", "builtins:exit", "recipe 'builtins:exit': 'builtins' is a module of Python's standard library"),
        (
            "--recipe",
            "subprocess:call",
            "recipe 'subprocess:call': 'subprocess' is a module of Python's standard library",
        ),
        (
            "--nonmembers",
            "shutil:rmtree",
            "data factory 'shutil:rmtree': 'shutil' is a module of Python's standard library",
        ),
        ("--members", "numpy:load", "data factory 'numpy:load': 'numpy' is an installed package"),
        ("--recipe", "privgate.cli:main", "recipe 'privgate.cli:main': 'privgate' is privgate itself"),
        (
            "--members",
            "evil:abort",
            "data factory 'evil:abort': 'abort' is defined in module 'posix', not in your project's 'evil'",
        ),
        ("--recipe", "evil:os.abort", "recipe 'evil:os.abort': 'os.abort' is defined in module 'posix'"),
        ("--members", "evil:__builtins__", "'__builtins__' is a Python internal attribute"),
        ("--members", "evil:members", "data factory 'evil:members': module 'evil' has no attribute 'members'"),
        (
            "--members",
            "code:members",
            "data factory 'code:members': your module 'code' has the name of a module of Python's standard "
            "library; rename it",
        ),
    ],
)
def test_foreign_entry_points_are_refused_before_they_are_called(case, tmp_path, flag, spec, needle):
    (tmp_path / "evil.py").write_text("import os\nfrom os import abort\n")
    (tmp_path / "code.py").write_text("def members():\n    raise SystemExit(9)\n")
    keep = tmp_path / "keep"
    keep.mkdir()
    (keep / "file.txt").write_text("mine")
    args = {"--members": str(case.members), "--nonmembers": str(case.nonmembers), flag: spec}
    r = run_cli(
        "check", str(case.safe_ts), "--policy", "internal", *[a for kv in args.items() for a in kv], cwd=tmp_path
    )
    err = _bad(r, needle)  # exit 2: not killed by abort (-6), not exit()'s code
    assert err.startswith(
        "error: recipe" if flag == "--recipe" else "error: data factory"
    )  # a data factory is not a "recipe"
    assert (keep / "file.txt").read_text() == "mine"


def test_project_data_factory_and_recipe_still_load(case, tmp_path):
    m, n = np.load(case.members), np.load(case.nonmembers)
    (tmp_path / "audit_data.py").write_text(
        textwrap.dedent(
            f"""
        import numpy as np

        def members():
            d = np.load({str(case.members)!r})
            return d["x"], d["y"]

        NONMEMBERS = (np.load({str(case.nonmembers)!r})["x"], np.load({str(case.nonmembers)!r})["y"])
        """
        )
    )
    r = run_cli(
        "check",
        str(case.safe_ts),
        "--policy",
        "internal",
        "--members",
        "audit_data:members",
        "--nonmembers",
        "audit_data:NONMEMBERS",
        "--json",
        "r.json",
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    data = json.loads((tmp_path / "r.json").read_text())["data"]
    got = [{k: part[k] for k in ("source", "n")} for part in (data["members"], data["nonmembers"])]
    assert got == [
        {"source": "audit_data:members", "n": len(m["y"])},
        {"source": "audit_data:NONMEMBERS", "n": len(n["y"])},
    ]
    assert all(len(part["sha256"]) == 64 for part in (data["members"], data["nonmembers"]))


# --------------------------------------------------------------------------- CSV


def _csv(path, rows, header):
    path.write_text(",".join(header) + "\n" + "".join(",".join(str(v) for v in r) + "\n" for r in rows))


@pytest.mark.parametrize(
    "bad_row, needle",
    [
        (lambda r: r[:3] + ["abc"] + r[4:], "line 5, column 'f3': 'abc' is not a number"),
        (lambda r: r[:3] + [""] + r[4:], "line 5, column 'f3': '' is not a number"),
        (lambda r: r[:-1], "line 5 has 20 values but the header has 21 columns"),
        (lambda r: r[:7] + ["inf"] + r[8:], "line 5, column 'f7': 'inf' is not a finite number"),
        (lambda r: r[:-1] + ["1.5"], "line 5, column 'label': '1.5' is not a class label"),
        (lambda r: r[:-1] + ["-1"], "line 5, column 'label': '-1' is not a class label"),
    ],
)
def test_csv_errors_name_the_line_and_the_column(case, tmp_path, bad_row, needle):
    d = np.load(case.members)
    header = [f"f{i}" for i in range(20)] + ["label"]
    rows = [[f"{v:.5g}" for v in x] + [str(int(y))] for x, y in zip(d["x"], d["y"])]
    rows[3] = bad_row(rows[3])  # data row 4 is line 5 of the file (line 1 is the header)
    m = tmp_path / "m.csv"
    _csv(m, rows, header)
    _bad(_check(case, members=m), f"m.csv: {needle}")


def test_csv_label_column_suggestion(case, tmp_path):
    d = np.load(case.members)
    m = tmp_path / "m.csv"
    _csv(m, [list(x) + [int(y)] for x, y in zip(d["x"], d["y"])], [f"f{i}" for i in range(20)] + ["labels"])
    _bad(_check(case, members=m), "m.csv: no label column 'label' in the CSV header", "(did you mean 'labels'?)")


def test_two_projects_with_a_recipe_py_in_one_process_each_get_their_own(tmp_path):
    """The Python API audits several projects in one process (as the in-process tests do): a ``recipe.py`` already
    imported from one folder is never handed to another folder's run."""
    from privgate.inputs.entrypoints import load_recipe

    for name in ("first", "second"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "recipe.py").write_text(
            "from torch import nn\nfrom privgate.recipe import Recipe\n"
            f"RECIPE = Recipe(model_factory=lambda: nn.Linear(2, 2), epochs=1, name={name!r})\n"
        )
    names = [load_recipe("recipe:RECIPE", [tmp_path / n]).name for n in ("first", "second", "first")]
    assert names == ["first", "second", "first"]


def test_importing_a_users_recipe_leaves_no_bytecode_in_the_project(tmp_path, monkeypatch):
    """A recipe (and the project module it imports) is compiled in memory: no ``__pycache__`` is written in the
    user's folder, even where Python would write bytecode (PYTHONDONTWRITEBYTECODE unset, as for most users)."""
    import sys

    from privgate.inputs.entrypoints import load_recipe

    (tmp_path / "helpers.py").write_text("WIDTH = 3\n")
    (tmp_path / "own_recipe.py").write_text(
        "from torch import nn\nfrom privgate.recipe import Recipe\nfrom helpers import WIDTH\n"
        "RECIPE = Recipe(model_factory=lambda: nn.Linear(WIDTH, 2), epochs=1, name='own')\n"
    )
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    for name in ("own_recipe", "helpers"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    assert load_recipe("own_recipe:RECIPE", [tmp_path]).name == "own"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["helpers.py", "own_recipe.py"]
    assert sys.dont_write_bytecode is False  # the process's own setting is given back


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_a_policy_that_is_a_fifo_or_a_device_is_refused_without_reading(tmp_path, kind):
    """A FIFO (no writer: opening it would wait forever) or /dev/zero given as the policy: one sentence, exit 2."""
    import os

    if kind == "fifo":
        target = tmp_path / "p.yaml"
        os.mkfifo(target)
    else:
        target = "/dev/zero"
    r = run_cli("policy", "validate", str(target), cwd=tmp_path)  # run_cli's timeout: a hang fails the test
    _bad(r, str(target), "not a regular file")
