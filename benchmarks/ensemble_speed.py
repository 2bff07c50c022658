"""Speed of the reference-model engine: K models of the digits recipe, vectorised vs one after another.

    python benchmarks/ensemble_speed.py                 # K = 16, the full recipe, 2 threads
    python benchmarks/ensemble_speed.py --threads 1     # single core
    python benchmarks/ensemble_speed.py --epochs 10     # a quick look (fewer epochs)

Both runs happen in this one process, with the same thread count, on the same
masks and seeds (the reference-model plan of :mod:`privgate.attacks.reference`:
complementary halves of the 1,497 audit rows), with no cache:

* sequential: ``recipe.train(x[mask_k], y[mask_k], seed_k)`` for k = 1..K;
* vectorised: :func:`privgate.ensemble.train_models` (``torch.func`` + ``vmap``).

A one-epoch warm-up of each path runs first (import and first-call costs are
paid once per process, not per model). The two results are checked to agree,
then the script prints both times and their ratio.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples" / "digits"))
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import torch  # noqa: E402

import data as digits  # noqa: E402
from recipe import RECIPE  # noqa: E402

from privgate.ensemble import model_seeds, paired_masks, train_models  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", "-k", type=int, default=16)
    ap.add_argument("--threads", type=int, default=2, help="torch threads for both runs (default 2: the 2 cores of the target machine)")
    ap.add_argument("--epochs", type=int, default=None, help="override the recipe's epochs (default: the recipe's own)")
    ap.add_argument("--rounds", type=int, default=1, help="interleaved repetitions (default 1)")
    ap.add_argument("--seed", type=int, default=0)
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
    train_models(warm, x, y, masks[:2], seeds[:2], vectorise=True, threads=args.threads)
    train_models(warm, x, y, masks[:1], seeds[:1], vectorise=False, threads=args.threads)

    t_seq, t_vec = [], []
    for r in range(args.rounds):  # interleaved, so a noisy neighbour slows both paths alike
        t0 = time.perf_counter()
        seq, _, _ = train_models(recipe, x, y, masks, seeds, vectorise=False, threads=args.threads)
        t_seq.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        vec, mode, notes = train_models(recipe, x, y, masks, seeds, vectorise=True, threads=args.threads)
        t_vec.append(time.perf_counter() - t0)
        print(
            f"round {r + 1}: sequential (recipe.train, one after another) {t_seq[-1]:7.2f} s | "
            f"vectorised (torch.func + vmap, all at once) {t_vec[-1]:7.2f} s [{mode}] | ratio {t_seq[-1] / t_vec[-1]:.2f}x"
            + (f" — {'; '.join(notes)}" if notes else ""),
            flush=True,
        )
    xt = torch.as_tensor(x)
    net = recipe.build()
    agree = []
    with torch.no_grad():
        for a, b in zip(seq, vec):
            net.load_state_dict(a)
            pa = net(xt).argmax(1)
            net.load_state_dict(b)
            pb = net(xt).argmax(1)
            agree.append(float((pa == pb).float().mean()))
    drift = max(float((a[n] - b[n]).abs().max()) for a, b in zip(seq, vec) for n in a)
    print(f"agreement of predicted labels, vectorised vs sequential: min {min(agree):.4f}; largest parameter difference {drift:.2e}")
    ratios = sorted(a / b for a, b in zip(t_seq, t_vec))
    print(
        f"best times: sequential {min(t_seq):.2f} s ({min(t_seq) / args.models:.2f} s per model), vectorised {min(t_vec):.2f} s; "
        f"ratio of best times {min(t_seq) / min(t_vec):.2f}x, median per-round ratio {float(np.median(ratios)):.2f}x "
        f"(K = {args.models}, {torch.get_num_threads()} thread(s), load average {os.getloadavg()[0]:.1f} at the end)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
