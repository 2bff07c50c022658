"""Import every module of privgate and pytest_privgate first, each in a fresh interpreter; print the failures (JSON).

Run by ``tests/test_import_layers.py`` in a subprocess: ``python import_first.py ROOT``. A fresh
interpreter per module would cost a second each (Python, numpy, torch, pydantic …); instead this process
imports the third-party modules privgate's modules import at their top level (read from their source), and
then walks the package tree in forked children, in which no privgate module has been imported yet.

Import order only matters between privgate's own modules (a circle such as ``privgate.attacks`` ↔
``privgate.lm.attacks`` breaks when entered from the wrong end). ``python -c "import a.b.c"`` runs ``a``'s
``__init__`` to its end, then ``a.b``'s, then ``a.b.c``: every fresh import of a module below ``a.b`` passes
through the same state, the one right after ``import a.b``. So a child imports ``a``, forks one grandchild per
module or package directly below it (a package's grandchild imports it and forks again), and each leaf sees
exactly what ``python -c "import MODULE"`` would: its packages' ``__init__`` run from a state without privgate,
then the module. A package whose ``__init__`` fails fails every module below it with its error, as each of
their fresh imports would; a module its package's ``__init__`` already imported is imported by then (it cannot
come first, and its import is its package's).
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import json
import os
import sys
import traceback
import warnings
from pathlib import Path

OURS = ("privgate", "pytest_privgate")


def modules(root: Path) -> list[str]:
    """Every module of the two packages (``__main__`` excepted: importing it runs the CLI)."""
    out = []
    for package in OURS:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__main__":
                continue
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out.append(".".join(parts))
    return out


def _ours(name: str) -> bool:
    return name.split(".")[0] in OURS


def third_party(root: Path) -> list[tuple[str, tuple[str, ...]]]:
    """``(module, names)`` of every import statement outside a function or class in the packages' sources that
    names another distribution (``from module import names``; ``import module``: no names)."""
    found: dict[tuple[str, tuple[str, ...]], None] = {}
    for package in OURS:
        for path in sorted((root / package).rglob("*.py")):
            with contextlib.suppress(SyntaxError, UnicodeDecodeError):  # its own child reports what fails
                tree = ast.parse(path.read_text(encoding="utf-8"))
                nodes = list(tree.body)
                while nodes:  # module level, `if`/`try` blocks included (they run on import too)
                    node = nodes.pop(0)
                    if isinstance(node, ast.Import):
                        found.update(((a.name, ()), None) for a in node.names if not _ours(a.name))
                    elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                        if not _ours(node.module):
                            found[(node.module, tuple(a.name for a in node.names))] = None
                    elif not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                        nodes[:0] = [n for n in ast.iter_child_nodes(node) if isinstance(n, ast.stmt)]
    return list(found)


def preload(imports: list[tuple[str, tuple[str, ...]]]) -> None:
    """Import them here, once, for every child to inherit (what fails here fails again where privgate imports it)."""
    for module, names in imports:
        with contextlib.suppress(BaseException):
            mod = importlib.import_module(module)
            for name in names:  # `from transformers import X` loads X's module (lazy packages)
                with contextlib.suppress(BaseException):
                    getattr(mod, name)


def _read(fd: int) -> bytes:
    data = b""
    while chunk := os.read(fd, 1 << 16):
        data += chunk
    os.close(fd)
    return data


def _last_line(exc: BaseException) -> str:
    return "".join(traceback.format_exception_only(type(exc), exc)).strip().splitlines()[-1]


def walk(name: str, names: list[str]) -> dict[str, str]:
    """Import ``name`` here, then each module or package directly below it in a forked child of this state: the
    failures of the whole subtree (``{module: the last line of its error}``)."""
    below = [n for n in names if n.startswith(name + ".")]
    try:
        importlib.import_module(name)
    except BaseException as exc:  # every fresh import below fails the same way, in this package's __init__
        return dict.fromkeys([name, *below], _last_line(exc))
    failed: dict[str, str] = {}
    for child in [n for n in below if "." not in n[len(name) + 1 :]] + sorted(
        {n[: n.index(".", len(name) + 1)] for n in below if "." in n[len(name) + 1 :]} - set(below)
    ):  # the modules and packages directly below; a namespace package (no __init__) has no entry of its own
        subtree = [n for n in below if n == child or n.startswith(child + ".")]
        if child in sys.modules:  # imported by the package's __init__: its own children still come first
            failed.update(walk(child, subtree))
        else:
            failed.update(_forked(child, subtree))
    return failed


def _forked(name: str, subtree: list[str]) -> dict[str, str]:
    """:func:`walk` of ``name`` in a forked child; a child that dies fails the modules it had not reported."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            os.write(w, json.dumps(walk(name, subtree)).encode())
        finally:
            os._exit(0)
    os.close(w)
    out = _read(r)
    _, status = os.waitpid(pid, 0)
    try:
        return json.loads(out)
    except ValueError:
        return dict.fromkeys(subtree, f"exit status {status}")


def main(root: Path) -> dict[str, str]:
    names = modules(root)
    preload(third_party(root))
    assert not any(_ours(n) for n in sys.modules), "a third-party module imported privgate"
    failed: dict[str, str] = {}
    for package in OURS:
        subtree = [n for n in names if n == package or n.startswith(package + ".")]
        if subtree:
            failed.update(_forked(package, subtree))
    return failed


if __name__ == "__main__":
    warnings.simplefilter("ignore")
    sys.path.insert(0, sys.argv[1])
    print(json.dumps(main(Path(sys.argv[1]))))
