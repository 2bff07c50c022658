"""How often does ``privgate diff`` call an equally leaky model a regression, and how often does it see a real one?

Pairs of independent audits of attacks whose scores come from the same
distribution (members N(0.5, 1), non-members N(0, 1), 150 of each per
calibration/evaluation split, the gate's own statistics) are compared at a
one-sided level 0.05 with tolerance 0: a valid test says "worse" in at most 5 %
of pairs. Printed per method, with the binomial standard error of the rate:

* AUC: z-test of two DeLong estimates (what the diff uses);
* accuracy, Wilson/Newcombe from the counts: ignores that each report chose its
  threshold on its own calibration split (not used, shown for the reason);
* accuracy, Clopper-Pearson TPR/FPR bounds as the report makes them (what the diff uses);
* TPR at FPR 0.05 from the reported threshold-aware interval (what the diff uses);
* ε̂ at the calibrated threshold, Wilson bounds (what the diff uses).

Then the power: AUC 0.60 → 0.86 (members shifted 0.35 → 1.5) at level 0.05/4.

    python benchmarks/false_alarms/diff_false_alarms.py [PAIRS]     # default 4000; about 4 minutes on 2 cores
"""

from __future__ import annotations

import math
import sys
import time

import numpy as np

from privgate import stats
from privgate.report.evidence import check_estimate
from privgate.report.model import CheckResult
from privgate.stats import difference as D


class WilsonRates:
    """½(TPR − FPR) + ½ bounded by MOVER over Wilson bounds of the counts (Newcombe 1998)."""

    def __init__(self, tp: int, n1: int, fp: int, n0: int) -> None:
        self.tp, self.n1, self.fp, self.n0 = tp, n1, fp, n0
        self.value = 0.5 + 0.5 * (tp / n1 - fp / n0)

    def _spread(self, a: float, up: bool) -> float:
        t_lo, t_hi = D.wilson(self.tp, self.n1, a)
        f_lo, f_hi = D.wilson(self.fp, self.n0, a)
        dt = (t_hi - self.tp / self.n1) if up else (self.tp / self.n1 - t_lo)
        df = (self.fp / self.n0 - f_lo) if up else (f_hi - self.fp / self.n0)
        return 0.5 * math.hypot(dt, df)

    def lower(self, a: float) -> float:
        return self.value - self._spread(a, False)

    def upper(self, a: float) -> float:
        return self.value + self._spread(a, True)


def split(rng: np.random.Generator, n: int, shift: float) -> stats.SplitScores:
    return stats.SplitScores(rng.normal(shift, 1, n), rng.normal(0, 1, n), rng.normal(shift, 1, n), rng.normal(0, 1, n))


def as_check(e: stats.Estimate, metric: str, fpr: float | None = None) -> CheckResult:
    return CheckResult(
        id="c",
        attack="a",
        metric=metric,
        value=e.value,
        ci=[e.lo, e.hi],
        threshold=1.0,
        status="pass",
        reason="",
        confidence=e.confidence,
        fpr=fpr,
        details=dict(e.details),
    )


def measure(sp: stats.SplitScores, with_epsilon: bool) -> dict[str, D.Bounded]:
    acc = stats.balanced_accuracy(sp, 0.95)
    d = acc.details
    out = {
        "AUC, DeLong z-test": check_estimate(as_check(stats.auc(sp.eval_in, sp.eval_out, 0.95), "auc"))[0],
        "accuracy, Wilson counts (not used)": WilsonRates(
            d["tp"], d["evaluation_members"], d["fp"], d["evaluation_nonmembers"]
        ),
        "accuracy, report's CP bounds": check_estimate(as_check(acc, "accuracy"))[0],
        "TPR@0.05, reported interval": check_estimate(as_check(stats.tpr_at_fpr(sp, 0.05, 0.95), "tpr_at_fpr", 0.05))[
            0
        ],
    }
    if with_epsilon:
        out["ε̂, Wilson bounds"] = check_estimate(as_check(stats.epsilon_lower_bound(sp, 1e-5, 0.95), "epsilon_lb"))[0]
    return out


def main() -> int:
    pairs = int(sys.argv[1]) if len(sys.argv) > 1 else 4000
    rng = np.random.default_rng(2026)
    t0 = time.perf_counter()
    alarms: dict[str, int] = {}
    eps_pairs = min(pairs, 300)  # ε's threshold search is slow (a Clopper-Pearson bound per calibration score)
    for i in range(pairs):
        base, new = measure(split(rng, 150, 0.5), i < eps_pairs), measure(split(rng, 150, 0.5), i < eps_pairs)
        for k in base:
            alarms[k] = alarms.get(k, 0) + (D.bounds(base[k], new[k], 0.05)[0] > 0)
    print(f"false alarms at level 0.05 on {pairs} pairs of equally leaky runs (members N(0.5,1), 150 per split):")
    for k, v in alarms.items():
        n = eps_pairs if k.startswith("ε") else pairs
        rate = v / n
        print(f"  {k:38s} {rate:.4f} ± {math.sqrt(max(rate * (1 - rate), 1e-12) / n):.4f}  ({v} of {n})")
    found: dict[str, int] = {}
    power_pairs = max(50, pairs // 10)
    for _ in range(power_pairs):
        base, new = measure(split(rng, 150, 0.35), False), measure(split(rng, 150, 1.5), False)
        for k in base:
            found[k] = found.get(k, 0) + (D.bounds(base[k], new[k], 0.05 / 4)[0] > 0.02)
    print(f"power at level 0.05/4, tolerance 0.02, AUC 0.60 → 0.86, {power_pairs} pairs:")
    for k, v in found.items():
        print(f"  {k:38s} {v / power_pairs:.3f}")
    print(f"{time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
