"""False alarms of the built-in policies on models that never saw their members.

For each seed, a small MLP is trained on rows disjoint from its audit
"members" (tests/verdict_world.py: null_world), so no attack can truly tell
members from non-members; every built-in policy is run on it with its recipe
and population data, and the verdicts are counted. A policy promises that a
model within its thresholds fails with probability at most 1 − confidence.

    python benchmarks/false_alarms/null_false_alarms.py --seeds 40 --n 200

It asserts what tests/test_verdicts.py asserts on its few seeds, over all of
them (the 20-seed sweep moved here from the test suite to keep ``make test``
short): each policy's fail count is consistent with "fail rate ≤ 1 − confidence"
(one-sided binomial test at level 0.01), `internal` passes all null models but
at most 2, and `confidential` fails none.

Also prints the same count for a well-generalising model audited on 5,000 +
5,000 rows (``--generalising``), the case where `confidential` used to be
impossible to pass.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import torch
from scipy import stats as st

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))

from verdict_world import LADDER, generalising_world, null_world  # noqa: E402

import privgate  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--n", type=int, default=200, help="members and non-members per null model")
    ap.add_argument("--generalising", action="store_true", help="also audit the 5,000 + 5,000 generalising model")
    args = ap.parse_args()
    torch.set_num_threads(1)
    work = Path(tempfile.mkdtemp(prefix="privgate-null-"))
    counts = {p: Counter() for p in LADDER}
    t0 = time.perf_counter()
    for seed in range(args.seeds):
        w = null_world(work, seed, args.n)
        for policy in LADDER:
            r = privgate.check(
                w.model,
                policy,
                w.members,
                w.nonmembers,
                population=w.population,
                recipe=w.recipe,
                seed=seed,
                cache_dir=str(work / "cache"),
            )
            counts[policy][r.verdict] += 1
    print(
        f"null models: {args.seeds} seeds, {args.n} members / {args.n} non-members each "
        f"({time.perf_counter() - t0:.0f} s, privgate {privgate.__version__})"
    )
    print(f"{'policy':<14}{'confidence':>11}{'fail':>6}{'inconclusive':>14}{'pass':>6}{'fail rate':>11}")
    for policy in LADDER:
        c = counts[policy]
        conf = privgate.load_policy(policy).confidence
        print(
            f"{policy:<14}{conf:>11g}{c['fail']:>6}{c['inconclusive']:>14}{c['pass']:>6}{c['fail'] / args.seeds:>11.3f}"
        )
    check_null_counts(counts, args.seeds)
    if args.generalising:
        w = generalising_world(work)
        for policy in LADDER:
            r = privgate.check(
                w.model,
                policy,
                w.members,
                w.nonmembers,
                population=w.population,
                recipe=w.recipe,
                cache_dir=str(work / "cache"),
            )
            print(f"generalising model, 5000 + 5000 rows, {policy}: {r.verdict} — {r.summary[:160]}")


def check_null_counts(counts: dict[str, Counter], seeds: int) -> None:
    """The false-alarm promise of every built-in policy, and that null models are not lumped as inconclusive."""
    for policy in LADDER:
        alpha = 1 - privgate.load_policy(policy).confidence
        # one-sided binomial test of "fail rate ≤ α" at level 0.01: the count must be consistent with it
        assert st.binom.sf(counts[policy]["fail"] - 1, seeds, alpha) > 0.01, (policy, dict(counts[policy]))
    assert counts["internal"]["pass"] >= seeds - 2, dict(counts["internal"])
    assert counts["confidential"]["fail"] == 0, dict(counts["confidential"])
    print(f"asserted: fail counts consistent with 1 − confidence over {seeds} seeds; internal passes; confidential")


if __name__ == "__main__":
    main()
