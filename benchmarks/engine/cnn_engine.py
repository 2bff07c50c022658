"""Speed of the reference-model engine on ordinary CNNs: K models vectorised vs one after another, and GFLOP/s.

    python benchmarks/engine/cnn_engine.py                       # the issue's network, K = 16, 1 thread, 2 rounds
    python benchmarks/engine/cnn_engine.py --repeat 3            # more rounds (sequential and vectorised alternate)
    python benchmarks/engine/cnn_engine.py --profile             # also torch.profiler's top operators, one epoch each
    python benchmarks/engine/cnn_engine.py --network digits --threads 2   # examples/digits_cnn's recipe (40 epochs)
    python benchmarks/engine/cnn_engine.py --real-training       # the same network trained as teams train (issue 35)

**The issue's network** (issue 24, item 5): 12×12 single-channel images —
scikit-learn's 1,797 digits, bilinearly upsampled from 8×8 — through
conv 3×3 (16 channels) + BatchNorm + ReLU → conv 3×3 (32) + BatchNorm + ReLU →
2×2 max-pooling → dense 64 + ReLU → 10 classes; Adam, lr 1e-3, batch 64,
:data:`ISSUE_EPOCHS` epochs. **The digits network** is ``examples/digits_cnn``'s
recipe on 1×8×8 digits. K models are trained on the reference-model plan of
:mod:`privgate.attacks.reference` (complementary halves of the images, the
same seeds), in this one process, with no cache:

* sequential: ``train_model(recipe, x[mask_k], y[mask_k], seed_k)`` for k = 1..K — the
  loop a user would write, and ``--engine sequential``;
* vectorised: :func:`privgate.training.engine.train_models` as an audit runs it
  (``kernel="auto"``: the grouped kernel of :mod:`privgate.training.grouped` for
  these ``nn.Sequential`` CNNs); ``--vmap`` adds the general vmap kernel.

Sequential and vectorised runs alternate ``--repeat`` times after a one-epoch
warm-up; each run's wall and CPU time (``time.process_time``: this process's
own cycles, which other processes on a shared machine disturb less) and the
load average are printed, and the **goal** line gives the median ratio.

**GFLOP/s.** The multiply-adds of the convolutions and linear layers are
counted analytically (2 FLOPs each): forward, plus the same again for the
weight gradient and again for the input gradient (none for the first layer,
whose input is data) — about 3× the forward. BatchNorm, activations, pooling
and the optimiser are not counted. Next to it, the machine's single-thread
GEMM peak, measured in the same run (best of several 2048×2048 float32
``torch.mm``, at the start and at the end), so the distance to the limit shows.

What the grouped kernel spent its time on, before issue 24 (torch.profiler, one
epoch of the issue's network, K = 16, 1 thread): the convolutions ran at GEMM
speed, but every per-channel layer on the ``[64, 16·32, 12, 12]`` activations
(19 MB) ran from memory, 2-5× slower per value than the sequential loop's
cache-resident ``[64, 32, 12, 12]``; two copies of that activation per step came
from the flatten's backward handing back an NCHW gradient to channels-last
layers, and ReLU ran on the full activation before the pooling. The kernel now
keeps the gradient channels-last, applies the ReLU after the max-pooling (the
same numbers, a quarter of the work), runs the models 2 at a time where
their activations would outgrow the cache
(:func:`privgate.training.grouped.models_per_call`), and runs each call's
backward pass right after its forward pass, while that call's activations are
still in the cache (one backward pass over the summed loss of all calls read
them back from memory; the gradients are the same, bit for bit). 2 models per
call round differently from 4 (oneDNN's convolutions of 2 and 4 groups), hence
``ENGINE_VERSION`` 7.

Goals (issue 24): ≥ 1.5× sequential at 1 thread on the issue's network; ≥ 10×
on a GPU (measured only where torch sees one).

``--real-training`` (issue 35) trains the same network as teams train image
models — AdamW (weight decay 5e-4), cosine learning rate after a 10 % linear
warm-up, label smoothing 0.1, gradient clipping at norm 1, random crops
(padding 1) and flips — in both engines, so the ratio shows what that fidelity
costs the vectorised engine (it applies every one of these itself).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples" / "digits_cnn"))
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

from privgate.recipe import Recipe  # noqa: E402
from privgate.training.engine import train_models  # noqa: E402
from privgate.training.plan import model_seeds, paired_masks  # noqa: E402

CPU_TARGET, GPU_TARGET = 1.5, 10.0
ISSUE_EPOCHS = 8


def issue_model() -> nn.Module:
    """Issue 24's CNN for ``[n, 1, 12, 12]`` images: two conv + BatchNorm + ReLU, max-pooling, dense 64, 10 logits."""
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1),
        nn.BatchNorm2d(16),
        nn.ReLU(),
        nn.Conv2d(16, 32, 3, padding=1),
        nn.BatchNorm2d(32),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(32 * 6 * 6, 64),
        nn.ReLU(),
        nn.Linear(64, 10),
    )


