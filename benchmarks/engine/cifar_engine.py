"""CIFAR-shaped LiRA end to end: where the time goes, vectorised reference models vs one after another.

    python benchmarks/engine/cifar_engine.py --small                          # CPU, under a minute on 2 cores
    python benchmarks/engine/cifar_engine.py                                  # the same where torch sees no GPU
    python benchmarks/engine/cifar_engine.py --device cuda                    # the issue's goal: 50,000 rows, LiRA-64
    python benchmarks/engine/cifar_engine.py --device cuda --engine vectorised # only the engine (no sequential run)
    python benchmarks/engine/cifar_engine.py --device cpu --rows 4000 --references 8 --width 16

Issue 33, item 4 ("speed where models are big"). **Data**: synthetic, CIFAR-shaped
(3×32×32 float images, 10 classes) drawn from ``--seed``, no download: each class
is a mixture of 4 smooth random prototypes (4×4×3 Gaussian noise, bilinearly
upsampled), each image a prototype at a random shift plus pixel noise, and
:data:`LABEL_NOISE` of the labels replaced by random ones — those rows a network
can only memorise, which gives LiRA its signal. Half the ``--rows`` are members
(the target trains on them), half non-members; ``--rows``/10 more are the
population (RMIA's z-samples).

**Network and recipe**: an airbench-class CNN (Jordan 2024, arXiv 2404.00498: a
94 % CIFAR-10 model in 3.8 s on one A100) at width ``w`` (default 32): four
conv 3×3 → BatchNorm → GELU blocks of w, 2w, 4w, 4w channels, the last three
after a 2×2 max-pooling, global max-pooling, a linear layer to 10 classes.
Trained the way such networks are: SGD with Nesterov momentum 0.9, weight
decay 5e-4, batch 512, one-cycle learning rate (peak 0.2), label smoothing 0.2,
random crops (reflect padding 2) and flips, bf16 autocast on the GPU (float32
on the CPU, where bf16 needs AMX to be fast); ``--epochs`` (default 8). The
target is this recipe trained on the members; the reference models are trained
by privgate with the same recipe.

**What runs**: the target is trained with ``train_model`` on ``--device``; a
small check (100 + 100 rows, one epoch) pays the process's one-time costs
(scipy's statistics imported, CUDA and cuDNN initialised); then
``privgate.api.check`` (the real path: policy, inputs, gate, attacks, report)
with a policy running LiRA (``--references`` models) and RMIA (4 of them, shared),
the cache off, ``--engine`` vectorised, sequential or both (then the same target,
data and policy twice). Printed per run, in seconds: imports (torch and
privgate, once), data generation, target training, the small check, and inside the check:
reference training (``train_ensemble``), reference scoring (every reference
model's forward passes on the audit rows: ``TrainedReferences.output_batches``), target
scoring (``Target``'s forward passes), and the rest (loading, attack statistics,
checks, report); the most forward passes any reference model made over the
audit rows and the z-samples under one view after LiRA and RMIA (1: they shared
one scoring pass, issue 43). Then the ratio sequential / vectorised, LiRA's AUC and TPR at
1 % FPR of each run (the same models up to float rounding give the same numbers
up to noise), and the goal line: LiRA-64 on 50,000 rows ≤ 60 s end to end on
one H100-class GPU and ≥ 3× ``--engine sequential`` on it. On the CPU the
GPU figures are printed as not measured.
"""

from __future__ import annotations

import time

T_START = time.perf_counter()

import argparse  # noqa: E402
import contextlib  # noqa: E402
import dataclasses  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402

import privgate.api  # noqa: E402
import privgate.attacks.lira  # noqa: E402, F401  (what the first check would import: counted with the imports)
import privgate.attacks.rmia  # noqa: E402, F401
import privgate.gate  # noqa: E402, F401
import privgate.training.engine  # noqa: E402, F401
from privgate.recipe import Augment, Recipe  # noqa: E402
from privgate.training.loop import train_model  # noqa: E402

T_IMPORTS = time.perf_counter() - T_START

CLASSES, PROTOTYPES, LABEL_NOISE, PIXEL_NOISE = 10, 4, 0.1, 0.3
GOAL_SECONDS, GOAL_RATIO = 60.0, 3.0


def airbench_like(width: int = 32) -> nn.Module:
    """Four conv → BatchNorm → GELU blocks (w, 2w, 4w, 4w channels; 2×2 max-pooling in the last three); 10 logits."""
    w = width

    def block(cin: int, cout: int, pool: bool) -> list[nn.Module]:
        return (
            [nn.Conv2d(cin, cout, 3, padding=1, bias=False)]
            + ([nn.MaxPool2d(2)] if pool else [])
            + [
                nn.BatchNorm2d(cout),
                nn.GELU(),
            ]
        )

    return nn.Sequential(
        *block(3, w, False),
        *block(w, 2 * w, True),
        *block(2 * w, 4 * w, True),
        *block(4 * w, 4 * w, True),
        nn.AdaptiveMaxPool2d(1),
        nn.Flatten(),
        nn.Linear(4 * w, CLASSES, bias=False),
    )


