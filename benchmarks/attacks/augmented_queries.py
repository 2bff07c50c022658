"""Reference models trained like an augmented target, and augmented queries: LiRA and RMIA against image targets.

    python benchmarks/attacks/augmented_queries.py --small                # CPU, a few minutes on 2 cores
    python benchmarks/attacks/augmented_queries.py                        # the same where torch sees no GPU
    python benchmarks/attacks/augmented_queries.py --device cuda          # more rows, wider networks, on a GPU
    python benchmarks/attacks/augmented_queries.py --tasks digits         # one task (digits, shapes, user-loop)
    python benchmarks/attacks/augmented_queries.py --views --tasks shapes # 1, 2, 18 views of the same models (issue 43)

Issue 35, items 2 and 3. **Tasks** (no download):

* ``digits``: scikit-learn's 1,797 handwritten digits, upsampled to 16×16
  (bilinear), 10 % of the members' labels replaced by another class (what a
  network can only memorise); members, non-members and population in the
  proportions 45 / 45 / 10 %;
* ``shapes``: colour images (3×S×S, S = 16, 32 with ``--device cuda``) drawn
  from ``--seed``: each class a mixture of smooth random prototypes, each
  image a prototype at a random shift plus pixel noise (as
  ``benchmarks/engine/cifar_engine.py``'s CIFAR-shaped data, smaller), 10 % of the
  members' labels replaced; 1,600 audit rows (8,000 on a GPU), half members,
  and as many population rows again;
* ``user-loop``: the digits target trained by a **user's own loop**
  (:func:`ema_train`: SGD with momentum, random crops of each batch, a cosine schedule and
  an exponential moving average of the weights, which no recipe setting
  describes), given to privgate as ``Recipe(train_fn=ema_train, augment=...)``.

**Targets**: a small CNN (two conv 3×3 → BatchNorm → ReLU blocks, max-pooling,
a linear layer), trained on the members with SGD (momentum 0.9, weight decay
5e-4), a cosine learning-rate schedule and random crops (padding 2) and flips.

**What is compared**, each with LiRA (online, 16 reference models) and RMIA
(16 models, privgate's defaults), all reading the same audit rows as the gate
splits them:

* (a) reference models of **today's plain recipe**: the same network,
  optimiser, learning rate, epochs and batch size, no schedule, no
  augmentation (what a recipe said before issue 35; for the user loop, the
  plain recipe closest to it);
* (b) reference models **trained like the target** (the recipe with its
  schedule and augmentation; for the user loop, the user's function itself),
  queried once per row (``augmented_queries: false``);
* (c) the same models with **augmented queries** (18 views of each row,
  :mod:`privgate.attacks.views`; ``--views``: 1, 2 and 18 views of the same
  models instead of (a), (b), (c) and Privacy Meter, with the seconds each takes);
* **Privacy Meter's RMIA-16** (:mod:`_common.privacy_meter_rmia`, the house's
  re-implementation of its offline RMIA: temperature 1, its ``a`` tuning) on
  reference models as its loader trains them — without augmentation: the (a)
  models — and no augmented queries.

Per row: TPR at 1 % and 0.1 % FPR measured as the gate measures it (threshold
on the calibration split, TPR on the evaluation split, 95 % interval;
"unresolvable" where a split has too few non-members for that FPR) and, for
the low end the splits cannot resolve, the TPR of the ROC curve over all audit
rows at that FPR (Carlini et al.'s reading, not calibrated; marked "roc"), and
the AUC. The goal line: (c) against Privacy Meter at 1 % FPR on the augmented
image targets (goal ≥ 2×), LiRA the attack named before measuring.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

from privgate import stats  # noqa: E402
from privgate.recipe import Augment, Recipe  # noqa: E402
from privgate.training.loop import train_model  # noqa: E402

GOAL = 2.0
LABEL_NOISE = 0.1
FPRS = (0.01, 0.001)
REFERENCES = 16


# --------------------------------------------------------------------------- data and networks


def digits_images(seed: int, size: int = 16) -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's digits as ``[n, 1, size, size]`` float32 images in [0, 1], and their labels."""
    from sklearn.datasets import load_digits

    d = load_digits()
    x = torch.as_tensor(d.images / 16.0, dtype=torch.float32)[:, None]
    if size != 8:
        x = F.interpolate(x, size=(size, size), mode="bilinear", align_corners=False)
    return x.numpy(), d.target.astype(np.int64)


