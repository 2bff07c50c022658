"""privgate's modules import without circles, whichever comes first, and its layers import downwards only.

No module and no sub-package of privgate imports another that imports it back (imports inside functions
included), and no lower layer names a higher one in a string: a kind, attack or harden task of a higher package
is registered as an entry point (pyproject's ``privgate.*`` groups), never named below it (issue 45).

The issue this guards (issue 32): ``privgate.attacks`` imported the language-model attacks, which
imported it back, so ``python -c "import privgate.lm.attacks.mink"`` failed with "cannot import name
'lowest_mean' from partially initialized module". The layer contract (``[tool.importlinter]`` in
pyproject.toml, run by ``make lint``) is checked here too, with a planted upward import inside a
function to show that such imports count.
"""

from __future__ import annotations

import ast
import importlib
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

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
    from privgate.attacks.contexts import kinds
    from privgate.dp.task import tasks
    from privgate.report import ALL_JOBS, available_formats, get_format
    from privgate.report.loading import REPORT_CLASSES
    from privgate.report.show import PRINTERS

    named = [e.where for e in CATALOGUE.values()] + list(PRINTERS.values()) + list(REPORT_CLASSES.values())
    named += list(kinds().values()) + list(tasks().values())
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


def _copy(root: Path, tmp_path: Path) -> Path:
    for package in ("privgate", "pytest_privgate"):
        shutil.copytree(root / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(root / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


_CYCLES = """
import json, grimp, networkx as nx
graph = grimp.build_graph("privgate", "pytest_privgate", exclude_type_checking_imports=True, cache_dir=None)
modules, packages = nx.DiGraph(), nx.DiGraph()
for m in graph.modules:
    for imported in graph.find_modules_directly_imported_by(m):
        modules.add_edge(m, imported)
        a, b = (".".join(n.split(".")[:2]) for n in (m, imported))
        if a != b and "." in a and "." in b:
            packages.add_edge(a, b)
strong = lambda g: sorted(sorted(c) for c in nx.strongly_connected_components(g) if len(c) > 1)
print(json.dumps([strong(modules), strong(packages)]))
"""


def _cycles(root: Path) -> list[list[list[str]]]:
    """[module cycles, sub-package cycles (``privgate.x`` ↔ ``privgate.y``)] of the tree at ``root`` (grimp's
    graph, imports inside functions included), built in a child whose ``privgate`` is that tree."""
    env = {"PYTHONPATH": str(root), "PATH": str(Path(sys.executable).parent)}
    r = subprocess.run([sys.executable, "-c", _CYCLES], cwd=root, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout)


def test_no_module_or_package_imports_itself_back(root):
    """No cycle among privgate's modules nor among its sub-packages, imports inside functions included."""
    assert _cycles(root) == [[], []]


def test_the_cycle_check_sees_a_cycle(root, tmp_path):
    """Two imports planted inside functions, stats.power → recipe → recipe.spec → stats.power, are both cycles."""
    tree = _copy(root, tmp_path)
    for planted_in, imports in [("stats/power.py", "from privgate.recipe import Recipe"),
                                ("recipe/spec.py", "from privgate.stats import power")]:  # fmt: skip
        path = tree / "privgate" / planted_in
        path.write_text(path.read_text() + f"\n\ndef _planted():\n    {imports}\n")
    modules, packages = _cycles(tree)
    assert modules == [["privgate.recipe", "privgate.recipe.check", "privgate.recipe.spec", "privgate.stats.power"]]
    assert packages == [["privgate.recipe", "privgate.stats"]]


_NAMED = re.compile(r"privgate(?:\.\w+)+")


def _named_above(root: Path) -> list[str]:
    """Every string (docstrings aside) of a privgate module naming a ``privgate.*`` module of a higher layer."""
    layers = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"][0]["layers"]
    rank = {name.strip(): -i for i, layer in enumerate(layers) for name in layer.split("|")}

    def layer(module: str) -> str | None:
        parts = module.split(".")
        return next((".".join(parts[:k]) for k in range(len(parts), 0, -1) if ".".join(parts[:k]) in rank), None)

    found = []
    for path in sorted((root / "privgate").rglob("*.py")):
        module = ".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__")
        mine, text = layer(module), path.read_text(encoding="utf-8")
        if mine is None or not any(rank.get(layer(n) or "", -99) > rank[mine] for n in set(_NAMED.findall(text))):
            continue  # parsed only where the text names a higher layer somewhere (mostly in docstrings)
        tree = ast.parse(text)
        docs = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and node.body
            and isinstance(node.body[0], ast.Expr)
        }
        for node in ast.walk(tree):
            if not isinstance(node, ast.Constant) or not isinstance(node.value, str) or id(node) in docs:
                continue
            for named in _NAMED.findall(node.value):
                other = layer(named)
                if other is not None and rank[other] > rank[mine]:
                    found.append(f"{module}:{node.lineno} names {named}")
    return found


def test_no_lower_layer_names_a_higher_one_in_a_string(root, tmp_path):
    """A registry below ``lm`` naming one of its classes (as the kinds once did) is found by line."""
    assert _named_above(root) == []
    shutil.copy(root / "pyproject.toml", tmp_path / "pyproject.toml")
    kinds = tmp_path / "privgate" / "attacks" / "contexts" / "__init__.py"
    kinds.parent.mkdir(parents=True)
    kinds.write_text(
        (root / "privgate/attacks/contexts/__init__.py").read_text()
        + '\nLATE = {"causal_lm": "privgate.lm.audit:CausalLMAudit"}\n'
    )
    n = len(kinds.read_text().splitlines())
    assert _named_above(tmp_path) == [f"privgate.attacks.contexts:{n} names privgate.lm.audit"]


def test_the_language_model_kinds_attacks_and_harden_task_are_registered():
    """privgate.lm's entry points reach the registries below it (an install without them has no LM kind)."""
    from privgate.attacks.catalogue import BUILT_IN, CATALOGUE
    from privgate.attacks.contexts import KINDS, kinds
    from privgate.dp.task import TASKS, tasks

    assert set(kinds()) - set(KINDS) == {"causal_lm", "sequence_classifier"}
    assert set(tasks()) - set(TASKS) == {"huggingface"}
    lm = set(CATALOGUE) - set(BUILT_IN)
    assert {"lm_loss", "min_k", "lm_lira", "canary_exposure", "extraction"} <= lm
    assert all(CATALOGUE[name].family == "language-model" for name in lm)