def issue_data() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's 1,797 digits as ``[n, 1, 12, 12]`` float32 in [0, 1] (bilinear upsampling of 8×8), labels."""
    from sklearn.datasets import load_digits

    d = load_digits()
    small = torch.as_tensor(d.images / 16.0, dtype=torch.float32).unsqueeze(1)
    x = F.interpolate(small, size=(12, 12), mode="bilinear", align_corners=False).numpy()
    return x, d.target.astype(np.int64)


def real_training(recipe: Recipe) -> Recipe:
    """``recipe`` with the settings of ``--real-training`` (module docstring)."""
    from privgate.recipe import Augment

    return dataclasses.replace(
        recipe, optimizer="adamw", weight_decay=5e-4, schedule="cosine", warmup_fraction=0.1, label_smoothing=0.1,
        clip_grad_norm=1.0, augment=Augment(crop_padding=1, flip=True), name=f"{recipe.name}+real-training",
    )  # fmt: skip


def setup(network: str, epochs: int | None) -> tuple[Recipe, np.ndarray, np.ndarray]:
    if network == "issue":
        recipe = Recipe(model_factory=issue_model, epochs=ISSUE_EPOCHS, batch_size=64, lr=1e-3, name="issue24-cnn")
        x, y = issue_data()
    else:
        import data as digits
        from recipe import RECIPE as recipe

        (xm, ym), (xn, yn) = digits.members(), digits.nonmembers()
        x, y = np.concatenate([xm, xn]), np.concatenate([ym, yn])
    return (recipe if epochs is None else dataclasses.replace(recipe, epochs=epochs)), x, y


def training_flops(recipe: Recipe, row_shape: tuple[int, ...], rows_trained: int) -> float:
    """Convolution and linear FLOPs of training: (forward + weight gradient + input gradient) per row, times rows."""
    net = recipe.build()
    per_row = 0.0
    first = True
    h = torch.zeros(1, *row_shape)
    with torch.no_grad():
        for m in net.eval():
            out = m(h)
            if isinstance(m, (nn.Conv1d, nn.Conv2d, nn.Linear)):
                macs = out.numel() * (m.weight[0].numel())  # each output: in_channels/groups × kernel multiply-adds
                per_row += 2 * macs * (2 if first else 3)
                first = False
            h = out
    return per_row * rows_trained


