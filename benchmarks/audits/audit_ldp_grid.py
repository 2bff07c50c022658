"""`privgate audit ldp`: the 6 × 2 adversary grid at K = 10,000, its time, and seed 001's Figure 2 numbers.

    .venv/bin/python benchmarks/audits/audit_ldp_grid.py [--trials 10000] [--threads 2] [--json out.json]

For each claimed ε ∈ {0.5, 1, 2, 4}: one audit of the built-in LDP-SGD
randomiser with all six adversaries and both distinguishers (12 cells, one
verdict, Bonferroni over the 12), on the bundled digits model. Printed: the
wall time of the grid (gradients prepared once per audit, then the trials),
cell trials per second, and every cell's lower bound and point value ε_emp
(Eq. 3). Then a randomiser that keeps the sign with e^{3ε}/(1+e^{3ε}) while
claiming ε: its worst-case bound and verdict.

One run, on whatever else the machine is doing: the load average is printed.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from privgate.audits.ldp import LdpSettings, audit_ldp  # noqa: E402
from privgate.audits.ldp_adversaries import ADVERSARIES  # noqa: E402


def cheat(grads: torch.Tensor, epsilon: float, clip: float, generator: torch.Generator) -> torch.Tensor:
    """LDP-SGD's client step with the sign kept at e^{3ε}/(1+e^{3ε}): 3ε-LDP, claimed as ε-LDP."""
    k, d = grads.shape
    v = torch.randn(k, d, generator=generator, dtype=grads.dtype)
    v = v / v.norm(dim=1, keepdim=True)
    norm = grads.norm(dim=1).clamp(max=clip)
    proj = torch.where(torch.rand(k, generator=generator, dtype=grads.dtype) < 0.5 + norm / (2 * clip), 1.0, -1.0)
    along = torch.sign((grads * v).sum(dim=1)) * proj
    keep = torch.rand(k, generator=generator, dtype=grads.dtype) < 1 / (1 + math.exp(-3 * epsilon))
    return v * torch.where(keep, along, -along).unsqueeze(1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=10_000)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    print(
        f"load average before: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores; threads {args.threads}; K = "
        f"{args.trials:,}"
    )
    rows = []
    for eps in (0.5, 1.0, 2.0, 4.0):
        t0 = time.perf_counter()
        rep = audit_ldp(LdpSettings(epsilons=(eps,), trials=args.trials), threads=args.threads)
        wall = time.perf_counter() - t0
        print(
            f"\nε = {eps:g}: {rep.verdict}; grid of {rep.cells} cells in {wall:.2f} s (trials {rep.game_seconds:.2f} "
            "s, "
            f"{rep.trials_per_second:,.0f} cell trials/s); largest bound {rep.max_epsilon_lb:.3f} "
            f"({rep.max_epsilon_lb / eps:.0%} of ε), "
            f"most provable {rep.max_provable_epsilon:.2f}"
        )
        print(f"  {'adversary':24} {'black-box lb (ε_emp)':>22} {'white-box lb (ε_emp)':>22}")
        for adv in ADVERSARIES:
            cells = {r.distinguisher: r for r in rep.results if r.adversary == adv}
            txt = [
                f"{c.epsilon_lb:.3f} ({'∞' if c.epsilon_empirical is None else f'{c.epsilon_empirical:.3f}'})"
                for c in (cells["black_box"], cells["white_box"])
            ]
            print(f"  {adv:24} {txt[0]:>22} {txt[1]:>22}")
        rows.append(
            {
                "epsilon": eps,
                "wall_s": round(wall, 3),
                "game_s": rep.game_seconds,
                "trials_per_s": rep.trials_per_second,
                "verdict": rep.verdict,
                "max_epsilon_lb": rep.max_epsilon_lb,
                "cells": [
                    {
                        "adversary": r.adversary,
                        "distinguisher": r.distinguisher,
                        "epsilon_lb": r.epsilon_lb,
                        "epsilon_empirical": r.epsilon_empirical,
                    }
                    for r in rep.results
                ],
            }
        )
    t0 = time.perf_counter()
    bad = audit_ldp(
        LdpSettings(epsilons=(1.0,), trials=args.trials),
        mechanism=cheat,
        mechanism_name="e^{3ε} randomiser",
        threads=args.threads,
    )
    wall = time.perf_counter() - t0
    print(
        f"\nrandomiser at 3ε claiming ε = 1: {bad.verdict} (exit {bad.exit_code}); largest bound "
        f"{bad.max_epsilon_lb:.3f} "
        f"by {bad.claims[0].strongest}; {wall:.2f} s"
    )
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    if args.json:
        args.json.write_text(
            json.dumps(
                {"grid": rows, "cheat": {"verdict": bad.verdict, "max_epsilon_lb": bad.max_epsilon_lb}}, indent=2
            )
        )


if __name__ == "__main__":
    main()
