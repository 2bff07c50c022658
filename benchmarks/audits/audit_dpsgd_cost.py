"""`privgate audit dpsgd`: what one-run auditing costs next to one ordinary training run, and what it catches.

    .venv/bin/python benchmarks/audits/audit_dpsgd_cost.py [--canaries 1000] [--threads 1] [--json out.json]

White-box (privgate's DP-SGD, the bundled digits MLP, 15 epochs, batch 128,
C = 1): for claimed ε ∈ {1, 2, 4, 8}, the audit's wall time against (a) one
ordinary DP-SGD run with the same settings and no canaries
(:func:`privgate.dpsgd.train.train_dp`, calibration included in both) and (b) one
non-private run of the same recipe; and the bound it reaches. Then bugs in the
noise: Opacus' noise scaled by 0.5, 0.25, 0.1 and 0 while ε = 1 is claimed.

Black-box (a user's trainer): a trainer that claims ε = 1 but adds no noise,
and one that runs Opacus at ε = 1; the audit's time against one call of the
trainer on the whole data set.

One run, on whatever else the machine is doing: the load average is printed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import opacus.optimizers.optimizer as plain  # noqa: E402
import opacus.optimizers.optimizer_fast_gradient_clipping as ghost  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402

from privgate.audits.bundled import DPSGD_RECIPE, digits  # noqa: E402
from privgate.audits.dpsgd import DpsgdSettings, audit_dpsgd  # noqa: E402
from privgate.dpsgd.records import DPSettings  # noqa: E402
from privgate.dpsgd.train import train_dp  # noqa: E402
from privgate.threads import limit_threads  # noqa: E402
from privgate.training.loop import train_model  # noqa: E402

warnings.simplefilter("ignore")


def _mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))


def no_noise(x: np.ndarray, y: np.ndarray, epsilon: float, delta: float, seed: int) -> nn.Module:
    """Claims (ε, δ); trains full-batch Adam for 100 epochs, no clipping, no noise."""
    torch.manual_seed(seed)
    model = _mlp()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    xt, yt = torch.as_tensor(x), torch.as_tensor(y)
    for _ in range(100):
        opt.zero_grad()
        nn.functional.cross_entropy(model(xt), yt).backward()
        opt.step()
    return model


def opacus_dp(x: np.ndarray, y: np.ndarray, epsilon: float, delta: float, seed: int) -> nn.Module:
    """Opacus DP-SGD at the claimed (ε, δ): 10 epochs, batch 128, C = 1."""
    from opacus import PrivacyEngine

    torch.manual_seed(seed)
    model = _mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    data = torch.utils.data.TensorDataset(torch.as_tensor(x), torch.as_tensor(y))
    loader = torch.utils.data.DataLoader(data, batch_size=128, generator=torch.Generator().manual_seed(seed))
    model, opt, loader = PrivacyEngine(accountant="rdp").make_private_with_epsilon(
        module=model,
        optimizer=opt,
        data_loader=loader,
        target_epsilon=epsilon,
        target_delta=delta,
        epochs=10,
        max_grad_norm=1.0,
        noise_generator=torch.Generator().manual_seed(seed + 1),
    )
    for _ in range(10):
        for xb, yb in loader:
            opt.zero_grad()
            nn.functional.cross_entropy(model(xb), yb).backward()
            opt.step()
    return model._module


def scaled_noise(factor: float):  # noqa: ANN201 - a replacement for opacus' _generate_noise
    original = plain._generate_noise

    def generate(
        std: float, reference: torch.Tensor, generator: object = None, secure_mode: bool = False
    ) -> torch.Tensor:
        return original(std * factor, reference, generator, secure_mode) if factor > 0 else torch.zeros_like(reference)

    return original, generate


def timed(fn, *a, **k):  # noqa: ANN001, ANN201
    t0 = time.perf_counter()
    out = fn(*a, **k)
    return out, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--canaries", type=int, default=1000)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    data = digits()
    recipe = DPSGD_RECIPE
    print(
        f"load average before: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores; threads {args.threads}; m = "
        f"{args.canaries}"
    )
    with limit_threads(args.threads):
        timed(train_model, recipe, data.x, data.y, 0)  # warm-up (first optimiser step, imports)
        _, plain_s = timed(train_model, recipe, data.x, data.y, 0)
    out: dict = {"white_box": [], "noise_bugs": [], "black_box": []}
    print(
        f"\nwhite-box, {recipe.name}: {recipe.epochs} epochs, batch {recipe.batch_size}; non-private run "
        f"{plain_s:.2f} s"
    )
    print(
        f"  {'ε':>4} {'audit s':>8} {'DP-SGD s':>9} {'audit/DP-SGD':>13} {'audit/plain':>12} {'σ':>7} {'ε_lb':>7} "
        f"{'most':>6} verdict"
    )
    for eps in (1.0, 2.0, 4.0, 8.0):
        settings = DPSettings(
            epochs=recipe.epochs, batch_size=recipe.batch_size, max_grad_norm=1.0, delta=1e-5, accountant="prv"
        )
        with limit_threads(args.threads):
            (_, record), dp_s = timed(train_dp, recipe, data.x, data.y, 0, settings=settings, target_epsilon=eps)
        rep, audit_s = timed(audit_dpsgd, DpsgdSettings(epsilon=eps, canaries=args.canaries), threads=args.threads)
        print(
            f"  {eps:>4g} {audit_s:>8.2f} {dp_s:>9.2f} {audit_s / dp_s:>12.2f}x {audit_s / plain_s:>11.1f}x "
            f"{record.noise_multiplier:>7.3f} "
            f"{rep.epsilon_lb:>7.3f} {rep.max_provable_epsilon:>6.2f} {rep.verdict}"
        )
        out["white_box"].append(
            {
                "epsilon": eps,
                "audit_s": audit_s,
                "dp_sgd_s": dp_s,
                "plain_s": plain_s,
                "sigma": record.noise_multiplier,
                "epsilon_lb": rep.epsilon_lb,
                "verdict": rep.verdict,
            }
        )
    print("\nnoise bugs, claimed ε = 1 (Opacus' noise scaled by a factor):")
    for factor in (1.0, 0.5, 0.25, 0.1, 0.0):
        original, generate = scaled_noise(factor)
        plain._generate_noise = ghost._generate_noise = generate
        try:
            rep = audit_dpsgd(DpsgdSettings(epsilon=1.0, canaries=args.canaries), threads=args.threads)
        finally:
            plain._generate_noise = ghost._generate_noise = original
        print(
            f"  noise × {factor:<4g}: ε_lb = {rep.epsilon_lb:.3f} ({rep.correct}/{rep.guesses} right) → "
            f"{rep.verdict} (exit {rep.exit_code})"
        )
        out["noise_bugs"].append({"factor": factor, "epsilon_lb": rep.epsilon_lb, "verdict": rep.verdict})
    print("\nblack-box, claimed ε = 1 (mislabelled canaries, scored by loss):")
    for fn in (no_noise, opacus_dp):
        with limit_threads(args.threads):
            _, once_s = timed(fn, data.x, data.y, 1.0, 1e-5, 0)
        rep, audit_s = timed(
            audit_dpsgd,
            DpsgdSettings(epsilon=1.0, canaries=args.canaries),
            train=fn,
            train_name=fn.__name__,
            threads=args.threads,
        )
        print(
            f"  {fn.__name__:10}: ε_lb = {rep.epsilon_lb:.3f} ({rep.correct}/{rep.guesses} right) → {rep.verdict} "
            f"(exit {rep.exit_code}); "
            f"audit {audit_s:.2f} s vs one training {once_s:.2f} s ({audit_s / once_s:.2f}x)"
        )
        out["black_box"].append(
            {
                "trainer": fn.__name__,
                "epsilon_lb": rep.epsilon_lb,
                "verdict": rep.verdict,
                "audit_s": audit_s,
                "train_s": once_s,
            }
        )
    print(f"\nload average after: {os.getloadavg()[0]:.2f}")
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