def gemm_peak(n: int = 2048, tries: int = 5) -> float:
    """This thread count's float32 GEMM speed (GFLOP/s): the best of ``tries`` ``n×n`` products."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b
    best = min(_timed(lambda: a @ b)[0] for _ in range(tries))
    return 2 * n**3 / best / 1e9


def _timed(fn):  # noqa: ANN001, ANN202
    t0, c0 = time.perf_counter(), time.process_time()
    out = fn()
    return time.perf_counter() - t0, time.process_time() - c0, out


def load() -> str:
    return " ".join(f"{v:.1f}" for v in os.getloadavg())


def compare(recipe, x, y, masks, seeds, threads: int, device: str, repeat: int, vmap: bool, profile: bool) -> None:  # noqa: ANN001
    """Train the K models both ways on ``device``, ``repeat`` times alternating; print times, GFLOP/s, the goal."""
    k = len(seeds)
    flops = training_flops(recipe, tuple(x.shape[1:]), int(masks.sum()) * recipe.epochs)
    warm = dataclasses.replace(recipe, epochs=1)
    train_models(warm, x, y, masks, seeds, threads=threads, device=device)
    train_models(warm, x, y, masks[:1], seeds[:1], vectorise=False, threads=threads, device=device)

    def run(vectorise: bool, kernel: str = "auto"):  # noqa: ANN202
        def go():  # noqa: ANN202
            out = train_models(recipe, x, y, masks, seeds, vectorise=vectorise, threads=threads, device=device,
                               kernel=kernel)  # fmt: skip
            if device == "cuda":
                torch.cuda.synchronize()
            return out

        return _timed(go)

    peak = gemm_peak() if device == "cpu" else float("nan")
    walls: dict[str, list[float]] = {"sequential": [], "vectorised": []}
    cpus: dict[str, list[float]] = {"sequential": [], "vectorised": []}
    ratios, cpu_ratios = [], []
    seq = vec = None
    for r in range(repeat):
        before = load()
        w_seq, c_seq, seq = run(False)
        w_vec, c_vec, vec = run(True)
        walls["sequential"].append(w_seq)
        walls["vectorised"].append(w_vec)
        cpus["sequential"].append(c_seq)
        cpus["vectorised"].append(c_vec)
        ratios.append(w_seq / w_vec)
        cpu_ratios.append(c_seq / c_vec)
        print(
            f"[{device}] round {r + 1}: sequential {w_seq:6.2f} s (CPU {c_seq:6.2f} s), vectorised "
            f"{w_vec:6.2f} s (CPU {c_vec:6.2f} s): {w_seq / w_vec:.2f}x wall, {c_seq / c_vec:.2f}x CPU "
            f"(load average {before} before, {load()} after)",
            flush=True,
        )
    if device == "cpu":
        peak = max(peak, gemm_peak())
    assert seq is not None and vec is not None
    for name, kernel in (("sequential", seq.kernel), ("vectorised", f"{vec.mode}/{vec.kernel}")):
        w, c = min(walls[name]), min(cpus[name])
        print(
            f"[{device}] {name:<10} ({kernel}): best {w:6.2f} s = {w / k * 1000:5.0f} ms per model; "
            f"{flops / w / 1e9:5.1f} GFLOP/s of wall time, {flops / c / 1e9:5.1f} GFLOP/s of CPU time"
            + (f" ({flops / c / 1e9 / peak:.0%} of the GEMM peak)" if device == "cpu" else ""),
            flush=True,
        )
    if device == "cpu":
        print(
            f"[cpu] single-thread float32 GEMM peak measured in this run: {peak:.1f} GFLOP/s at {threads} thread(s) "
            f"(training counts {flops / 1e9:.0f} GFLOP of convolutions and linear layers: forward + both gradients)"
        )
    if vmap:
        w, c, _ = run(True, "vmap")
        ratio = walls["sequential"][-1] / w
        print(f"[{device}] for comparison, the vmap kernel: {w:6.2f} s (CPU {c:6.2f} s), {ratio:.2f}x sequential")
    target = GPU_TARGET if device == "cuda" else CPU_TARGET
    ratio, cpu_ratio = statistics.median(ratios), statistics.median(cpu_ratios)
    judged = min(ratio, cpu_ratio)  # under load wall times swing either way; CPU time is this process's own work
    print(
        f"goal [{device}]: vectorised >= {target:g}x sequential at {threads} thread(s): {judged:.2f}x (the lower of "
        f"the medians over {len(ratios)} rounds: {ratio:.2f}x wall time, {cpu_ratio:.2f}x CPU time) — "
        f"{'met' if judged >= target else 'MISSED'} (load average {load()})",
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
        f"[{device}] vectorised vs sequential: largest parameter/statistic difference {drift:.2e} after "
        f"{recipe.epochs} epochs (float rounding, amplified by Adam), predicted labels agree on >= {agree:.4f} of "
        f"the {len(x)} rows for every model",
        flush=True,
    )
    if profile:
        from torch.profiler import profile as torch_profile

        for name, vectorise in (("vectorised", True), ("sequential", False)):
            with torch_profile(record_shapes=True) as prof:
                train_models(warm, x, y, masks, seeds, vectorise=vectorise, threads=threads, device=device)
            print(f"[{device}] torch.profiler, one epoch, {name}:")
            print(prof.key_averages(group_by_input_shape=True).table(sort_by="self_cpu_time_total", row_limit=15,
                                                                     max_name_column_width=34))  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--network", choices=("issue", "digits"), default="issue")
    ap.add_argument("--models", "-k", type=int, default=16)
    ap.add_argument("--threads", type=int, default=1, help="torch threads for both paths (default 1)")
    ap.add_argument("--epochs", type=int, default=None, help="override the recipe's epochs")
    ap.add_argument("--repeat", type=int, default=2, help="rounds of sequential + vectorised (default 2)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--vmap", action="store_true", help="also time the general vmap kernel")
    ap.add_argument("--profile", action="store_true", help="print torch.profiler's top operators for one epoch")
    ap.add_argument("--no-gpu", action="store_true", help="skip the GPU comparison even when a GPU is there")
    ap.add_argument("--real-training", action="store_true", help="schedule, AdamW, smoothing, clipping, crops+flips")
    args = ap.parse_args()

    recipe, x, y = setup(args.network, args.epochs)
    if args.real_training:
        recipe = real_training(recipe)
    masks, seeds = paired_masks(len(x), args.models, args.seed), model_seeds(args.seed, args.models)
    torch.set_num_threads(args.threads)
    print(
        f"{args.network} CNN '{recipe.name}' ({sum(p.numel() for p in recipe.build().parameters())} parameters, "
        f"images {tuple(x.shape[1:])}): {recipe.epochs} epochs, batch {recipe.batch_size}, {recipe.optimizer}"
        f"{' + ' + ', '.join(recipe.settings_in_use()) if recipe.settings_in_use() else ''}; "
        f"K = {args.models} models on {masks.sum(axis=1).min()}-{masks.sum(axis=1).max()} images each; torch "
        f"{torch.__version__}, {args.threads} thread(s), {os.cpu_count()} CPU(s) visible, load average {load()}",
        flush=True,
    )
    compare(recipe, x, y, masks, seeds, args.threads, "cpu", args.repeat, args.vmap, args.profile)
    if args.no_gpu:
        print("[cuda] skipped (--no-gpu)")
    elif torch.cuda.is_available():
        print(f"[cuda] {torch.cuda.get_device_name(0)}", flush=True)
        compare(recipe, x, y, masks, seeds, args.threads, "cuda", args.repeat, False, False)
    else:
        print(
            f"[cuda] not available on this machine (torch.cuda.is_available() is False): the GPU speed-up "
            f"(goal >= {GPU_TARGET:g}x) was not measured"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
