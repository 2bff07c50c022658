"""Speed of the reference-model engine on a CNN with BatchNorm: K models vectorised vs one after another.

    python benchmarks/cnn_engine.py                 # K = 16, the example's recipe (40 epochs), 2 threads
    python benchmarks/cnn_engine.py --epochs 5      # a quick look
    python benchmarks/cnn_engine.py --threads 1     # one core

The model is ``examples/digits_cnn``'s: two 3×3 convolutions with BatchNorm
(running statistics), ReLU and average pooling, then a linear layer, on
scikit-learn's digits as 1×8×8 images. Both paths train the same K models
(the reference-model plan of :mod:`privgate.attacks.reference`: complementary
halves of the 1,497 audit rows, the same seeds), in this one process, with no cache:

* sequential: ``recipe.train(x[mask_k], y[mask_k], seed_k)`` for k = 1..K, the
  loop a user would write and the engine's fallback (``--engine sequential``);
* vectorised: :func:`privgate.training.engine.train_models` as an audit runs it
  (``kernel="auto"``), which picks the grouped kernel for this ``nn.Sequential``
  (:mod:`privgate.training.grouped`: the K CNNs as one network with K-times
  more channels, grouped convolutions, BatchNorm over K·C channels);
* for comparison, the general vmap kernel (``kernel="vmap"``:
  ``torch.func.functional_call`` over the K models' stacked parameters and
  BatchNorm buffers, :mod:`privgate.training.stacked`), what a model with a
  custom ``forward`` gets.

A one-epoch warm-up of each path runs first. The script prints both times, the
ratio (one run, measured in this process: no timed assertion anywhere), the
time per model, and how far the vectorised models are from the sequential ones
(largest difference of any parameter or running statistic, agreement of
predicted labels). On a machine where torch sees a CUDA GPU it repeats the
comparison there; elsewhere it says that the GPU figure was not measured.

Targets (issue 15): ≥ 3× on 2 CPU cores; ≥ 10× on a GPU.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples" / "digits_cnn"))
sys.path.insert(0, str(ROOT))

import data as digits  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from recipe import RECIPE  # noqa: E402

from privgate.training.engine import train_models  # noqa: E402
from privgate.training.plan import model_seeds, paired_masks  # noqa: E402

CPU_TARGET, GPU_TARGET = 3.0, 10.0


def compare(recipe, x, y, masks, seeds, threads: int, device: str) -> float:  # noqa: ANN001
    """Train the K models both ways on ``device``; print the figures; return the ratio."""
    k = len(seeds)
    warm = dataclasses.replace(recipe, epochs=1)
    train_models(warm, x, y, masks[:2], seeds[:2], threads=threads, device=device)
    train_models(warm, x, y, masks[:2], seeds[:2], threads=threads, device=device, kernel="vmap")
    train_models(warm, x, y, masks[:1], seeds[:1], vectorise=False, threads=threads, device=device)

    def timed(vectorise: bool | str):  # noqa: ANN202 - a string: that vectorised kernel
        if device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        kernel = vectorise if isinstance(vectorise, str) else "auto"
        out = train_models(
            recipe, x, y, masks, seeds, vectorise=bool(vectorise), threads=threads, device=device, kernel=kernel
        )
        if device == "cuda":
            torch.cuda.synchronize()
        return out, time.perf_counter() - t0

    seq, t_seq = timed(False)
    vec, t_vec = timed(True)
    ratio = t_seq / t_vec
    general, t_general = timed("vmap") if vec.kernel != "vmap" else (vec, t_vec)
    print(
        f"[{device}] sequential (recipe.train per model): {t_seq:7.2f} s = {t_seq / k * 1000:6.0f} ms per model",
        flush=True,
    )
    print(
        f"[{device}] vectorised ({vec.mode}/{vec.kernel}{'; ' + '; '.join(vec.notes) if vec.notes else ''}): "
        f"{t_vec:7.2f} s = {t_vec / k * 1000:6.0f} ms per model",
        flush=True,
    )
    if general is not vec:
        print(
            f"[{device}] for comparison, the general vmap kernel ({general.mode}/{general.kernel}): {t_general:7.2f} s "
            f"= {t_general / k * 1000:6.0f} ms per model, {t_seq / t_general:.2f}x",
            flush=True,
        )
    target = GPU_TARGET if device == "cuda" else CPU_TARGET
    print(
        f"[{device}] speed-up vectorised / sequential: {ratio:.2f}x "
        f"(target ≥ {target:g}x: {'met' if ratio >= target else 'NOT met'} in this run)",
        flush=True,
    )
    net = recipe.build()
    xt = torch.as_tensor(x)

    def labels(state: dict) -> torch.Tensor:
        net.load_state_dict(state)
        with torch.no_grad():
            return net.eval()(xt).argmax(1)

    agree = min(float((labels(a) == labels(b)).float().mean()) for a, b in zip(seq.states, vec.states))
    drift = max(float((a[n].double() - b[n].double()).abs().max()) for a, b in zip(seq.states, vec.states) for n in a)
    print(
        f"[{device}] vectorised vs sequential: largest parameter/statistic difference {drift:.2e}, "
        f"predicted labels agree on ≥ {agree:.4f} of the {len(x)} rows for every model",
        flush=True,
    )
    return ratio


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", "-k", type=int, default=16)
    ap.add_argument("--threads", type=int, default=2, help="torch threads for both paths (default 2: the 2 cores)")
    ap.add_argument("--epochs", type=int, default=None, help="override the recipe's epochs (default: its own)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-gpu", action="store_true", help="skip the GPU comparison even when a GPU is there")
    args = ap.parse_args()

    recipe = RECIPE if args.epochs is None else dataclasses.replace(RECIPE, epochs=args.epochs)
    xm, ym = digits.members()
    xn, yn = digits.nonmembers()
    x, y = np.concatenate([xm, xn]), np.concatenate([ym, yn])
    masks, seeds = paired_masks(len(x), args.models, args.seed), model_seeds(args.seed, args.models)
    torch.set_num_threads(args.threads)
    print(
        f"digits CNN recipe '{recipe.name}' (conv + BatchNorm, {sum(p.numel() for p in recipe.build().parameters())} "
        f"parameters): {recipe.epochs} epochs, batch {recipe.batch_size}, {recipe.optimizer}; K = {args.models} "
        f"models on {masks.sum(axis=1).min()}-{masks.sum(axis=1).max()} images each; torch {torch.__version__}, "
        f"{args.threads} thread(s), {os.cpu_count()} CPU(s) visible, load average "
        f"{' '.join(f'{v:.1f}' for v in os.getloadavg())}",
        flush=True,
    )
    compare(recipe, x, y, masks, seeds, args.threads, "cpu")
    if args.no_gpu:
        print("[cuda] skipped (--no-gpu)")
    elif torch.cuda.is_available():
        print(f"[cuda] {torch.cuda.get_device_name(0)}", flush=True)
        compare(recipe, x, y, masks, seeds, args.threads, "cuda")
    else:
        print(
            f"[cuda] not available on this machine (torch.cuda.is_available() is False): the GPU speed-up "
            f"(target ≥ {GPU_TARGET:g}x) and the GPU time per model were not measured"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
