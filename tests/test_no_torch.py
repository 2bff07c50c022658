"""A scikit-learn audit never imports torch (1.8 s of every run's 2.6 s of imports): the CLI's check and harden (the
capacity search) and the pytest plugin's assertion on a pipeline, each in a fresh interpreter where torch cannot be
imported.

``sitecustomize.py`` (:data:`BLOCKER`, put first on ``PYTHONPATH``) refuses every import of ``torch`` and says so on
stderr: a run that needed torch fails, and an import something catches (scikit-learn's walk of its packages, an
attack's ``except ImportError``) still shows. Each CLI run's report is the one a run with torch loaded writes (a
forked run: the suite's fork server imports torch, ``tests/cli_fork.py``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from cases import run_cli, stable

pytest_plugins = ["pytester"]

#: Refuses torch in the interpreter it starts in (as ``sitecustomize``), naming the importer on stderr.
BLOCKER = """
import sys


class NoTorch:
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            frame = sys._getframe(1)
            while frame and frame.f_code.co_filename.startswith("<frozen"):
                frame = frame.f_back
            where = f"{frame.f_code.co_filename}:{frame.f_lineno}" if frame else "?"
            print(f"BLOCKED: import {name} from {where}", file=sys.stderr)
            raise ModuleNotFoundError(f"No module named {name!r} (blocked)", name=name)
        return None


sys.meta_path.insert(0, NoTorch())
"""

#: What differs between two runs of one check: clocks, and the wall time inside the training note.
VOLATILE = {"started", "duration_s", "seconds", "training_seconds", "threads_reason"}


def _no_torch(folder: Path) -> dict[str, str]:
    """The environment of a run that cannot import torch: :data:`BLOCKER` as ``sitecustomize`` on its path."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text(BLOCKER)
    return {"PYTHONPATH": str(folder)}


def _report(path: Path, volatile: set[str] = VOLATILE) -> dict:
    """The report at ``path`` without ``volatile`` keys or wall times, its own folder named ``OUT``."""
    report = stable(json.loads(path.read_text().replace(str(path.parent), "OUT")), volatile)
    for attack in report["attacks"]:  # "…(sklearn.base.clone + fit, 1 thread, 0.4 s)": the wall time only
        attack["notes"] = [re.sub(r"\d+\.\d s\)", "… s)", n) for n in attack["notes"]]
    return report


def _bare_and_forked(
    tmp_path: Path, cwd: Path, args: tuple[str, ...], outputs: Callable[[Path], tuple[str, ...]], code: int
) -> tuple[Path, Path]:
    """``privgate ARGS`` twice, each with its own cache and ``r.json`` (and ``outputs(folder)``) in a folder of its own:
    first in a fresh interpreter that cannot import torch (``bare``; ``PYTHON*`` in its environment), then forked from
    the server, torch imported (``full``). Both must exit with ``code`` and block no import; their folders."""
    folders = []
    for name, env in (("bare", _no_torch(tmp_path / "site")), ("full", None)):
        out = tmp_path / name
        out.mkdir()
        r = run_cli(*args, "--cache-dir", str(out / "cache"), "--json", str(out / "r.json"), *outputs(out),
                    cwd=cwd, env=env)  # fmt: skip
        assert "BLOCKED" not in r.stderr, r.stderr[-3000:]
        assert r.returncode == code, (name, r.stdout[-2000:], r.stderr[-2000:])
        folders.append(out)
    return folders[0], folders[1]


def test_a_scikit_learn_check_never_imports_torch_and_writes_the_same_report(tables, tmp_path):
    args = ("check", "rf.skops", "--policy", "clones.yaml", "--members", "m.parquet", "--nonmembers", "n.parquet",
            "--population", "p.parquet", "--threads", "1", "--no-step-summary")  # fmt: skip

    # exit 1: the forest memorised its members
    bare_out, full_out = _bare_and_forked(tmp_path, tables, args, lambda o: ("--html", str(o / "r.html")), code=1)
    report = _report(bare_out / "r.json")
    assert report == _report(full_out / "r.json")
    attacks = {a["name"]: a for a in report["attacks"]}
    assert attacks["lira"]["status"] == attacks["rmia"]["status"] == "ran" and attacks["lira"]["models_trained"] == 4
    assert report["environment"]["device_reason"] == "auto chose the CPU: nothing in this check runs on torch"
    assert report["environment"]["versions"]["torch"]  # read from the installed package's metadata
    page = (bare_out / "r.html").read_text()  # the HTML report rendered without torch, its environment included
    assert "<li>device cpu — auto chose the CPU: nothing in this check runs on torch</li>" in page
    assert any(p.is_file() for p in (bare_out / "cache").rglob("*"))  # the clones cached