def synthetic_cifar(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``n`` CIFAR-shaped images ``[n, 3, 32, 32]`` (float32) and labels (module docstring)."""
    import torch.nn.functional as F

    rng = np.random.default_rng(seed)
    protos = torch.as_tensor(np.random.default_rng(1234).normal(0, 1, (CLASSES * PROTOTYPES, 3, 4, 4)))
    protos = F.interpolate(protos.float(), size=(40, 40), mode="bilinear", align_corners=False).numpy()
    y = rng.integers(0, CLASSES, n)
    which = y * PROTOTYPES + rng.integers(0, PROTOTYPES, n)
    dy, dx = rng.integers(0, 9, n), rng.integers(0, 9, n)
    x = np.empty((n, 3, 32, 32), dtype=np.float32)
    for s in range(0, n, 4096):  # shifted windows of the prototypes, a slab at a time
        i = np.arange(s, min(n, s + 4096))
        rows = (dy[i, None] + np.arange(32))[:, None, :, None]
        cols = (dx[i, None] + np.arange(32))[:, None, None, :]
        x[i] = protos[which[i, None, None, None], np.arange(3)[None, :, None, None], rows, cols]
    x += rng.normal(0, PIXEL_NOISE, x.shape).astype(np.float32)
    flip = rng.random(n) < LABEL_NOISE
    y = np.where(flip, rng.integers(0, CLASSES, n), y)
    return x, y.astype(np.int64)


def recipe_for(width: int, epochs: int, device: str) -> Recipe:
    return Recipe(
        model_factory=lambda: airbench_like(width),
        epochs=epochs,
        batch_size=512,
        lr=0.2,
        optimizer="sgd",
        momentum=0.9,
        nesterov=True,
        weight_decay=5e-4,
        schedule="one-cycle",
        label_smoothing=0.2,
        augment=Augment(crop_padding=2, flip=True, padding_mode="reflect"),
        precision="bf16" if device == "cuda" else "fp32",
        name=f"airbench-like-w{width}",
    )


class Timers:
    """Seconds spent inside privgate's reference training, reference scoring and target scoring (wrapped)."""

    def __init__(self) -> None:
        self.t = {"reference training": 0.0, "reference scoring": 0.0, "target scoring": 0.0}
        self.device = "cpu"

    def _sync(self) -> None:
        if self.device.startswith("cuda"):
            torch.cuda.synchronize()

    @contextlib.contextmanager
    def installed(self):  # noqa: ANN201
        import privgate.training.engine as engine
        from privgate.inputs.target import Target
        from privgate.training.trained import TrainedReferences as Ensemble

        timers = self
        train, outputs, raw = engine.train_ensemble, Ensemble.output_batches, Target._raw_batches

        def train_ensemble(*a, **kw):  # noqa: ANN002, ANN003, ANN202
            t0 = time.perf_counter()
            try:
                return train(*a, **kw)
            finally:
                timers._sync()
                timers.t["reference training"] += time.perf_counter() - t0

        def timed(gen, key: str):  # noqa: ANN001, ANN202
            while True:
                t0 = time.perf_counter()
                try:
                    item = next(gen)
                except StopIteration:
                    timers.t[key] += time.perf_counter() - t0
                    return
                timers.t[key] += time.perf_counter() - t0
                yield item

        engine.train_ensemble = train_ensemble
        Ensemble.output_batches = lambda ens, *a, **kw: timed(outputs(ens, *a, **kw), "reference scoring")
        Target._raw_batches = lambda tgt, *a, **kw: timed(raw(tgt, *a, **kw), "target scoring")
        try:
            yield self
        finally:
            engine.train_ensemble, Ensemble.output_batches, Target._raw_batches = train, outputs, raw


def policy(references: int, views: str | None = None):  # noqa: ANN201
    from privgate.policy import parse_policy

    aq = f", augmented_queries: {views}" if views else ""
    return parse_policy(
        f"name: cifar-bench\nsensitivity: internal\nrelease: api\n"
        f"attacks: {{lira: {{models: {references}{aq}}}, rmia: {{models: {min(4, references)}{aq}}}}}\n"
        "checks:\n  - {id: tpr, attack: lira, metric: tpr_at_fpr, fpr: 0.01, max: 1.0}\n"
    )


def run_check(engine: str, target: nn.Module, data: dict, recipe: Recipe, args: argparse.Namespace) -> dict:
    """One ``privgate.api.check`` with ``engine``; its time breakdown and LiRA's numbers."""
    from privgate.options import RunOptions

    timers = Timers()
    timers.device = args.device
    opts = RunOptions(
        seed=args.seed, threads=args.threads, cache_dir="off", engine=engine, device=args.device,
        models_per_task=args.models_per_task or args.references,
    )  # fmt: skip
    with timers.installed():
        t0 = time.perf_counter()
        report = privgate.api.check(
            target, policy(args.references, getattr(args, "views", None)), data["members"], data["nonmembers"],
            population=data["population"], recipe=recipe, options=opts,
        )  # fmt: skip
        total = time.perf_counter() - t0
    lira = next(a for a in report.attacks if a.name == "lira")
    rmia = next(a for a in report.attacks if a.name == "rmia")
    tpr = next((p for p in lira.tpr_at_fpr if abs(p.fpr - 0.01) < 1e-9), None)
    times = dict(timers.t)
    times["rest of the check"] = total - sum(times.values())
    return {
        "engine": engine,
        "check": total,
        "times": times,
        "lira": lira,
        "tpr": tpr,
        "kernel": f"{lira.extras.get('engine')}/{lira.extras.get('kernel')}",
        # the most forward passes any reference model made over the rows under one view, after both attacks
        "passes": rmia.extras.get("reference_passes", {}),
        "views": len(lira.extras.get("augmented_queries", [])) or 1,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--rows", type=int, default=None, help="audit rows: half members, half non-members (50,000)")
    ap.add_argument("--references", type=int, default=None, help="LiRA's reference models, RMIA uses 4 of them (64)")
    ap.add_argument("--engine", choices=("vectorised", "sequential", "both"), default="both")
    ap.add_argument("--width", type=int, default=None, help="the network's first width in channels (32)")
    ap.add_argument("--epochs", type=int, default=None, help="(8)")
    ap.add_argument(
        "--threads", type=int, default=None, help="torch threads (default: privgate's, torch's own setting)"
    )
    ap.add_argument("--models-per-task", type=int, default=None, help="default: all references in one task")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None, help="also write each run's numbers to this file (gpu_check.sh)")
    ap.add_argument("--views", choices=("2", "18", "50", "false"), default=None, help="augmented_queries (default 2)")
    ap.add_argument(
        "--small", action="store_true", help="CPU, 1,000 rows, 4 references, width 8, 2 epochs (the CPU's default)"
    )
    args = ap.parse_args()
    sizes = ("rows", "references", "width", "epochs")
    if args.device == "cpu" and all(getattr(args, k) is None for k in sizes):
        args.small = True  # the goal's size would take hours on a CPU (and `make bench` runs this with no arguments)
    if args.small:
        args.device, args.rows, args.references, args.width, args.epochs = "cpu", 1000, 4, 8, 2
    for k, default in zip(sizes, (50_000, 64, 32, 8)):
        setattr(args, k, default if getattr(args, k) is None else getattr(args, k))
    if args.device == "cuda" and not torch.cuda.is_available():
        print("--device cuda: torch sees no GPU here (torch.cuda.is_available() is False)")
        return 2
    if args.threads:
        torch.set_num_threads(args.threads)
    where = torch.cuda.get_device_name(0) if args.device == "cuda" else f"CPU, {os.cpu_count()} core(s) visible"
    t0 = time.perf_counter()
    members = synthetic_cifar(args.rows // 2, args.seed)
    nonmembers = synthetic_cifar(args.rows // 2, args.seed + 1)
    population = synthetic_cifar(max(100, args.rows // 10), args.seed + 2)
    t_data = time.perf_counter() - t0
    recipe = recipe_for(args.width, args.epochs, args.device)
    n_params = sum(p.numel() for p in recipe.build().parameters())
    print(
        f"{where}; torch {torch.__version__}; {args.rows} audit rows (3x32x32, {CLASSES} classes, "
        f"{LABEL_NOISE:.0%} noisy labels), LiRA-{args.references} + RMIA-{min(4, args.references)}; '{recipe.name}' "
        f"({n_params} parameters), {args.epochs} epochs, batch {recipe.batch_size}, sgd+nesterov, one-cycle, "
        f"label smoothing 0.2, crop+flip, {recipe.precision}",
        flush=True,
    )
    t0 = time.perf_counter()
    target = train_model(recipe, *members, seed=args.seed + 99, device=args.device)
    if args.device == "cuda":
        torch.cuda.synchronize()
    t_target = time.perf_counter() - t0
    data = {"members": members, "nonmembers": nonmembers, "population": population}
    # the first check of a process imports scipy's statistics and more, and on a GPU initialises CUDA and cuDNN:
    # paid once, by a small check first, and shown on its own line
    t0 = time.perf_counter()
    few = {k: (v[0][:100], v[1][:100]) for k, v in data.items()}
    small = argparse.Namespace(**{**vars(args), "references": 4, "models_per_task": None})
    run_check("vectorised", target, few, dataclasses.replace(recipe, epochs=1), small)
    t_warm = time.perf_counter() - t0
    engines = ["vectorised", "sequential"] if args.engine == "both" else [args.engine]
    runs = []
    for engine in engines:
        runs.append(run_check(engine, target, data, recipe, args))
        r = runs[-1]
        print(f"  {engine}: check {r['check']:.1f} s ({r['kernel']})", flush=True)

    rows = [
        ("imports (torch, privgate)", T_IMPORTS),
        ("data generation", t_data),
        ("target training", t_target),
        ("first check's one-time costs (small check)", t_warm),
    ]
    keys = list(runs[0]["times"])
    head = "".join(f"{r['engine']:>14}" for r in runs)
    print(f"\n[{args.device}] time breakdown, seconds{'':20}{head}")
    for name, t in rows:
        print(f"  {name:<44}" + "".join(f"{t:14.2f}" for _ in runs))
    for key in keys:
        print(f"  {key:<44}" + "".join(f"{r['times'][key]:14.2f}" for r in runs))
    ends = [T_IMPORTS + t_data + t_target + t_warm + r["check"] for r in runs]
    print(f"  {'end to end':<44}" + "".join(f"{e:14.2f}" for e in ends))
    for r in runs:
        lira, tpr = r["lira"], r["tpr"]
        known = tpr is not None and tpr.tpr is not None
        tpr_s = f"{tpr.tpr:.3f} [{tpr.ci[0]:.3f}, {tpr.ci[1]:.3f}]" if known else "n/a"
        auc_s = f"{lira.auc:.3f}" if lira.auc is not None else "n/a"
        print(f"  {r['engine']}: LiRA AUC {auc_s}, TPR at 1% FPR {tpr_s} ({lira.n_members}+{lira.n_nonmembers} rows)")
        passes = ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in r["passes"].items()) or "not counted"
        print(
            f"  {r['engine']}: forward passes per reference model and view ({r['views']} view(s), LiRA then RMIA): "
            f"{passes}" + (" (scored once)" if r["passes"] and max(r["passes"].values()) == 1 else "")
        )
    if len(runs) == 2:
        train_ratio = runs[1]["times"]["reference training"] / max(runs[0]["times"]["reference training"], 1e-9)
        end_ratio = ends[1] / ends[0]
        print(
            f"\n[{args.device}] sequential / vectorised: reference training {train_ratio:.2f}x, end to end "
            f"{end_ratio:.2f}x"
        )
    if args.json:
        summary = [
            {
                "device": where, "rows": args.rows, "references": args.references, "engine": r["engine"],
                "kernel": r["kernel"], "views": r["views"], "passes": r["passes"], "check_s": r["check"],
                "end_to_end_s": e, **{k.replace(" ", "_") + "_s": v for k, v in r["times"].items()},
                "lira_auc": r["lira"].auc, "lira_tpr_1pct": r["tpr"].tpr if r["tpr"] is not None else None,
            }
            for r, e in zip(runs, ends)
        ]  # fmt: skip
        Path(args.json).write_text(json.dumps(summary, indent=1))
    vec = next((e for r, e in zip(runs, ends) if r["engine"] == "vectorised"), None)
    if args.device == "cuda":
        ok_time = vec is not None and vec <= GOAL_SECONDS
        line = f"goal [cuda, {where}]: LiRA-{args.references} on {args.rows} rows end to end "
        line += f"{vec:.1f} s (<= {GOAL_SECONDS:g} s: {'met' if ok_time else 'MISSED'})" if vec else "not run"
        if len(runs) == 2:
            met = "met" if end_ratio >= GOAL_RATIO else "MISSED"
            line += f", {end_ratio:.2f}x sequential (>= {GOAL_RATIO:g}x: {met})"
        full = args.rows >= 50_000 and args.references >= 64
        print(line + ("" if full else " — a smaller run than the goal's 50,000 rows and LiRA-64"))
    else:
        print(
            f"goal [cuda]: not measured (this run is on the CPU); the GPU goal is LiRA-64 on 50,000 rows <= "
            f"{GOAL_SECONDS:g} s end to end and >= {GOAL_RATIO:g}x sequential: run with --device cuda on a GPU"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
