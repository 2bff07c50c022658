"""``--device auto``'s probe on this machine: cold, then from the cache, and auto's estimate for the examples.

    python benchmarks/compute/device_probe.py                  # threads 16 and 1 (or the cores), a fresh cache folder
    python benchmarks/compute/device_probe.py --threads 16

Issue 43, item 5. Each probe runs in a fresh process (CUDA not yet started)
with its own ``XDG_CACHE_HOME``: the first measures (and writes the cache),
the second reads it. Then the examples' inputs are loaded and auto's two
estimates printed with the measured costs and with the documented constants.
Needs a CUDA GPU for the GPU half; without one it says so and stops.
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
sys.path.insert(0, str(ROOT))

_ONE = """
import json, time, sys
t0 = time.perf_counter()
import torch
from privgate.calibration import machine_costs
t1 = time.perf_counter()
p = machine_costs(int(sys.argv[1]))
print(json.dumps({"import_s": round(t1 - t0, 3), "call_s": round(time.perf_counter() - t1, 3), **p.facts()}))
"""


def probe(threads: int, cache: Path) -> dict:
    env = {
        **os.environ,
        "XDG_CACHE_HOME": str(cache),
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    out = subprocess.run([sys.executable, "-c", _ONE, str(threads)], env=env, capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(out.stderr[-3000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def estimates(threads: int, cache: Path) -> None:
    import torch

    from privgate.api import load_inputs
    from privgate.calibration import cache_file, cached, machine_key
    from privgate.device import DOCUMENTED, choose_device
    from privgate.options import RunOptions
    from privgate.settings import CheckSettings
    from privgate.workload import workload_of

    costs = cached(cache_file({"XDG_CACHE_HOME": str(cache)}), machine_key(torch.cuda.get_device_name(), threads))
    for example, policy in (("digits_cnn", "policy.yaml"), ("digits", "strict")):
        folder = ROOT / "examples" / example
        settings = CheckSettings(
            model=str(folder / "model.pt"), policy=str(folder / policy) if policy.endswith(".yaml") else policy,
            members="data:members", nonmembers="data:nonmembers", population="data:population",
            recipe="recipe:RECIPE", search_dirs=(folder,),
        )  # fmt: skip
        i = load_inputs(settings)
        work = workload_of(i.target, i.data, i.policy, i.recipe, RunOptions())
        for name, c in (("measured", costs), ("documented", DOCUMENTED)):
            if c is None:
                continue
            choice = choose_device(work, True, threads, c)
            print(f"{example} threads={threads} {name}: cpu {work.cpu_seconds(threads, c):.2f} s, "
                  f"gpu {work.gpu_seconds(c):.2f} s -> {choice.device}")  # fmt: skip
        for m in ("data", "recipe"):
            sys.modules.pop(m, None)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, nargs="+", default=sorted({os.cpu_count() or 1, 1}, reverse=True))
    args = ap.parse_args()
    import torch

    if not torch.cuda.is_available():
        print("torch sees no CUDA GPU here: auto runs on the CPU and nothing is probed")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        cache = Path(tmp)
        for threads in args.threads:
            for run in ("cold", "cached"):
                t0 = time.perf_counter()
                facts = probe(threads, cache)
                print(f"threads={threads} {run}: {json.dumps(facts)} (process {time.perf_counter() - t0:.2f} s)")
        for threads in args.threads:
            estimates(threads, cache)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