#: A capacity search the tables' 200 rows decide: the full-grown forest leaks (loss AUC ≈ 0.91), leaves of 32 do not
#: (≈ 0.55). The loss attack alone: the check's test above runs the clone attacks without torch.
HARDEN = """
name: harden-tables
sensitivity: confidential
release: api
confidence: 0.95
attacks:
  loss: {}
checks:
  - {id: mia-auc, attack: best, metric: auc, max: 0.75}
remediation: {enabled: true, capacity: [{model__min_samples_leaf: 32}]}
utility: {max_drop: 0.2}
"""


def test_a_scikit_learn_harden_never_imports_torch_and_writes_the_same_report(tables, tmp_path):
    (tmp_path / "h.yaml").write_text(HARDEN)
    args = ("harden", "rf.skops", "--policy", str(tmp_path / "h.yaml"), "--members", "m.parquet", "--nonmembers",
            "n.parquet", "--population", "p.parquet", "--threads", "1", "--no-step-summary", "-q")  # fmt: skip

    # exit 0: leaves of 32 pass
    bare_out, full_out = _bare_and_forked(
        tmp_path, tables, args, lambda o: ("--output-model", str(o / "rf.hardened.skops")), code=0
    )
    volatile = VOLATILE | {"fit_seconds", "audit_seconds", "sha256", "skops_sha256"}  # a .skops names arrays by id()
    report = _report(bare_out / "r.json", volatile)
    assert report == _report(full_out / "r.json", volatile)
    rem = report["remediation"]
    assert report["job"] == "harden" and report["verdict"] == "pass"
    assert rem["method"] == "capacity" and rem["status"] == "hardened" and rem["statement"] is None
    assert rem["capacity"]["chosen"] == {"model__min_samples_leaf": 32}
    assert rem["original"]["checks"][0]["value"] > 0.85 > 0.75 > rem["rows"][0]["checks"][0]["value"]
    assert (rem["output"]["skops"], rem["output"]["model_card"]) == ("OUT/rf.hardened.skops", "OUT/rf.hardened.card.md")

    import pandas as pd

    from privgate import Target

    rows = pd.read_parquet(tables / "m.parquet").drop(columns="label")
    bare_model, full_model = (Target.load(o / "rf.hardened.skops").model.estimator for o in (bare_out, full_out))
    assert bare_model.get_params()["model__min_samples_leaf"] == 32
    assert np.array_equal(bare_model.predict_proba(rows), full_model.predict_proba(rows))  # the same refit


PLUGIN_CONFTEST = """
import sys

assert "torch" not in sys.modules, "the privgate plugin imported torch"
"""


def test_the_pytest_assertion_on_a_pipeline_never_imports_torch(pytester: pytest.Pytester, tmp_path, monkeypatch):
    from test_sklearn_target import USER_TEST

    pytester.makepyfile(tables_case=(Path(__file__).parent / "tables_case.py").read_text(), test_credit=USER_TEST)
    pytester.makeconftest(PLUGIN_CONFTEST)
    monkeypatch.setenv("PYTHONPATH", _no_torch(tmp_path / "site")["PYTHONPATH"])  # pytester puts its folder first
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:xdist")
    shown = result.stdout.str() + result.stderr.str()  # the failing test's captured stderr is on stdout
    assert "BLOCKED" not in shown, shown[-3000:]
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*assert_mia_below failed (policy 'assert_mia_below' on <Pipeline>)*", "*  fail * lira auc = 0.*≤ 0.6*"]
    )
