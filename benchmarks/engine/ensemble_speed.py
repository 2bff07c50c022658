"""Speed of the reference-model engine: K models of the digits recipe, vectorised vs one after another.

Also, at the end, K reference models of a DP-SGD target (see ``dp_reference_models``).

    python benchmarks/engine/ensemble_speed.py                 # K = 16, the full recipe, 2 threads
    python benchmarks/engine/ensemble_speed.py --threads 1     # single core
    python benchmarks/engine/ensemble_speed.py --epochs 10     # a quick look (fewer epochs)

All runs happen in this one process, with the same thread count, on the same
masks and seeds (the reference-model plan of :mod:`privgate.attacks.reference`:
complementary halves of the 1,497 audit rows), with no cache:

* sequential: ``train_model(recipe, x[mask_k], y[mask_k], seed_k)`` for k = 1..K —
  the loop a user would write, and the engine's fallback;
* vectorised, vmap kernel: :func:`privgate.training.engine.train_models` with
  ``kernel="vmap"`` (``torch.func`` + ``vmap``, any model without buffers);
* vectorised, MLP kernel: ``kernel="auto"``, what an audit uses — the
  closed-form kernel of :mod:`privgate.training.mlp` for this Linear/Tanh stack.

A one-epoch warm-up of each path runs first (import and first-call costs are
paid once per process, not per model). Rounds interleave the three paths so a
noisy neighbour slows them alike. The vectorised models are checked against
the sequential ones (predicted labels, largest parameter difference), then the
script prints the times and the ratios to the sequential loop.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples" / "digits"))
sys.path.insert(0, str(ROOT))

import data as digits  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from recipe import RECIPE  # noqa: E402

from privgate.training.engine import train_models  # noqa: E402
from privgate.training.plan import model_seeds, paired_masks  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", "-k", type=int, default=16)
    ap.add_argument(
        "--threads",
        type=int,
        default=2,
        help="torch threads for both runs (default 2: the 2 cores of the target machine)",
    )
    ap.add_argument("--epochs", type=int, default=None, help="override the recipe's epochs (default: the recipe's own)")
    ap.add_argument("--rounds", type=int, default=1, help="interleaved repetitions (default 1)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--no-one-thread", action="store_true", help="skip the extra 1-thread sequential run made when --threads > 1"
    )
    ap.add_argument("--no-dp", action="store_true", help="skip the DP-SGD reference-model comparison")
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    recipe = RECIPE if args.epochs is None else dataclasses.replace(RECIPE, epochs=args.epochs)
    xm, ym = digits.members()
    xn, yn = digits.nonmembers()
    x, y = np.concatenate([xm, xn]), np.concatenate([ym, yn])
    masks, seeds = paired_masks(len(x), args.models, args.seed), model_seeds(args.seed, args.models)
    print(
        f"digits recipe '{recipe.name}': {recipe.epochs} epochs, batch {recipe.batch_size}, {recipe.optimizer}; "
        f"K = {args.models} models on {masks.sum(axis=1).min()}-{masks.sum(axis=1).max()} rows each; "
        f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), {os.cpu_count()} CPU(s) visible",
        flush=True,
    )

    warm = dataclasses.replace(recipe, epochs=1)
    kernels = {"vmap": "vectorised, vmap kernel", "auto": "vectorised, MLP kernel"}
    for kern in kernels:
        train_models(warm, x, y, masks[:2], seeds[:2], vectorise=True, threads=args.threads, kernel=kern)
    train_models(warm, x, y, masks[:1], seeds[:1], vectorise=False, threads=args.threads)

    one_thread = args.threads > 1 and not args.no_one_thread
    times: dict[str, list[float]] = {"sequential": [], "sequential-1": [], **{k: [] for k in kernels}}
    states: dict[str, list] = {}
    for r in range(args.rounds):
        t0 = time.perf_counter()
        states["sequential"] = train_models(recipe, x, y, masks, seeds, vectorise=False, threads=args.threads).states
        times["sequential"].append(time.perf_counter() - t0)
        line = [f"round {r + 1}: sequential (train_model, one after another) {times['sequential'][-1]:6.2f} s"]
        if one_thread:  # the sequential loop's small products may gain nothing from a second thread
            t0 = time.perf_counter()
            train_models(recipe, x, y, masks, seeds, vectorise=False, threads=1)
            times["sequential-1"].append(time.perf_counter() - t0)
            line.append(f"sequential on 1 thread {times['sequential-1'][-1]:6.2f} s")
        for kern, label in kernels.items():
            t0 = time.perf_counter()
            out = train_models(recipe, x, y, masks, seeds, vectorise=True, threads=args.threads, kernel=kern)
            times[kern].append(time.perf_counter() - t0)
            states[kern] = out.states
            used = f"{out.mode}/{out.kernel}" + (f" — {'; '.join(out.notes)}" if out.notes else "")
            line.append(f"{label} {times[kern][-1]:6.2f} s [{used}], {times['sequential'][-1] / times[kern][-1]:.2f}x")
        print(" | ".join(line), flush=True)

    xt = torch.as_tensor(x)
    net = recipe.build()

    def labels(state: dict) -> torch.Tensor:
        net.load_state_dict(state)
        with torch.no_grad():
            return net(xt).argmax(1)

    seq_labels = [labels(a) for a in states["sequential"]]
    for kern, label in kernels.items():
        agree = min(float((labels(b) == pa).float().mean()) for pa, b in zip(seq_labels, states[kern]))
        drift = max(float((a[n] - b[n]).abs().max()) for a, b in zip(states["sequential"], states[kern]) for n in a)
        print(
            f"{label} vs sequential: agreement of predicted labels min {agree:.4f}; largest parameter "
            f"difference {drift:.2e}"
        )
    best = {k: min(v) for k, v in times.items() if v}
    print(
        f"best times: sequential {best['sequential']:.2f} s ({best['sequential'] / args.models:.2f} s per model), "
        + ", ".join(f"{label} {best[k]:.2f} s" for k, label in kernels.items())
    )
    for kern, label in kernels.items():
        ratios = sorted(a / b for a, b in zip(times["sequential"], times[kern]))
        print(
            f"RATIO {label}: {best['sequential'] / best[kern]:.2f}x (ratio of best times), median per-round ratio "
            f"{float(np.median(ratios)):.2f}x over {args.rounds} round(s)"
        )
    if one_thread:
        fastest = min(min(times["sequential"]), min(times["sequential-1"]))
        print(
            f"against the faster sequential configuration ({fastest:.2f} s; 1 thread "
            f"{min(times['sequential-1']):.2f} s, "
            f"{args.threads} threads {min(times['sequential']):.2f} s): "
            + ", ".join(f"{label} {fastest / best[k]:.2f}x" for k, label in kernels.items())
        )
    print(f"(K = {args.models}, {args.threads} thread(s), load average {os.getloadavg()[0]:.1f} at the end)")
    if not args.no_dp:
        dp_reference_models(x, y, masks, seeds, args.threads)
    return 0


def dp_reference_models(x: np.ndarray, y: np.ndarray, masks: np.ndarray, seeds: list[int], threads: int) -> None:
    """Reference models of a DP-SGD target (what ``privgate harden`` trains for every candidate ε).

    The recipe is the remediation demo's (``examples/digits/strict-remediate.yaml``:
    30 epochs at expected batch 256, so q = 1/3) at σ = 1, C = 1. Sequential:
    ``DPRecipe.train`` (Opacus, ghost clipping, Poisson sampling) per model;
    vectorised: the MLP kernel running the same mechanism. The models are not
    equal (different random draws), so their held-out accuracies are compared.
    """
    from privgate.dp.recipe import DPRecipe

    base = {f.name: getattr(RECIPE, f.name) for f in dataclasses.fields(RECIPE)}
    dp = DPRecipe(
        **{**base, "epochs": 30, "batch_size": 256, "name": "digits-dp"},
        noise_multiplier=1.0,
        max_grad_norm=1.0,
        steps_per_epoch=3,
    )
    t0 = time.perf_counter()
    seq = train_models(dp, x, y, masks, seeds, vectorise=False, threads=threads)
    t_seq = time.perf_counter() - t0
    t0 = time.perf_counter()
    vec = train_models(dp, x, y, masks, seeds, vectorise=True, threads=threads)
    t_vec = time.perf_counter() - t0
    net = dp.build()
    xt = torch.as_tensor(x)

    def held_out(states: list) -> float:
        accs = []
        for state, m in zip(states, masks):
            net.load_state_dict(state)
            with torch.no_grad():
                accs.append(float((net(xt[~m]).argmax(1).numpy() == y[~m]).mean()))
        return float(np.mean(accs))

    print(
        f"DP-SGD reference models (σ = 1, C = 1, 30 epochs, q = 1/3; K = {len(seeds)}): sequential "
        f"(DPRecipe.train, Opacus) "
        f"{t_seq:.2f} s, vectorised [{vec.mode}/{vec.kernel}] {t_vec:.2f} s, RATIO {t_seq / t_vec:.2f}x; mean "
        f"held-out accuracy "
        f"{held_out(seq.states):.3f} (Opacus) vs {held_out(vec.states):.3f} (kernel)"
    )


if __name__ == "__main__":
    sys.exit(main())
