"""Does ``--device auto`` pick the faster device? The examples checked on the CPU, on the GPU and on auto.

    python benchmarks/compute/auto_device.py                # digits (MLP) and digits_cnn, each on cpu, cuda, auto
    python benchmarks/compute/auto_device.py --examples digits --repeat 2
    python benchmarks/compute/auto_device.py --calibrate    # also measure the cost model's constants here
    python benchmarks/compute/auto_device.py --estimate-only # auto's estimate for each example and a CIFAR CNN, no run

Issue 33, item 3. Each run is ``privgate check`` as a user runs it in the
example's folder (its ``privgate.toml``): a fresh process, an empty cache (its
own ``XDG_CACHE_HOME``), the default threads, ``--device cpu``, ``--device
cuda`` (where torch sees a GPU) and no ``--device`` at all (``auto``), in
turns. Printed per run: the wall time (the process's start and imports
included), the report's duration, the device, the threads and the report's
``environment.device_reason``; then whether auto ran on the device that
measured faster.

``--calibrate`` measures the constants of :mod:`privgate.device`'s estimate on
this machine and prints them beside the documented ones: CPU FLOP/s per thread
(a stacked matrix product the shape of 16 MLP layers' batch of 64), the cost of
a tiny torch operation on the CPU, and on a GPU its start-up (CUDA context,
cuBLAS, the first kernels, from a fresh process), the cost of one small kernel
in a dependent chain, and its float32 FLOP/s.

``--estimate-only`` prints what auto would decide for each example (and for
the CIFAR-shaped check of ``benchmarks/engine/cifar_engine.py``: 50,000 rows, LiRA-64,
an airbench-class CNN of width 32, 8 epochs) were there a GPU, from the
examples' inputs: no check runs.
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

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

EXAMPLES = ("digits", "digits_cnn")


def run(example: str, device: str | None, scratch: Path, tag: str) -> dict:
    """One ``privgate check`` of ``example`` in a fresh process with an empty cache: wall time and report facts."""
    folder = ROOT / "examples" / example
    home = scratch / tag
    report = home / "report.json"
    home.mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PRIVGATE_")}
    env.update(
        PYTHONPATH=os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]),
        XDG_CACHE_HOME=str(home / "cache"),
        XDG_CONFIG_HOME=str(home / "config"),
    )
    cmd = [sys.executable, "-m", "privgate.cli", "check", "--json", str(report), "-q", "--no-step-summary"]
    if device:
        cmd += ["--device", device]
    t0 = time.perf_counter()
    out = subprocess.run(cmd, cwd=folder, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if out.returncode not in (0, 1, 3) or not report.is_file():
        raise RuntimeError(f"{example} --device {device or 'auto'}: exit {out.returncode}\n{out.stderr[-3000:]}")
    r = json.loads(report.read_text())
    env_ = r["environment"]
    return {
        "example": example,
        "asked": device or "auto",
        "wall": wall,
        "duration": r["duration_s"],
        "device": env_.get("device"),
        "gpu": env_.get("gpu"),
        "threads": env_.get("threads"),
        "threads_reason": env_.get("threads_reason"),
        "reason": env_.get("device_reason"),
        "verdict": r["verdict"],
        "attacks": {a["name"]: a.get("seconds") for a in r["attacks"] if a.get("status") == "ran"},
    }


def _timed(fn, n: int) -> float:
    for _ in range(min(n, 20)):
        fn()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t0) / n


GPU_START = """
import time, torch
t0 = time.perf_counter()
x = torch.randn(4096, 89).cuda()
w = torch.randn(89, 256, device="cuda", requires_grad=True)
loss = torch.relu(x @ w).sum()
loss.backward()
torch.optim.Adam([w]).step()
torch.cuda.synchronize()
print(time.perf_counter() - t0)
"""


def calibrate() -> dict:
    """The cost model's constants measured on this machine (see the module docstring)."""
    import torch

    from privgate.threads import usable_cores

    out: dict = {}
    cores = usable_cores().n
    a, b = torch.randn(16, 64, 256), torch.randn(16, 256, 256)
    for threads in sorted({1, cores}):
        torch.set_num_threads(threads)
        s = _timed(lambda: torch.bmm(a, b), 300)
        out[f"cpu GFLOP/s per thread, {threads} thread(s)"] = 2 * 16 * 64 * 256 * 256 / s / 1e9 / threads
        tiny, small = torch.randn(8, 8), torch.randn(64, 256)
        out[f"cpu µs per tiny op, {threads} thread(s)"] = _timed(lambda t=tiny: t + t, 20000) * 1e6
        out[f"cpu µs per 64x256 op, {threads} thread(s)"] = _timed(lambda t=small: torch.relu(t), 20000) * 1e6
    if torch.cuda.is_available():
        start = subprocess.run([sys.executable, "-c", GPU_START], capture_output=True, text=True)
        if start.returncode == 0:
            out["gpu start-up s (fresh process)"] = float(start.stdout.strip())
        x = torch.randn(64, 256, device="cuda")
        torch.cuda.synchronize()

        def chain(n: int = 2000) -> None:
            y = x
            for _ in range(n):
                y = y * 1.0001
            torch.cuda.synchronize()

        out["gpu µs per small kernel (dependent chain)"] = _timed(chain, 5) / 2000 * 1e6
        g, h = torch.randn(16, 2048, 2048, device="cuda"), torch.randn(16, 2048, 2048, device="cuda")

        def big() -> None:
            torch.bmm(g, h)
            torch.cuda.synchronize()

        out["gpu TFLOP/s float32 (16 x 2048³)"] = 2 * 16 * 2048**3 / _timed(big, 10) / 1e12
    return out


