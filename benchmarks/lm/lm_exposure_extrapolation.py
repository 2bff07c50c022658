"""The extrapolated exposure against the exact one, on canaries a tiny LM saw 0 to 16 times.

A tiny Llama-style LM (tests/tiny_lm.py) is trained on 24 random records and on
canaries with 5-digit secrets (|R| = 10^5, at most 16.6 bits), each inserted
0, 1, 2, 4, 8 or 16 times. Every canary's exposure is measured exactly (all
10^5 candidates) and extrapolated from ``--samples`` sampled candidates (the
skew-normal fit of Carlini et al. 2019, arXiv 1802.08232, and the
distribution-free Clopper-Pearson interval). The table shows, per canary, the
exact exposure, the extrapolated point and interval, whether the interval
holds the exact value, and the fit's bootstrap interval.

    python benchmarks/lm/lm_exposure_extrapolation.py --samples 1000 --steps 40
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))

from tiny_lm import records, train  # noqa: E402

from privgate.inputs.canaries import make_canaries  # noqa: E402
from privgate.lm.canary_exposure import measure_exposure  # noqa: E402

REPEATS = (0, 0, 1, 1, 2, 2, 4, 4, 8, 8, 16, 16)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=1000)
    ap.add_argument("--steps", type=int, default=40, help="training steps (150: every inserted canary memorised)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    canaries = make_canaries(len(REPEATS), length=5, seed=5)
    texts = records(24, np.random.default_rng(0))
    for c, k in zip(canaries, REPEATS):
        texts += [c.prefix + c.secret + "."] * k
    model, tok = train(texts, args.steps, 5e-3, layers=2)
    exact = measure_exposure(model, tok, canaries, batch_size=1024)
    extra = measure_exposure(model, tok, canaries, batch_size=1024, max_exact=1000, samples=args.samples, seed=1)
    print(f"|R| = 10^5 (16.6 bits); {args.samples} sampled candidates; intervals at 95 % jointly (Bonferroni)")
    print(
        f"{'inserted':>8} {'exact':>7} {'extrap.':>8} {'interval':>16} {'holds':>6} {'below':>6} {'fit bootstrap':>16}"
    )
    held = 0
    for k, e, x in zip(REPEATS, exact.canaries, extra.canaries):
        ok = x.lo <= e.exposure <= x.hi
        held += ok
        print(
            f"{k:>8} {e.exposure:7.2f} {x.exposure:8.2f} {f'[{x.lo:.2f}, {x.hi:.2f}]':>16} {str(ok):>6} "
            f"{x.below:>6} {f'[{x.fit_lo:.2f}, {x.fit_hi:.2f}]':>16}"
        )
    err = np.abs([x.exposure - e.exposure for e, x in zip(exact.canaries, extra.canaries)])
    print(f"intervals holding the exact exposure: {held}/{len(REPEATS)}; |point - exact|: median {np.median(err):.2f}")
    print(
        f"max exposure: exact {exact.max_exposure:.2f}; "
        f"extrapolated {extra.max_exposure:.2f} [{extra.lo:.2f}, {extra.hi:.2f}]"
    )
    print(f"{time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
