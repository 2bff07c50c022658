"""Number of DP-SGD retrainings: ``ladder`` vs ``bisect`` on the digits example.

    .venv/bin/python benchmarks/remediation/ladder_vs_bisect.py \
        [--policy examples/digits/strict-remediate.yaml] [--sweep] [--json out.json]

Runs the remediation search twice on the digits example, once per strategy,
with the same seed and settings, and reports how many DP-SGD models of the
target each strategy trained and the ε each chose. The candidates are shared
(one training per ε, reused by the second strategy), so the comparison costs
the union of both searches, not their sum; the clip norm of an ``auto`` policy
is searched once and reused. ``--sweep`` also trains every other ε of the
schedule and prints the full ε–utility–attack table.

Expectations: ``ladder`` needs i+1 trainings when the i-th ε (0-based, from the
largest) is the first that passes; ``bisect`` needs about ⌈log₂(n+1)⌉ for n
values. When the largest ε already passes, the ladder wins (1 vs 3 for 6 ε).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[1])]  # benchmarks/, for _common

import torch  # noqa: E402
from _common.digits_search import POLICY, digits_audit, search  # noqa: E402
from rich.console import Console  # noqa: E402

from privgate.report.console import print_remediation  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--policy", default=str(POLICY))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--sweep", action="store_true", help="also train every other ε: the full ε–utility–attack table")
    ap.add_argument("--cache-dir", default=None)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    torch.set_num_threads(1)
    console = Console(highlight=False, soft_wrap=True)

    audit = digits_audit(args.policy, args.seed, args.cache_dir)
    policy = audit.policy
    console.print(f"original model: {audit.original.summary}")

    memo: dict = {}
    results = {}
    clip = policy.remediation.max_grad_norm
    for strategy in ("ladder", "bisect"):
        before = len(memo)
        out, seconds = search(
            audit,
            args.seed,
            {"strategy": strategy, "max_grad_norm": clip},
            cache_dir=args.cache_dir,
            memo=memo,
            sweep=args.sweep and strategy == "bisect",
            on_row=lambda row: console.print(
                f"  ({'search' if row.in_search else 'sweep'}) ε = {row.epsilon:g}: utility "
                f"{row.utility:.3f}, {row.privacy}"
            ),
        )
        section = out.report.remediation
        clip = section.settings.max_grad_norm if section.settings else clip  # reuse the searched clip norm
        results[strategy] = {
            "trainings": section.trainings,
            "chosen_epsilon": section.chosen_epsilon,
            "released_epsilon": section.accounting.epsilon if section.accounting else None,
            "status": out.status,
            "verdict": out.report.verdict,
            "new_trainings_this_run": len(memo) - before,
            "seconds": round(seconds, 1),
        }
        console.print(f"{strategy}: {results[strategy]}")
        last = section
    console.print()
    print_remediation(last, console)
    console.print()
    schedule = policy.remediation.epsilons
    console.print(
        f"schedule {schedule}: ladder trained {results['ladder']['trainings']}, bisect trained "
        f"{results['bisect']['trainings']} "
        f"(chosen ε: ladder {results['ladder']['chosen_epsilon']}, bisect {results['bisect']['chosen_epsilon']})"
    )
    if args.json:
        table = [
            {
                "epsilon": r.epsilon,
                "utility": r.utility,
                "verdict": r.verdict,
                "in_search": r.in_search,
                "checks": {c.id: [c.value, c.status] for c in r.checks},
                "sigma": r.training.noise_multiplier,
                "epsilon_spent": r.training.epsilon,
                "released_epsilon": r.released_epsilon,
                "accountant": r.training.accountant,
                "train_seconds": r.training.seconds,
                "audit_seconds": r.audit_seconds,
            }
            for r in last.rows
        ]
        args.json.write_text(
            json.dumps(
                {
                    "policy": policy.name,
                    "schedule": schedule,
                    "strategies": results,
                    "original": last.original.model_dump() if last.original else None,
                    "table": table,
                },
                indent=2,
                default=str,
            )
            + "\n"
        )


if __name__ == "__main__":
    main()
