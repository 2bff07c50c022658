"""Import every module of privgate and pytest_privgate first, each in a fresh interpreter; print the failures (JSON).

Run by ``tests/test_import_layers.py`` in a subprocess: ``python import_first.py ROOT``. A fresh
interpreter per module would cost a second each (Python, numpy, torch, pydantic …); instead one child
process imports everything once to learn which third-party modules the package loads, this process
imports those, and then forks one child per privgate module, in which no privgate module has been
imported yet. Import order only matters between privgate's own modules (a circle such as
``privgate.attacks`` ↔ ``privgate.lm.attacks`` breaks when entered from the wrong end), so each child
sees exactly what ``python -c "import MODULE"`` would.
"""

from __future__ import annotations

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


def _read(fd: int) -> bytes:
    data = b""
    while chunk := os.read(fd, 1 << 16):
        data += chunk
    os.close(fd)
    return data


def _in_child(job, *args) -> tuple[int, int]:
    """Fork; the child runs ``job(*args) -> bytes`` and writes it to a pipe. Returns (pid, read end)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        code = 0
        try:
            os.write(w, job(*args))
        except BaseException:
            os.write(w, traceback.format_exc().encode()[-4000:])
            code = 1
        os._exit(code)
    os.close(w)
    return pid, r


def _third_party(names: list[str]) -> bytes:
    before = set(sys.modules)
    for name in names:
        with contextlib.suppress(BaseException):  # what fails here fails again in its own child, and is reported
            importlib.import_module(name)
    return json.dumps([n for n in sys.modules if n not in before and not _ours(n) and n != "__main__"]).encode()


def _import(name: str) -> bytes:
    importlib.import_module(name)
    return b""


def main(root: Path, jobs: int) -> dict[str, str]:
    names = modules(root)
    pid, r = _in_child(_third_party, names)
    loaded = json.loads(_read(r) or b"[]")
    os.waitpid(pid, 0)
    for name in loaded:
        with contextlib.suppress(BaseException):  # what fails here fails again in its own child, and is reported
            importlib.import_module(name)
    assert not any(_ours(n) for n in sys.modules), "a third-party module imported privgate"
    failed: dict[str, str] = {}
    running: dict[int, tuple[str, int]] = {}

    def reap() -> None:
        pid, status = os.wait()
        name, fd = running.pop(pid)
        out = _read(fd).decode(errors="replace").strip()
        if status:
            failed[name] = out.splitlines()[-1] if out else f"exit status {status}"

    for name in names:
        while len(running) >= jobs:
            reap()
        pid, fd = _in_child(_import, name)
        running[pid] = (name, fd)
    while running:
        reap()
    return failed


if __name__ == "__main__":
    warnings.simplefilter("ignore")
    sys.path.insert(0, sys.argv[1])
    print(json.dumps(main(Path(sys.argv[1]), max(2, min(4, os.cpu_count() or 1)))))
