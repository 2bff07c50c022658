"""``privgate check --executor ray`` with no address, on the Ray `make test` installs and on the newest Ray.

    python benchmarks/distributed/ray_local_start.py   # both Rays (the newest is installed into .venv-ray-newest)
    python benchmarks/distributed/ray_local_start.py --only-installed

Users get two Rays: ``pip install 'privgate[ray]'`` alone resolves to the
newest Ray, while with ``privgate[flower]`` (and in ``make test``) Flower pins
2.55.1. ``tests/test_ray.py`` runs the user's path — the CLI in a subprocess,
no ``--ray-address``, Ray started on this machine — on the pinned one. This
script runs the same path on both: for the newest it builds a small overlay
environment ``.venv-ray-newest`` (only the newest ``ray`` wheel, installed
``--no-deps``; everything else, privgate included, comes from ``.venv``
through a ``.pth`` file), once; about 35 s and 70 MB of download.

For each Ray it runs one check (a regularised MLP on 300 + 300 synthetic rows,
LiRA with 4 reference models trained as 2 Ray tasks) with ``--executor ray``
and the same check with ``--executor local``, and prints the Ray version, the
exit codes (the verdict's must be the same: Ray's own fatal exit is 1), the
wall seconds and whether the two reports' numbers are identical. It exits 1
when any run differs from the local one. Nothing about time is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

OVERLAY = ROOT / ".venv-ray-newest"
POLICY = (
    "name: refs\nsensitivity: confidential\nrelease: model\nconfidence: 0.95\nattacks:\n  lira: {models: 4}\n"
    "  loss: {}\nchecks:\n  - {id: lira-auc, attack: lira, metric: auc, max: 0.6}\n"
    "  - {id: loss-auc, attack: loss, metric: auc, max: 0.6}\n"
)
VOLATILE = {"seconds", "duration_s", "started", "environment", "notes", "audit_seconds"}


def _overlay_python() -> Path:
    """The overlay environment's python: the newest ray on top of this environment's packages."""
    py = OVERLAY / "bin" / "python"
    if not py.exists():
        subprocess.run([sys.executable, "-m", "venv", str(OVERLAY)], check=True)
        subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-deps", "--upgrade", "ray"], check=True)
        site = subprocess.run(
            [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
        ours = subprocess.run(
            [sys.executable, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
        # addsitedir, not a plain path: the base environment's own .pth files (privgate's editable install) apply too
        (Path(site) / "zz_privgate_base.pth").write_text(f"import site; site.addsitedir({ours!r})\n")
    return py


def _stable(value: object) -> object:
    if isinstance(value, dict):
        return {k: _stable(v) for k, v in value.items() if k not in VOLATILE}
    if isinstance(value, list):
        return [_stable(v) for v in value]
    return value


def _check(python: Path, case: object, folder: Path, executor: str) -> tuple[int, float, dict, str]:
    out = folder / f"{executor}-{python.parent.parent.name}.json"
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "PRIVGATE_DEBUG")}
    env["OMP_NUM_THREADS"] = "1"
    cmd = [
        str(python), "-m", "privgate.cli", "check", str(case.safe_ts), "--policy", str(folder / "refs.yaml"),
        "--members", str(case.members), "--nonmembers", str(case.nonmembers), "--recipe", case.recipe_spec,
        "--cache-dir", "off", "--models-per-task", "2", "--quiet", "--executor", executor, "--json", str(out),
    ]  # fmt: skip
    t0 = time.perf_counter()
    r = subprocess.run(cmd, cwd=case.dir, env=env, capture_output=True, text=True, timeout=600)
    seconds = time.perf_counter() - t0
    report = json.loads(out.read_text()) if out.exists() else {}
    return r.returncode, seconds, report, r.stderr.strip()


def _ray_version(python: Path) -> str:
    return subprocess.run(
        [str(python), "-c", "import ray; print(ray.__version__)"], capture_output=True, text=True, check=True
    ).stdout.strip()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only-installed", action="store_true", help="skip the newest Ray (no overlay, no download)")
    args = parser.parse_args()
    from cases import build_case

    pythons = [Path(sys.executable)] + ([] if args.only_installed else [_overlay_python()])
    failed = False
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        case = build_case(folder / "case")
        (folder / "refs.yaml").write_text(POLICY)
        code, seconds, local, _ = _check(Path(sys.executable), case, folder, "local")
        print(f"local executor: exit {code} ({local.get('verdict')}) in {seconds:.1f} s")
        for python in pythons:
            version = _ray_version(python)
            code_ray, seconds, report, stderr = _check(python, case, folder, "ray")
            same = bool(report) and _stable(report) == _stable(local)
            ok = code_ray == code and same
            failed |= not ok
            tail = f"; stderr: {stderr.splitlines()[-1][:200]}" if stderr else ""
            print(
                f"ray {version} ({python}): exit {code_ray}, local {code}; reports identical: {same}; "
                f"{seconds:.1f} s (Ray's start included){tail}"
            )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
