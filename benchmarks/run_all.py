"""`make bench`: every benchmark script under this folder, one after another; `make bench-quick`: the quick set.

python benchmarks/run_all.py            # every script of every folder (hours; see README.md for what each needs)
python benchmarks/run_all.py --quick    # QUICK: a few CPU benchmarks at small settings, a few minutes on 2 cores
python benchmarks/run_all.py --list     # the commands, without running them
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

# (script, arguments): CPU only, nothing beyond `make install`, small settings (README.md gives the times)
QUICK: tuple[tuple[str, ...], ...] = (
    ("engine/cifar_engine.py", "--small", "--device", "cpu"),
    ("remediation/ladder_vs_bisect.py",),
    ("false_alarms/diff_false_alarms.py", "400"),
    ("false_alarms/null_false_alarms.py", "--seeds", "3"),
    ("lm/lm_scoring.py",),
)


def every_script() -> list[tuple[str, ...]]:
    """Every ``FOLDER/NAME.py`` but the shared modules (``_common/``, ``_*.py``) and ``gpu/`` (a lent GPU's)."""
    found = sorted(
        p
        for p in HERE.glob("*/*.py")
        if not p.name.startswith("_") and not p.parent.name.startswith("_") and p.parent.name != "gpu"
    )
    return [(str(p.relative_to(HERE)),) for p in found]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="only the quick set")
    ap.add_argument("--list", action="store_true", help="print the commands and stop")
    args = ap.parse_args(argv)
    runs = list(QUICK) if args.quick else every_script()
    failed, t_all = [], time.perf_counter()
    for script, *extra in runs:
        name = " ".join([script, *extra])
        if args.list:
            print(f"python benchmarks/{name}")
            continue
        print(f"\n=== {name}", flush=True)
        t0 = time.perf_counter()
        code = subprocess.call([sys.executable, str(HERE / script), *extra], cwd=HERE.parent)
        print(f"=== {name}: exit {code} in {time.perf_counter() - t0:.1f} s", flush=True)
        if code:
            failed.append(name)
    if not args.list:
        print(f"\n{len(runs)} run(s) in {time.perf_counter() - t_all:.0f} s")
    if failed:
        print(f"failed: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
