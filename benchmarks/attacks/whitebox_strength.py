"""How much the white-box attacks and attribute inference find, on memorising vs regularised vs DP models.

    .venv/bin/python benchmarks/attacks/whitebox_strength.py [--seeds 3] [--threads 1] [--json out.json]

Digits (scikit-learn's 8x8 images, ``examples/digits``): the example's recipe
(MLP 64-256-256-10, Adam, no weight decay) trained on **5 images per class**
(50 members), so it memorises; audited on those 50 members and 40 unseen images
per class (the gate would balance them; here the pools are balanced inside the
similarity measure, and the AUC uses all of them). Variants of the same recipe:

* ``memorising``: the recipe as is;
* ``weight decay 0.1``: the recipe with ``weight_decay=0.1``;
* ``DP-SGD ε=16``: the same network trained with Opacus (SGD, momentum 0.9,
  lr 0.05, batch 10, 100 epochs, clipping 1.0, δ = 1e-3, PRV accountant);
* ``example model.pt``: the example's own target (897 members, 600 non-members).

For each: test accuracy on the 600 example non-members, the gradient-norm MIA
AUC with DeLong's 95 % interval, and the inversion metric ``similarity`` (mean
SSIM gap nearest-member minus nearest-non-member over classes) with its paired
t-interval and the sign count.

Attribute inference: the synthetic table (``examples/synthetic_attribute``)
with the memorising recipe and a regularised one (20 epochs, weight decay
0.01), and the purchase example's target on its three most frequent items.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402

from privgate import stats  # noqa: E402
from privgate.attacks import get_attack  # noqa: E402
from privgate.attacks.base import AttackContext  # noqa: E402
from privgate.inputs.data import Dataset  # noqa: E402
from privgate.inputs.entrypoints import import_factory, load_recipe  # noqa: E402
from privgate.inputs.target import Target  # noqa: E402
from privgate.options import RunOptions  # noqa: E402
from privgate.training.loop import train_model  # noqa: E402

DIGITS = ROOT / "examples" / "digits"
SYNTH = ROOT / "examples" / "synthetic_attribute"
PURCHASE = ROOT / "examples" / "purchase"


def _split(folder: Path, name: str) -> tuple[np.ndarray, np.ndarray]:
    x, y = import_factory(f"data:{name}", [folder])()
    return np.asarray(x, np.float32), np.asarray(y, np.int64)


def _per_class(x: np.ndarray, y: np.ndarray, k: int, skip: int = 0) -> tuple[np.ndarray, np.ndarray]:
    idx = np.concatenate([np.flatnonzero(y == c)[skip : skip + k] for c in np.unique(y)])
    return x[idx], y[idx]


def dp_train(factory, x: np.ndarray, y: np.ndarray, epsilon: float, seed: int) -> nn.Module:
    """DP-SGD with Opacus directly; returns a plain module (no Opacus hooks) with the trained weights."""
    from opacus import PrivacyEngine

    torch.manual_seed(seed)
    net = factory()
    ds = torch.utils.data.TensorDataset(torch.as_tensor(x), torch.as_tensor(y))
    dl = torch.utils.data.DataLoader(ds, batch_size=10, shuffle=True, generator=torch.Generator().manual_seed(seed))
    opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        engine = PrivacyEngine(accountant="prv")
        private, opt, dl = engine.make_private_with_epsilon(
            module=net,
            optimizer=opt,
            data_loader=dl,
            target_epsilon=epsilon,
            target_delta=1e-3,
            epochs=100,
            max_grad_norm=1.0,
        )
        for _ in range(100):
            for xb, yb in dl:
                if len(xb) == 0:
                    continue
                opt.zero_grad()
                nn.functional.cross_entropy(private(xb), yb).backward()
                opt.step()
    plain = factory()
    plain.load_state_dict(private._module.state_dict())
    return plain.eval()


def digits_rows(seeds: int) -> list[dict]:
    recipe = load_recipe("recipe:RECIPE", [DIGITS])
    xm_all, ym_all = _split(DIGITS, "members")
    xn_all, yn_all = _split(DIGITS, "nonmembers")
    pop = Dataset(*_split(DIGITS, "population"))
    xm, ym = _per_class(xm_all, ym_all, 5)
    xn, yn = _per_class(xn_all, yn_all, 40)
    variants = {
        "memorising": lambda s: train_model(recipe, xm, ym, seed=s),
        "weight decay 0.1": lambda s: train_model(dataclasses.replace(recipe, weight_decay=0.1), xm, ym, seed=s),
        "DP-SGD eps=16": lambda s: dp_train(recipe.model_factory, xm, ym, 16.0, s),
    }
    rows = []
    for name, make in variants.items():
        for seed in range(seeds):
            t = time.perf_counter()
            net = make(seed)
            rows.append(
                _audit_digits(name, seed, Target(net), xm, ym, xn, yn, pop, xn_all, yn_all, time.perf_counter() - t)
            )
    full = Target.load(DIGITS / "model.pt", recipe=recipe)
    rows.append(
        _audit_digits(
            "example model.pt (897 members)", 0, full, xm_all, ym_all, xn_all, yn_all, pop, xn_all, yn_all, 0.0
        )
    )
    return rows


def _audit_digits(name, seed, target, xm, ym, xn, yn, pop, xt, yt, train_s) -> dict:
    x, y = np.concatenate([xm, xn]), np.concatenate([ym, yn])
    m = np.r_[np.ones(len(ym), bool), np.zeros(len(yn), bool)]
    ctx = AttackContext(target=target, x=x, y=y, population=pop, run=RunOptions(seed=seed))
    g = get_attack("gradient")(mode="norm").run(ctx)
    auc = stats.auc(g.scores[m], g.scores[~m])
    inv = get_attack("inversion")().run(ctx)
    sim = inv.extras["estimates"]["similarity"].estimate(m, 0.95)
    return {
        "model": name,
        "seed": seed,
        "train_s": round(train_s, 2),
        "test_accuracy": float((target.predict(xt) == yt).mean()),
        "gradient_auc": [auc.value, auc.lo, auc.hi],
        "similarity": [sim.value, sim.lo, sim.hi],
        "cosine_gap": sim.details.get("cosine_gap"),
        "closer_to_member": f"{sim.details['closer_to_member']}/{sim.details['classes']}",
        "sign_test_p": sim.details["sign_test_p"],
        "inversion_s": round(inv.seconds, 2),
        "inversion_s_per_class": inv.extras["seconds_per_class"],
    }


def attribute_rows() -> list[dict]:
    rows = []
    recipe = load_recipe("recipe:RECIPE", [SYNTH])
    (xm, ym), (xn, yn), pop = (
        _split(SYNTH, "members"),
        _split(SYNTH, "nonmembers"),
        Dataset(*_split(SYNTH, "population")),
    )
    for name, rec in (
        ("synthetic, memorising", recipe),
        ("synthetic, regularised", dataclasses.replace(recipe, epochs=20, weight_decay=0.01)),
    ):
        rows.append(_audit_attribute(name, Target(train_model(rec, xm, ym, seed=0)), xm, ym, xn, yn, pop, 0))
    target = Target.load(PURCHASE / "model.pt")
    (pm, pym), (pn, pyn), ppop = (
        _split(PURCHASE, "members"),
        _split(PURCHASE, "nonmembers"),
        Dataset(*_split(PURCHASE, "population")),
    )
    for col in np.argsort(-ppop.x.mean(axis=0))[:3]:
        rows.append(
            _audit_attribute(
                f"purchase, item {int(col)} (bought by {ppop.x[:, col].mean():.0%})",
                target,
                pm,
                pym,
                pn,
                pyn,
                ppop,
                int(col),
            )
        )
    return rows


def _audit_attribute(name, target, xm, ym, xn, yn, pop, col) -> dict:
    x, y = np.concatenate([xm, xn]), np.concatenate([ym, yn])
    m = np.r_[np.ones(len(ym), bool), np.zeros(len(yn), bool)]
    r = get_attack("attribute")(sensitive_column=col).run(AttackContext(target=target, x=x, y=y, population=pop))
    e = r.extras["estimates"]["attribute_advantage"].estimate(m, 0.95)
    d = e.details
    return {
        "model": name,
        "advantage": [e.value, e.lo, e.hi],
        "baseline": d["baseline"],
        "attack_acc_members": d["attack_accuracy_members"],
        "baseline_acc_members": d["baseline_accuracy_members"],
        "advantage_nonmembers": d["advantage_nonmembers"],
        "member_nonmember_gap": d["member_nonmember_gap"],
        "train_accuracy": float((target.predict(xm) == ym).mean()),
        "test_accuracy": float((target.predict(xn) == yn).mean()),
        "seconds": round(r.seconds, 2),
    }


def _ci(v: list[float]) -> str:
    return f"{v[0]:.3f} [{v[1]:.3f}, {v[2]:.3f}]"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    digits = digits_rows(args.seeds)
    print("digits, 5 training images per class; gradient-norm MIA and model inversion (SSIM gap)")
    print(
        f"{'model':<32} {'seed':>4} {'test acc':>8} {'gradient AUC [95% CI]':>24} {'similarity [95% CI]':>24} "
        f"{'closer':>7} {'s/class':>8}"
    )
    for r in digits:
        print(
            f"{r['model']:<32} {r['seed']:>4} {r['test_accuracy']:>8.3f} {_ci(r['gradient_auc']):>24} "
            f"{_ci(r['similarity']):>24} "
            f"{r['closer_to_member']:>7} {r['inversion_s_per_class']:>8.3f}"
        )
    attribute = attribute_rows()
    print("\nattribute inference: advantage over the best model-free guess, on members [exact 95% CI]")
    print(
        f"{'target':<38} {'advantage [95% CI]':>24} {'baseline':>10} {'attack/base acc':>16} "
        f"{'adv. non-members':>17} {'gap':>6}"
    )
    for r in attribute:
        print(
            f"{r['model']:<38} {_ci(r['advantage']):>24} {r['baseline']:>10} "
            f"{r['attack_acc_members']:>7.3f}/{r['baseline_acc_members']:<8.3f} "
            f"{r['advantage_nonmembers']:>17.3f} {r['member_nonmember_gap']:>6.3f}"
        )
    if args.json:
        args.json.write_text(json.dumps({"digits": digits, "attribute": attribute}, indent=2) + "\n")


if __name__ == "__main__":
    main()
