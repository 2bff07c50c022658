"""The Ray executor on one machine: its overhead against the local executor, and the speed-up with 2 workers.

    python benchmarks/distributed/ray_executor.py                  # K = 16 digits MLPs in 2 tasks of 8, 30 epochs
    python benchmarks/distributed/ray_executor.py --model cnn      # the digits CNN (conv + BatchNorm)
    python benchmarks/distributed/ray_executor.py --epochs 10      # a quick look

The work is what an audit's reference-model attack hands the executor
(:func:`privgate.training.engine.train_ensemble`, no cache): K models of the
example's recipe on the digits audit pool, split into tasks of
``--models-per-task`` models (default 8: 2 tasks of 8), each task vectorised
inside with one torch thread. It runs, in this one process:

1. **local**, the 2 tasks one after another (``--executor local --models-per-task 8``);
2. **local, one task of 16** (the default ``models_per_task``), to show what splitting costs on one machine;
3. **ray, 1 worker** (``ray.init(num_cpus=1)``): the same 2 tasks one after
   another in a worker process; ray ÷ local is the executor's overhead
   (serialising the recipe and rows, scheduling, shipping 16 states back);
4. **ray, 2 workers** (``ray.init(num_cpus=2)``): the 2 tasks side by side;
   local ÷ ray is the speed-up.

Each Ray cluster is started, then warmed by one small task per worker (each worker process
importing torch and privgate), which is reported as start-up time and not
counted in the ratios. Every run's states are compared bit for bit with the
local run's: the same tasks and seeds give the same models whatever the
executor. Ratios are measured in one run and printed; nothing is asserted about
time. On a machine whose cores are shared with other work the 2-worker figure
is only as good as the second core that is free.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import torch  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402

from privgate.executors import LocalExecutor  # noqa: E402
from privgate.training.engine import TrainedReferences, train_ensemble  # noqa: E402
from privgate.training.plan import model_seeds, paired_masks  # noqa: E402
from privgate.training.trained import TrainSettings  # noqa: E402


def _recipe(model: str, epochs: int):  # noqa: ANN202
    path = ROOT / "examples" / ("digits_cnn" if model == "cnn" else "digits") / "recipe.py"
    spec = importlib.util.spec_from_file_location(f"bench_{model}_recipe", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return dataclasses.replace(module.RECIPE, epochs=epochs)


def _same(a: TrainedReferences, b: TrainedReferences) -> bool:
    return all(torch.equal(s[n], t[n]) for s, t in zip(a.models, b.models) for n in s)


def _warm(ray, workers: int) -> float:  # noqa: ANN001
    """Seconds for ``workers`` side-by-side tasks that import torch and privgate, one per worker process.

    Each task holds its CPU for a moment, so Ray starts one worker per CPU and every worker the measured run
    uses has paid its imports before the clock starts.
    """

    def touch() -> int:
        import privgate.training.engine  # noqa: F401

        time.sleep(0.5)
        return os.getpid()

    t0 = time.perf_counter()
    ray.get([ray.remote(touch).options(num_cpus=1).remote() for _ in range(workers)])
    return time.perf_counter() - t0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=("mlp", "cnn"), default="mlp")
    parser.add_argument("--models", type=int, default=16, help="K reference models")
    parser.add_argument("--models-per-task", type=int, default=8)
    parser.add_argument("--epochs", type=int, default=30)
    args = parser.parse_args()
    try:
        import ray
    except ImportError:
        print("Ray is not installed (pip install 'privgate[ray]'): nothing measured.")
        return 0
    from privgate.executors.ray import RayExecutor

    recipe = _recipe(args.model, args.epochs)
    d = load_digits()
    x = (d.data / 16.0).astype(np.float32)
    if args.model == "cnn":
        x = x.reshape(-1, 1, 8, 8)
    y = d.target.astype(np.int64)
    k, per = args.models, args.models_per_task
    masks, seeds = paired_masks(len(x), k, 0), model_seeds(0, k)
    tasks = -(-k // per)
    print(
        f"{k} {recipe.name} reference models, {args.epochs} epochs, {len(x)} digits rows; {tasks} task(s) of at most "
        f"{per} models, 1 thread each; {os.cpu_count()} CPU(s) on this machine, load average "
        f"{os.getloadavg()[0]:.1f} before the run"
    )

    def run(executor, models_per_task: int) -> tuple[float, TrainedReferences]:  # noqa: ANN001
        t0 = time.perf_counter()
        ens = train_ensemble(
            recipe, x, y, masks, seeds, TrainSettings(executor=executor, models_per_task=models_per_task, threads=1)
        )
        return time.perf_counter() - t0, ens

    t_local, local = run(LocalExecutor(), per)
    print(f"local, {tasks} tasks one after another: {t_local:7.2f} s  ({local.kernel} kernel)")
    t_one, one = run(LocalExecutor(), k)
    print(f"local, one task of {k}:             {t_one:7.2f} s  (splitting costs {t_local / t_one:.2f}x on one core)")

    figures = {}
    for workers in (1, 2):
        t0 = time.perf_counter()
        ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False, logging_level="warning")
        started = time.perf_counter() - t0
        warm = _warm(ray, workers)
        t_ray, ens = run(RayExecutor(ray), per)
        figures[workers] = t_ray
        print(
            f"ray, {workers} worker(s):                  {t_ray:7.2f} s  (cluster start {started:.1f} s, first task "
            f"{warm:.1f} s, not counted; states identical to local: {_same(local, ens)})"
        )
        ray.shutdown()
    print(f"\noverhead, ray with 1 worker ÷ local:   {figures[1] / t_local:.2f}x")
    print(f"speed-up, local ÷ ray with 2 workers:  {t_local / figures[2]:.2f}x  ({tasks} tasks of {per})")
    print(f"speed-up against one local task of {k}: {t_one / figures[2]:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
