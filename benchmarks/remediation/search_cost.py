"""The price of the ε search: released ε of the composed search vs random stopping, on the digits example.

    nice -n 10 .venv/bin/python benchmarks/remediation/search_cost.py \
        [--policy examples/digits/strict-remediate.yaml] [--mean 3] [--seeds 3] [--json out.json]

Every candidate the search trains on the members costs privacy; the model it
hands out is guaranteed only the ε of the whole search (Liu & Talwar 2019,
arXiv 1811.07971; Papernot & Steinke 2022, arXiv 2110.03620). Four searches,
one seed, one thread, the same original audit, the same clip norm:

1. ``compose`` over the policy's schedule (the default): the ladder, every
   candidate composed (RDP/PRV);
2. ``random_stopping`` over the same schedule: K ~ geometric(mean) trials at ε
   drawn from the schedule, the best accepted released; Theorem 2 of
   Papernot & Steinke on the largest RDP curve of the schedule;
3. ``random_stopping`` over the one ε the ladder chose (as if the team had
   fixed ε per run and searched only the training randomness);
4. ``compose`` over that one ε: one run, released ε = training ε (the price
   when ε is fixed in advance and nothing is searched).

For each: trainings, the chosen ε, its utility (the quality of the handed-out
model), its training ε and the released ε, and the sum of the trained runs' ε
(basic composition) for comparison. The random-stopping searches are repeated
with ``--seeds`` seeds (the number of trials and the runs' noise differ per
seed; the released ε does not): how often they hand out a model, and of what
quality.
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
from rich.table import Table  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--policy", default=str(POLICY))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--mean", type=float, default=3.0, help="expected number of random-stopping trials")
    ap.add_argument("--seeds", type=int, default=3, help="seeds of each random-stopping search")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    torch.set_num_threads(1)
    console = Console(highlight=False, soft_wrap=True, width=160)
    audit = digits_audit(args.policy, args.seed)
    policy = audit.policy
    console.print(f"original model: {audit.original.summary}")
    clip = policy.remediation.max_grad_norm
    results: list[dict] = []

    def run(name: str, seed: int = args.seed, **update: object) -> dict:
        nonlocal clip
        out, seconds = search(audit, seed, {"max_grad_norm": clip, **update})
        s = out.report.remediation
        clip = s.settings.max_grad_norm if s.settings else clip  # the population-tuned C, reused by the others
        acc = s.accounting
        chosen = next((r for r in s.rows if s.chosen and r.epsilon == s.chosen_epsilon and r.accepted), None)
        row = {
            "search": name,
            "seed": seed,
            "schedule": list(update.get("epsilons", policy.remediation.epsilons)),
            "status": out.status,
            "trainings": s.trainings,
            "tried": [r.epsilon for r in s.rows],
            "chosen_epsilon": s.chosen_epsilon,
            "utility": chosen.utility if chosen else None,
            "training_epsilon": chosen.training.epsilon if chosen else None,
            "released_epsilon": acc.epsilon if acc else None,
            "accountant": acc.accountant if acc else None,
            "naive_sum": acc.naive_sum if acc else None,
            "clip": s.settings.max_grad_norm if s.settings else None,
            "seconds": round(seconds, 1),
            "rows": [
                {"epsilon": r.epsilon, "trial": r.trial, "utility": r.utility, "privacy": r.privacy, "ok": r.accepted}
                for r in s.rows
            ],
        }
        console.print(row)
        results.append(row)
        return row

    ladder = run("compose (ladder)", search="compose")
    trials = policy.remediation.trials.model_copy(update={"distribution": "geometric", "mean": args.mean})
    name = f"random stopping (geometric, mean {args.mean:g})"
    for seed in range(args.seeds):
        run(name, seed=seed, search="random_stopping", trials=trials)
    if ladder["chosen_epsilon"] is not None:
        fixed = [ladder["chosen_epsilon"]]
        for seed in range(args.seeds):
            name = f"random stopping at ε = {fixed[0]:g} only"
            run(name, seed=seed, search="random_stopping", trials=trials, epsilons=fixed)
        run(f"compose at ε = {fixed[0]:g} only (no search)", search="compose", epsilons=fixed)

    t = Table(title="Released ε of the search (digits, δ = 1/(10·N))")
    for col in ("search", "seed", "trainings", "chosen ε", "utility", "training ε", "released ε", "Σ training ε", "s"):
        t.add_column(col)

    def f(v: object) -> str:
        return "—" if v is None else f"{v:.4g}" if isinstance(v, float) else str(v)

    for r in results:
        t.add_row(
            r["search"],
            str(r["seed"]),
            str(r["trainings"]),
            f(r["chosen_epsilon"]),
            f(r["utility"]),
            f(r["training_epsilon"]),
            f(r["released_epsilon"]),
            f(r["naive_sum"]),
            f(r["seconds"]),
        )
    console.print(t)
    if args.json:
        out = {"policy": policy.name, "seed": args.seed, "results": results}
        args.json.write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
