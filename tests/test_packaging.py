"""The wheel ships the built-in policies, so `--policy strict` works after `pip install`.

Where hatchling (the build backend, in the ``test`` extra) is importable the wheel is built and read back;
where it is not — privgate installed without its test extra, e.g. on a machine lent for ``make test-gpu`` —
the same promises are read from what ``pyproject.toml`` tells hatchling to put in the wheel.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import zipfile
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10 (privgate's config reader does the same)
    import tomli as tomllib

POLICIES = ("public", "internal", "confidential", "strict")


def _built(root: Path, tmp_path: Path) -> tuple[set[str], str]:
    """(the wheel's file names, its entry_points.txt), from the wheel pip builds with hatchling."""
    pip = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path)]
    r = subprocess.run([*pip, str(root)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    (wheel,) = tmp_path.glob("privgate-*.whl")
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        entry = next(n for n in names if n.endswith("entry_points.txt"))
        return names, z.read(entry).decode()


def _configured(root: Path) -> tuple[set[str], str]:
    """(the file names, the entry points) pyproject.toml's hatch configuration puts in the wheel."""
    project = tomllib.loads((root / "pyproject.toml").read_text())
    wheel = project["tool"]["hatch"]["build"]["targets"]["wheel"]
    names = {str(p.relative_to(root)) for pkg in wheel["packages"] for p in (root / pkg).rglob("*.py")}
    for source, target in wheel.get("force-include", {}).items():
        names |= {f"{target}/{p.relative_to(root / source)}" for p in (root / source).rglob("*") if p.is_file()}
    scripts = project["project"]["scripts"]
    plugins = project["project"]["entry-points"]["pytest11"]
    text = "".join(f"{k} = {v}\n" for k, v in scripts.items()) + "[pytest11]\n"
    text += "".join(f"{k} = {v}\n" for k, v in plugins.items())
    return names, text


def test_wheel_contains_policies_and_plugin_entry_point(root, tmp_path):
    hatchling = importlib.util.find_spec("hatchling") is not None
    names, entry_points = _built(root, tmp_path) if hatchling else _configured(root)
    for policy in POLICIES:
        assert f"privgate/_policies/{policy}.yaml" in names
    assert "pytest_privgate/__init__.py" in names and "privgate/cli/__main__.py" in names
    assert "privgate = privgate.cli:main" in entry_points and "pytest11" in entry_points
