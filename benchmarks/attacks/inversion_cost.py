"""Model-inversion cost per class on the digits and purchase examples (2 threads by default).

    .venv/bin/python benchmarks/attacks/inversion_cost.py [--threads 2] [--steps 300] [--json out.json]

For each example target (``examples/digits/model.pt``: 10 classes of 8x8
images; ``examples/purchase/model.pt``: 100 classes, 600 binary features) it
times, with ``torch.set_num_threads(threads)`` and the process pinned to that
many cores where the OS allows:

* ``prior``: training the denoising-autoencoder prior on the population data;
* ``batched``: the whole attack's optimisation, all classes in one batch (what
  ``privgate check`` does), divided by the number of classes;
* ``one class``: inverting each class alone (a batch of one), median and max
  over the classes timed — the cost a per-class loop would pay.

One run, on whatever else the machine is doing: the load average is printed
with the numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from privgate.attacks.inversion import image_grid  # noqa: E402
from privgate.attacks.inversion_search import invert, train_prior  # noqa: E402
from privgate.inputs.entrypoints import import_factory, load_recipe  # noqa: E402
from privgate.inputs.target import Target  # noqa: E402
from privgate.io.png import png_bytes  # noqa: E402


def _example(name: str) -> tuple[Target, np.ndarray, np.ndarray, tuple[int, ...] | None]:
    folder = ROOT / "examples" / name
    recipe = load_recipe("recipe:RECIPE", [folder])
    target = Target.load(folder / "model.pt", recipe=recipe)
    pop_x, pop_y = import_factory("data:population", [folder])()
    return target, np.asarray(pop_x, np.float32), np.asarray(pop_y), ((8, 8) if name == "digits" else None)


def measure(name: str, steps: int, classes_alone: int) -> dict:
    target, pop_x, _, image_shape = _example(name)
    lo, hi = pop_x.min(axis=0), pop_x.max(axis=0)
    n_classes = int(target.predict_proba(pop_x[:1]).shape[1])
    t = time.perf_counter()
    prior = train_prior((pop_x - lo) / np.maximum(hi - lo, 1e-12), seed=0)
    prior_s = time.perf_counter() - t
    tv = 0.05 if image_shape else 0.0
    start = pop_x.mean(axis=0)
    kw = dict(steps=steps, tv=tv, image_shape=image_shape, prior=prior)
    batch = invert(target.module, np.arange(n_classes), np.repeat(start[None], n_classes, axis=0), lo, hi, **kw)
    alone = []
    for c in range(min(classes_alone, n_classes)):
        one = invert(target.module, [c], start[None], lo, hi, **kw)
        alone.append(one.seconds)
    out = {
        "example": name,
        "classes": n_classes,
        "features": int(pop_x.shape[1]),
        "steps_max": steps,
        "steps_median": float(np.median(batch.steps)),
        "prior_s": round(prior_s, 3),
        "batched_total_s": round(batch.seconds, 3),
        "batched_per_class_s": round(batch.seconds / n_classes, 4),
        "one_class_median_s": round(float(np.median(alone)), 3),
        "one_class_max_s": round(float(np.max(alone)), 3),
        "classes_timed_alone": len(alone),
        "confidence_min": round(float(batch.confidence.min()), 4),
    }
    if image_shape:
        grid = image_grid(batch.recon.reshape(n_classes, *image_shape), float(lo.min()), float(hi.max()))
        out["png_bytes"] = len(png_bytes(grid))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--alone", type=int, default=10, help="classes inverted one at a time (per example)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if hasattr(os, "sched_setaffinity"):
        cores = sorted(os.sched_getaffinity(0))[: args.threads]
        os.sched_setaffinity(0, cores)
    rows = [measure(name, args.steps, args.alone) for name in ("digits", "purchase")]
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    print(f"threads {args.threads}, load average {load}")
    print(
        f"{'example':<9} {'classes':>7} {'prior s':>8} {'batched s/class':>16} {'alone median s':>15} "
        f"{'alone max s':>12} {'steps (median)':>15}"
    )
    for r in rows:
        print(
            f"{r['example']:<9} {r['classes']:>7} {r['prior_s']:>8.2f} {r['batched_per_class_s']:>16.4f} "
            f"{r['one_class_median_s']:>15.3f} {r['one_class_max_s']:>12.3f} {r['steps_median']:>15.0f}"
        )
    if args.json:
        args.json.write_text(
            json.dumps({"threads": args.threads, "load_average": load, "results": rows}, indent=2) + "\n"
        )


if __name__ == "__main__":
    main()