def shapes_images(n: int, seed: int, size: int) -> tuple[np.ndarray, np.ndarray]:
    """``n`` colour images ``[n, 3, size, size]``: smooth class prototypes at random shifts plus noise, 10 classes."""
    rng = np.random.default_rng(seed)
    protos = torch.as_tensor(np.random.default_rng(1234).normal(0, 1, (40, 3, 4, 4)), dtype=torch.float32)
    big = size + size // 4
    protos = F.interpolate(protos, size=(big, big), mode="bilinear", align_corners=False).numpy()
    y = rng.integers(0, 10, n)
    which = y * 4 + rng.integers(0, 4, n)
    dy, dx = rng.integers(0, big - size + 1, n), rng.integers(0, big - size + 1, n)
    rows = (dy[:, None] + np.arange(size))[:, None, :, None]
    cols = (dx[:, None] + np.arange(size))[:, None, None, :]
    x = protos[which[:, None, None, None], np.arange(3)[None, :, None, None], rows, cols].astype(np.float32)
    x += rng.normal(0, 0.5, x.shape).astype(np.float32)
    return x, y.astype(np.int64)


def cnn(channels: int, size: int, width: int) -> nn.Module:
    """Two conv 3×3 → BatchNorm → ReLU blocks (w, 2w channels), 2×2 max-pooling after each, a linear layer."""
    w = width
    return nn.Sequential(
        nn.Conv2d(channels, w, 3, padding=1, bias=False),
        nn.BatchNorm2d(w),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(w, 2 * w, 3, padding=1, bias=False),
        nn.BatchNorm2d(2 * w),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(2 * w * (size // 4) ** 2, 10),
    )


@dataclasses.dataclass(frozen=True)
class Net:
    """A picklable model factory (the recipe's ``model_factory``)."""

    channels: int
    size: int
    width: int

    def __call__(self) -> nn.Module:
        return cnn(self.channels, self.size, self.width)


def target_recipe(net: Net, epochs: int) -> Recipe:
    """How the targets are trained: SGD, cosine schedule, random crops and flips."""
    return Recipe(
        model_factory=net,
        epochs=epochs,
        batch_size=64,
        lr=0.05,
        optimizer="sgd",
        momentum=0.9,
        weight_decay=5e-4,
        schedule="cosine",
        augment=Augment(crop_padding=2, flip=True),
        name=f"cnn-w{net.width}-cosine-augmented",
    )


def plain_recipe(recipe: Recipe) -> Recipe:
    """Today's plain recipe: the same network, optimiser, rate, epochs and batch; no schedule, no augmentation."""
    return dataclasses.replace(recipe, schedule="constant", augment=None, train_fn=None, name=f"{recipe.name}-plain")


# --------------------------------------------------------------------------- the user's own training loop

#: Settings of :func:`ema_train`, set by :func:`main` before any call (the reference models read the same ones).
USER_LOOP: dict[str, Any] = {"net": Net(1, 16, 16), "epochs": 30}


def ema_train(x: np.ndarray, y: np.ndarray, seed: int, device: str) -> nn.Module:
    """A team's own training loop: SGD + momentum, cosine rate, random crops, and an EMA of the weights returned.

    The exponential moving average (decay 0.98 per step) of the weights is what
    many image pipelines ship; no :class:`~privgate.recipe.Recipe` setting
    describes it, so only the function itself trains reference models like it.
    """
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    net = USER_LOOP["net"]().to(device)
    ema = copy.deepcopy(net).eval()
    opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)
    epochs, batch = int(USER_LOOP["epochs"]), 64
    steps = epochs * -(-len(x) // batch)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, steps)
    xt, yt = torch.as_tensor(x).to(device), torch.as_tensor(y).to(device)
    for _ in range(epochs):
        order = torch.randperm(len(xt), generator=gen)
        for i in range(0, len(xt), batch):
            idx = order[i : i + batch].to(device)
            dy, dx = torch.randint(0, 5, (2,), generator=gen).tolist()  # one random crop of the padded batch
            xb = F.pad(xt[idx], (2, 2, 2, 2))[:, :, dy : dy + xt.shape[2], dx : dx + xt.shape[3]]
            net.train()
            opt.zero_grad()
            F.cross_entropy(net(xb), yt[idx]).backward()
            opt.step()
            sched.step()
            with torch.no_grad():
                for pe, pn in zip(ema.state_dict().values(), net.state_dict().values()):
                    pe.copy_(pe * 0.98 + pn * 0.02 if pe.is_floating_point() else pn)
    return ema


# --------------------------------------------------------------------------- one task


@dataclasses.dataclass
class Task:
    name: str
    members: tuple[np.ndarray, np.ndarray]
    nonmembers: tuple[np.ndarray, np.ndarray]
    population: tuple[np.ndarray, np.ndarray]
    target_recipe: Recipe  # how the target is trained
    like: Recipe  # (b) and (c): reference models trained like the target
    plain: Recipe  # (a)


def split(x: np.ndarray, y: np.ndarray, seed: int, fractions: tuple[float, float]) -> list[tuple]:
    """Members (10 % of their labels replaced by another class), non-members, population."""
    rng = np.random.default_rng(seed)
    p = rng.permutation(len(x))
    a, b = int(fractions[0] * len(x)), int((fractions[0] + fractions[1]) * len(x))
    ym = y[p[:a]].copy()
    noisy = rng.random(a) < LABEL_NOISE
    ym[noisy] = (ym[noisy] + rng.integers(1, 10, int(noisy.sum()))) % 10
    return [(x[p[:a]], ym), (x[p[a:b]], y[p[a:b]]), (x[p[b:]], y[p[b:]])]


def make_task(name: str, args: argparse.Namespace) -> Task:
    if name in ("digits", "user-loop"):
        x, y = digits_images(args.seed)
        net = Net(1, 16, args.width)
        fractions = (0.45, 0.45)
    else:  # generated: as many population rows (Privacy Meter's z-samples) as audit rows, so its scores do not tie
        x, y = shapes_images(2 * args.shapes_rows, args.seed, args.shapes_size)
        net = Net(3, args.shapes_size, args.width)
        fractions = (0.225, 0.225)
    m, nm, pop = split(x, y, args.seed, fractions)
    recipe = target_recipe(net, args.epochs)
    if name == "user-loop":
        USER_LOOP.update(net=net, epochs=args.epochs)
        own = Recipe(train_fn=ema_train, augment=Augment(crop_padding=2), name="ema_train")
        return Task(name, m, nm, pop, own, own, plain_recipe(recipe))
    return Task(name, m, nm, pop, recipe, recipe, plain_recipe(recipe))


def roc_tpr(scores: np.ndarray, membership: np.ndarray, fpr: float) -> float:
    """TPR of the ROC curve over all rows at the largest threshold-FPR ≤ ``fpr`` (uncalibrated)."""
    from sklearn.metrics import roc_curve

    f, t, _ = roc_curve(membership, scores)
    return float(t[f <= fpr].max())


def run_task(task: Task, args: argparse.Namespace) -> dict[str, Any]:
    from _common.privacy_meter_rmia import privacy_meter_rmia

    from privgate.attacks import get_attack
    from privgate.attacks.base import AttackContext
    from privgate.attacks.reference import build_references
    from privgate.attacks.rmia import tempered_true_class
    from privgate.gate import audit_rows, final_scores
    from privgate.inputs.data import AuditData, Dataset
    from privgate.inputs.target import Target
    from privgate.options import RunOptions
    from privgate.threads import limit_threads

    device = args.device
    data = AuditData(Dataset(*task.members), Dataset(*task.nonmembers), Dataset(*task.population), seed=args.seed)
    rows = audit_rows(data, args.seed)
    t0 = time.perf_counter()
    with limit_threads(args.threads):
        model = train_model(task.target_recipe, *task.members, seed=args.seed + 7, device=device)
    target = Target(model.eval()).to_device(device)
    target.detect_outputs(rows.x[:256])
    acc = [float((target.predict(d[0]) == d[1]).mean()) for d in (task.members, task.nonmembers)]
    print(
        f"\n## {task.name}: {len(task.members[0])} members, {len(task.nonmembers[0])} non-members, "
        f"{len(task.population[0])} population, images {task.members[0].shape[1:]}; target trained in "
        f"{time.perf_counter() - t0:.0f} s, accuracy {acc[0]:.3f} on its members (noisy labels), {acc[1]:.3f} on "
        "non-members",
        flush=True,
    )
    run = RunOptions(seed=args.seed, cache_dir="off", threads=args.threads, device=device)
    shared: dict[str, dict] = {"plain": {}, "like": {}}

    def ctx(which: str) -> AttackContext:
        recipe = task.plain if which == "plain" else task.like
        c = AttackContext(target, rows.x, rows.y, data.population, recipe, run=run, ensembles=shared[which])
        c.planned_models = REFERENCES
        return c

    def attack(which: str, name: str, **options: Any) -> np.ndarray:
        t = time.perf_counter()
        with limit_threads(args.threads):
            result = get_attack(name)(models=REFERENCES, **options).run(ctx(which))
        extras = result.extras.get("augmented_queries")
        print(
            f"  {name} ({which}, {len(extras) if extras else 1} view(s)): {time.perf_counter() - t:.1f} s"
            + (f", {result.models_trained} models trained" if result.models_trained else ""),
            flush=True,
        )
        return final_scores(result, rows.calibration, rows.membership)

    out: dict[str, Any] = {}
    settings = (
        [(f"{v} view{'s' if v > 1 else ''}", "like", {"augmented_queries": v if v > 1 else False}) for v in (1, 2, 18)]
        if args.views
        else [
            ("(a) plain recipe", "plain", {}),
            ("(b) like the target", "like", {"augmented_queries": False}),
            ("(c) like the target + augmented queries", "like", {"augmented_queries": 18}),
        ]
    )
    for label, which, opts in settings:
        out[label] = {name: attack(which, name, **opts) for name in ("lira", "rmia")}
    if args.views:
        return {"rows": rows, "scores": out}

    def p1(lp: np.ndarray, y: np.ndarray) -> np.ndarray:
        return tempered_true_class(lp, y, 1.0)

    c = ctx("plain")
    with limit_threads(args.threads):
        refs = build_references(c, REFERENCES, z_samples=len(task.population[0]), min_population=10, attack="pm")
        pm, _ = privacy_meter_rmia(
            c.per_row(p1),
            refs.per_row(p1),
            refs.inside,
            tempered_true_class(target.log_proba(refs.z_x), refs.z_y, 1.0),
            refs.z_per_row(p1),
        )
    out["Privacy Meter RMIA-16 (its loader: no augmentation)"] = {"rmia": pm}
    return {"rows": rows, "scores": out}


def measure(scores: np.ndarray, rows: Any) -> dict[str, Any]:
    sp = stats.SplitScores.from_mask(scores, rows.membership, rows.calibration)
    return {
        "auc": stats.auc(sp.eval_in, sp.eval_out).value,
        **{f: stats.tpr_at_fpr(sp, f) for f in FPRS},
        **{f"roc{f}": roc_tpr(scores, rows.membership, f) for f in FPRS},
    }


def cell(e: Any, roc: float) -> str:
    if e.resolvable:
        return f"{e.value:.3f} [{e.lo:.3f}, {e.hi:.3f}]"
    return f"roc {roc:.3f}"


def report(name: str, result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    rows = result["rows"]
    n_in, n_out = int((~rows.calibration & rows.membership).sum()), int((~rows.calibration & ~rows.membership).sum())
    print(
        f"\nevaluation split {n_in} members / {n_out} non-members; TPR [95 % CI] at a threshold from the calibration "
        "split, or 'roc': the ROC curve over all audit rows where the splits cannot resolve that FPR"
    )
    print("| reference models | attack | TPR @ 1 % FPR | TPR @ 0.1 % FPR | AUC |")
    print("|---|---|---|---|---|")
    measured: dict[str, dict[str, Any]] = {}
    for label, by_attack in result["scores"].items():
        for attack, scores in by_attack.items():
            m = measure(scores, rows)
            measured[f"{label}|{attack}"] = m
            print(
                f"| {label} | {attack} | {cell(m[0.01], m['roc0.01'])} | {cell(m[0.001], m['roc0.001'])} | "
                f"{m['auc']:.3f} |"
            )
    return measured


def goal_line(name: str, measured: dict[str, dict[str, Any]]) -> None:
    pm = measured["Privacy Meter RMIA-16 (its loader: no augmentation)|rmia"][0.01]
    for attack in ("lira", "rmia"):
        c = measured[f"(c) like the target + augmented queries|{attack}"][0.01]
        if not (c.resolvable and pm.resolvable):
            print(f"{name}: (c) {attack} vs Privacy Meter at 1 % FPR: unresolvable")
            continue
        declared = " (declared)" if attack == "lira" else ""
        head = f"{name}: (c) {attack}{declared} TPR@1%FPR {c.value:.3f} vs Privacy Meter {pm.value:.3f}"
        if pm.value == 0:
            print(f"{head}: Privacy Meter finds no member at 1 % FPR; the ratio is undefined (compare the intervals)")
            continue
        ratio = c.value / pm.value
        verdict = "met" if ratio >= GOAL else f"NOT met (short by {GOAL * pm.value - c.value:.3f} TPR)"
        print(f"{head}: {ratio:.2f}x, goal >= {GOAL:g}x {verdict}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", nargs="+", default=["digits", "shapes", "user-loop"])
    ap.add_argument("--small", action="store_true", help="CPU sizes: width 8, 20 epochs, 1,600 shapes of 16×16")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--views", action="store_true", help="1, 2 and 18 views of the models trained like the target")
    ap.add_argument("--epochs", type=int, default=None)
    ap.add_argument("--width", type=int, default=None)
    args = ap.parse_args()
    from privgate.device import resolve_device

    args.device = resolve_device(args.device)
    if args.device == "cpu":
        args.small = True  # the GPU sizes would take an hour on a CPU (and `make bench` runs this with no arguments)
    big = not args.small
    args.epochs = args.epochs or (40 if big else 20)
    args.width = args.width or (32 if big else 8)
    args.shapes_rows, args.shapes_size = (8000, 32) if big else (1600, 16)
    where = torch.cuda.get_device_name() if args.device == "cuda" else "cpu"
    print(
        f"device {args.device} ({where}), {REFERENCES} reference models, CNN width {args.width}, {args.epochs} epochs, "
        f"seed {args.seed}, torch threads {args.threads}"
    )
    t0 = time.perf_counter()
    for name in args.tasks:
        task = make_task(name, args)
        result = run_task(task, args)
        measured = report(name, result)
        if name != "user-loop" and not args.views:
            goal_line(name, measured)
    print(f"\ntotal {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