def estimates() -> list[tuple[str, object, int]]:
    """(name, Workload, threads) for each example and the CIFAR-shaped check, from their inputs."""
    import numpy as np

    from privgate.api import load_inputs
    from privgate.inputs.config import load_config
    from privgate.inputs.data import AuditData, Dataset
    from privgate.options import RunOptions
    from privgate.policy import as_policy
    from privgate.settings import CheckSettings
    from privgate.threads import default_threads
    from privgate.workload import workload_of

    threads = default_threads(os.environ.get("OMP_NUM_THREADS")).n
    out = []
    for example in EXAMPLES:
        folder = ROOT / "examples" / example
        cfg = load_config(folder / "privgate.toml")
        keys = ("model", "policy", "members", "nonmembers", "population", "recipe")
        values = {k: cfg.get(k) for k in keys}
        values["model"] = str(folder / values["model"])
        if Path(values["policy"]).suffix:
            values["policy"] = str(folder / values["policy"])
        inputs = load_inputs(CheckSettings(**values, search_dirs=(folder,)))
        work = workload_of(inputs.target, inputs.data, inputs.policy, inputs.recipe, RunOptions())
        out.append((example, work, threads))
    import cifar_engine

    recipe = cifar_engine.recipe_for(32, 8, "cuda")

    def part(n: int, seed: int, role: str) -> Dataset:  # only the shapes matter for the estimate
        x = np.random.default_rng(seed).random((n, 3, 32, 32), dtype=np.float32)
        return Dataset(x, np.arange(n) % 10, role)

    data = AuditData(part(25_000, 0, "members"), part(25_000, 1, "non-members"), part(5_000, 2, "population"))
    target = recipe.build(seed=0)
    from privgate.inputs.target import Target

    work = workload_of(Target(target), data, as_policy(cifar_engine.policy(64)), recipe, RunOptions())
    out.append(("cifar_engine (50,000 rows, LiRA-64, width 32)", work, threads))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--examples", nargs="+", default=list(EXAMPLES), choices=EXAMPLES)
    ap.add_argument("--repeat", type=int, default=1, help="runs of each device, in turns (the fastest counts)")
    ap.add_argument("--calibrate", action="store_true", help="measure the cost model's constants here")
    ap.add_argument(
        "--devices", nargs="+", default=["auto", "cpu", "cuda"], choices=("auto", "cpu", "cuda"), help="runs to make"
    )
    ap.add_argument("--estimate-only", action="store_true", help="print auto's estimates; run no check")
    ap.add_argument("--json", type=Path, default=None, help="write every run's facts here")
    args = ap.parse_args()
    import torch

    from privgate import device as dev

    cuda = torch.cuda.is_available()
    where = torch.cuda.get_device_name(0) if cuda else "no CUDA GPU"
    print(f"{where}; {os.cpu_count()} CPUs; torch {torch.__version__}", flush=True)
    if args.estimate_only:
        for name, work, threads in estimates():
            print(f"{name}: {dev.choose_device(work, True, threads).reason}")
        return 0
    record: dict = {"machine": where, "runs": []}
    if args.calibrate:
        measured = calibrate()
        record["calibration"] = measured
        print("calibration (privgate.device's constants: CPU_FLOPS_PER_THREAD, CPU_OP_SECONDS, GPU_START_SECONDS,")
        print("GPU_LAUNCH_SECONDS, GPU_FLOPS):")
        print(
            f"  documented: {dev.CPU_FLOPS_PER_THREAD / 1e9:g} GFLOP/s per thread, {dev.CPU_OP_SECONDS * 1e6:g} µs per "
            f"CPU op, {dev.GPU_START_SECONDS:g} s GPU start-up, {dev.GPU_LAUNCH_SECONDS * 1e6:g} µs per kernel, "
            f"{dev.GPU_FLOPS / 1e12:g} TFLOP/s"
        )
        for k, v in measured.items():
            print(f"  {k}: {v:.3g}", flush=True)
    devices = [None if d == "auto" else d for d in args.devices if cuda or d != "cuda"]
    with tempfile.TemporaryDirectory(prefix="privgate-auto-") as tmp:
        for example in args.examples:
            runs: dict[str, list[dict]] = {}
            for r in range(args.repeat):
                for d in devices if r % 2 == 0 else devices[::-1]:
                    facts = run(example, d, Path(tmp), f"{example}-{d or 'auto'}-{r}")
                    runs.setdefault(facts["asked"], []).append(facts)
                    record["runs"].append(facts)
                    slow = sorted(facts["attacks"].items(), key=lambda kv: -(kv[1] or 0))[:3]
                    print(
                        f"{example} --device {facts['asked']}: {facts['wall']:.1f} s wall, report "
                        f"{facts['duration']:.1f} s, on {facts['device']} ({facts['threads']} threads: "
                        f"{facts['threads_reason']}); slowest " + ", ".join(f"{n} {s:.1f} s" for n, s in slow),
                        flush=True,
                    )
            best = {k: min(v, key=lambda f: f["wall"]) for k, v in runs.items()}
            auto = best.get("auto")
            if auto is None:
                continue
            print(f"{example}: auto ran on {auto['device']}: {auto['reason']}")
            measured = {k: v["wall"] for k, v in best.items() if k != "auto"}
            if len(measured) > 1:
                faster = min(measured, key=measured.get)
                verdict = "the faster" if auto["device"] == faster else "NOT the faster"
                print(
                    f"{example}: cpu {measured['cpu']:.1f} s, cuda {measured['cuda']:.1f} s, auto "
                    f"{auto['wall']:.1f} s: auto picked {verdict} device ({faster} measured faster)",
                    flush=True,
                )
            elif "cpu" in measured:
                print(f"{example}: cpu {measured['cpu']:.1f} s, auto {auto['wall']:.1f} s; the GPU: not measured here")
    if args.json:
        args.json.write_text(json.dumps(record, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
