"""privgate's modules import without circles, whichever comes first, and its layers import downwards only.

The issue this guards (issue 32): ``privgate.attacks`` imported the language-model attacks, which
imported it back, so ``python -c "import privgate.lm.attacks.mink"`` failed with "cannot import name
'lowest_mean' from partially initialized module". The layer contract (``[tool.importlinter]`` in
pyproject.toml, run by ``make lint``) is checked here too, with a planted upward import inside a
function to show that such imports count.
"""

from __future__ import annotations

import importlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


@pytest.mark.lint  # every module of the tree, one child each: make lint runs it (CI: .ci/run), make test does not
@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="the probe forks one child per module")
def test_every_module_imports_first_in_a_fresh_interpreter(root):
    r = subprocess.run(
        [sys.executable, str(HERE / "import_first.py"), str(root)], capture_output=True, text=True, timeout=300
    )
    assert r.returncode == 0, r.stderr[-3000:]
    failed = json.loads(r.stdout.strip().splitlines()[-1])
    assert failed == {}, "\n".join(f"import {m}: {e}" for m, e in sorted(failed.items()))


def test_the_probe_sees_a_circle(tmp_path):
    """The probe itself fails a module that only imports when another one came first (two modules in a circle)."""
    pkg = tmp_path / "privgate"
    pkg.mkdir()
    (tmp_path / "pytest_privgate").mkdir()
    (pkg / "__init__.py").write_text("from privgate.a import A\n")
    (pkg / "a.py").write_text("from privgate.b import helper\n\nA = 1\n")
    (pkg / "b.py").write_text("from privgate.a import A\n\n\ndef helper():\n    return A\n")
    r = subprocess.run(
        [sys.executable, str(HERE / "import_first.py"), str(tmp_path)], capture_output=True, text=True, timeout=60
    )
    failed = json.loads(r.stdout.strip().splitlines()[-1])
    assert set(failed) == {"privgate", "privgate.a", "privgate.b"}
    assert "partially initialized module" in failed["privgate.b"]


def _lint_imports(root: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).with_name("lint-imports")
    env = {"PYTHONPATH": str(root), "PATH": str(exe.parent)}
    return subprocess.run([str(exe), "--no-cache"], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def test_layers_import_downwards_only(root):
    r = _lint_imports(root, root)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert "0 broken" in r.stdout


def test_an_upward_import_inside_a_function_breaks_the_contract(root, tmp_path):
    """stats (a bottom layer) calling into the api from inside a function is refused by name."""
    for package in ("privgate", "pytest_privgate"):
        shutil.copytree(root / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(root / "pyproject.toml", tmp_path / "pyproject.toml")
    binomial = tmp_path / "privgate" / "stats" / "binomial.py"
    planted = "\n\ndef _planted():\n    from privgate.api import check\n\n    return check\n"
    binomial.write_text(binomial.read_text() + planted)
    r = _lint_imports(tmp_path, tmp_path)
    assert r.returncode == 1, r.stdout[-4000:]
    assert "privgate.stats is not allowed to import privgate.api" in r.stdout
    assert "privgate.stats.binomial -> privgate.api" in r.stdout


def _resolve(spec: str) -> object:
    module, _, name = spec.partition(":")
    return getattr(importlib.import_module(module), name)


def test_every_module_name_string_resolves():
    """The registries name what they load as ``"module:name"`` strings; a moved module must not leave one behind."""
    from privgate.attacks.catalogue import CATALOGUE
    from privgate.report import ALL_JOBS, available_formats, get_format
    from privgate.report.loading import REPORT_CLASSES
    from privgate.report.show import PRINTERS

    named = [e.where for e in CATALOGUE.values()] + list(PRINTERS.values()) + list(REPORT_CLASSES.values())
    for f in map(get_format, available_formats()):
        named += [w for w in (f.writer, *f.by_job.values()) if isinstance(w, str)]
    assert len(named) > len(CATALOGUE) + 2 * len(ALL_JOBS)
    unresolved = []
    for spec in named:
        try:
            assert callable(_resolve(spec))
        except (ImportError, AttributeError, AssertionError):
            unresolved.append(spec)
    assert unresolved == []
    assert set(PRINTERS) == set(REPORT_CLASSES) == ALL_JOBS
