"""DP-SGD epoch time vs non-private training on the digits recipe (one run each; the ratio).

    .venv/bin/python benchmarks/remediation/dp_speed.py [--epochs 5] [--threads 1] [--json out.json]

Non-private: ``train_model(RECIPE, ...)`` (the plain loop every reference model uses).
DP-SGD: :func:`privgate.dpsgd.train.train_dp` with the same model, optimiser and
batch size at a fixed noise multiplier (σ = 1, so the timing excludes the
accountant's noise calibration, reported separately), Poisson sampling,
clipping and noise, ``BatchMemoryManager``; once with ghost clipping (privgate's
default) and once with materialised per-example gradients (Opacus hooks). Also
timed: the remediation settings of ``examples/digits/strict-remediate.yaml``
(logical batch 256). Each configuration gets a one-epoch warm-up first.

One run, on whatever else the machine is doing: the load average is printed
with the numbers. Per-example gradients cost more per step than one averaged
gradient (Opacus reports 2-10x on small models, Yousefpour et al. 2021, arXiv
2109.12298; the seed thesis §5.3 measured 1.5-10x).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DIGITS = ROOT / "examples" / "digits"
sys.path[:0] = [str(ROOT), str(DIGITS)]

import data  # noqa: E402  (examples/digits/data.py)
import torch  # noqa: E402
from recipe import RECIPE  # noqa: E402  (examples/digits/recipe.py)

from privgate.dpsgd.records import DPSettings  # noqa: E402
from privgate.dpsgd.train import train_dp  # noqa: E402
from privgate.training.loop import train_model  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    x, y = data.members()
    e = args.epochs
    delta = 1.0 / (10 * len(y))

    def plain_epoch(epochs: int) -> float:
        t = time.perf_counter()
        train_model(dataclasses.replace(RECIPE, epochs=epochs), x, y, seed=0)
        return (time.perf_counter() - t) / epochs

    def dp_epoch(epochs: int, batch: int, mode: str) -> float:
        settings = DPSettings(
            epochs=epochs,
            batch_size=batch,
            max_grad_norm=1.0,
            delta=delta,
            accountant="rdp",
            max_physical_batch_size=256,
            grad_sample_mode=mode,
        )
        _, rec = train_dp(RECIPE, x, y, 0, settings=settings, noise_multiplier=1.0, account=False)
        return rec.seconds / epochs

    configs = {
        "dp-sgd, batch 64, ghost clipping": (RECIPE.batch_size, "ghost"),
        "dp-sgd, batch 64, per-example grads": (RECIPE.batch_size, "hooks"),
        "dp-sgd, batch 256, ghost clipping": (256, "ghost"),
        "dp-sgd, batch 256, per-example grads": (256, "hooks"),
    }
    plain_epoch(1)  # warm-up: first-call allocations and imports are not training time
    for batch, mode in configs.values():
        dp_epoch(1, batch, mode)
    plain = plain_epoch(e)
    runs = {label: dp_epoch(e, batch, mode) for label, (batch, mode) in configs.items()}

    from opacus.accountants.utils import get_noise_multiplier

    cal = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # RDP: "optimal order is the largest alpha" at large ε
        for acc in ("rdp", "prv"):
            t = time.perf_counter()
            get_noise_multiplier(target_epsilon=50.0, target_delta=delta, sample_rate=0.25, epochs=30, accountant=acc)
            cal[acc] = time.perf_counter() - t

    load = os.getloadavg()[0]
    print(
        f"digits recipe {RECIPE.name}: {len(y)} members, {e} epochs, {args.threads} thread(s), load average "
        f"{load:.2f} on {os.cpu_count()} cores"
    )
    print(f"  {'non-private, batch 64':<34} {plain * 1000:8.1f} ms/epoch   1.00x")
    for label, sec in runs.items():
        print(f"  {label:<34} {sec * 1000:8.1f} ms/epoch  {sec / plain:5.2f}x")
    print(
        f"  noise calibration for ε = 50 (30 epochs, q = 0.25): rdp {cal['rdp']:.2f} s, prv {cal['prv']:.2f} "
        f"s (once per ε)"
    )
    result = {
        "epochs": e,
        "threads": args.threads,
        "load_average": load,
        "non_private_s_per_epoch": plain,
        "dp_s_per_epoch": runs,
        "ratio": {k: v / plain for k, v in runs.items()},
        "calibration_s": cal,
    }
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
