"""The wheel ships the built-in policies, so `--policy strict` works after `pip install`."""

from __future__ import annotations

import subprocess
import sys
import zipfile


def test_wheel_contains_policies_and_plugin_entry_point(root, tmp_path):
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path),
            str(root),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    (wheel,) = tmp_path.glob("privgate-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    for policy in ("public", "internal", "confidential", "strict"):
        assert f"privgate/_policies/{policy}.yaml" in names
    assert "pytest_privgate/__init__.py" in names
    entry = next(n for n in names if n.endswith("entry_points.txt"))
    text = zipfile.ZipFile(wheel).read(entry).decode()
    assert "privgate = privgate.cli:main" in text and "pytest11" in text
