"""Make privgate's checkout count as installed where it cannot be pip-installed (a lent GPU machine, no network).

    python benchmarks/gpu/_dist_info.py SITE      # SITE: a folder that goes on PYTHONPATH before the checkout

Writes ``SITE/privgate-VERSION.dist-info`` (METADATA and entry_points.txt from ``pyproject.toml``): what an
editable install would give, so the plugin registries (``privgate.kinds``, ``privgate.attacks``,
``privgate.harden_tasks``) and the pytest plugin (``pytest11``) are found, while the code itself is imported
from the checkout on ``PYTHONPATH``. Nothing else is installed or changed.
"""

from __future__ import annotations

import sys
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[2]


def write(site: Path) -> Path:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    name, version = project["name"], project["version"]
    info = site / f"{name}-{version}.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    groups = {"console_scripts": project.get("scripts", {}), **project.get("entry-points", {})}
    text = "".join(
        f"[{group}]\n" + "".join(f"{key} = {value}\n" for key, value in entries.items()) + "\n"
        for group, entries in groups.items()
        if entries
    )
    (info / "entry_points.txt").write_text(text)
    (info / "INSTALLER").write_text("benchmarks/gpu/_dist_info.py\n")
    return info


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__.splitlines()[2].strip())
    print(f"wrote {write(Path(sys.argv[1]))}")
