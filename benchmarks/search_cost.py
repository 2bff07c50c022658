"""The price of the ε search: released ε of the composed search vs random stopping, on the digits example.

    nice -n 10 .venv/bin/python benchmarks/search_cost.py \
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
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DIGITS = ROOT / "examples" / "digits"
sys.path[:0] = [str(ROOT), str(DIGITS)]

import data as digits_data  # noqa: E402  (examples/digits/data.py)
import torch  # noqa: E402
from recipe import RECIPE  # noqa: E402  (examples/digits/recipe.py)
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from privgate.dp.remediate import remediate  # noqa: E402
from privgate.gate import check_model  # noqa: E402
from privgate.inputs.data import AuditData, Dataset  # noqa: E402
from privgate.inputs.target import Target  # noqa: E402
from privgate.policy import load_policy  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--policy", default=str(DIGITS / "strict-remediate.yaml"))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--mean", type=float, default=3.0, help="expected number of random-stopping trials")
    ap.add_argument("--seeds", type=int, default=3, help="seeds of each random-stopping search")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    torch.set_num_threads(1)
    console = Console(highlight=False, soft_wrap=True, width=160)
    policy = load_policy(args.policy)
    target = Target.load(DIGITS / "model.pt", recipe=RECIPE)
    members = Dataset(*digits_data.members(), "data:members")
    data = AuditData(
        members,
        Dataset(*digits_data.nonmembers(), "data:nonmembers"),
        Dataset(*digits_data.population(), "data:population"),
        seed=args.seed,
    )
    original = check_model(target, data, policy, recipe=RECIPE, seed=args.seed)
    console.print(f"original model: {original.summary}")
    clip = policy.remediation.max_grad_norm
    results: list[dict] = []

    def search(name: str, seed: int = args.seed, **update: object) -> dict:
        nonlocal clip
        rem = policy.remediation.model_copy(update={"max_grad_norm": clip, **update})
        pol = policy.model_copy(update={"remediation": rem})
        t = time.perf_counter()
        out = remediate(target, data, pol, RECIPE, seed=seed, train=members, original=original)
        s = out.report.remediation
        clip = s.settings.max_grad_norm if s.settings else clip  # the population-tuned C, reused by the others
        acc = s.accounting
        chosen = next((r for r in s.rows if s.chosen and r.epsilon == s.chosen_epsilon and r.accepted), None)
        row = {
            "search": name,
            "seed": seed,
            "schedule": list(rem.epsilons),
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
            "seconds": round(time.perf_counter() - t, 1),
            "rows": [
                {"epsilon": r.epsilon, "trial": r.trial, "utility": r.utility, "privacy": r.privacy, "ok": r.accepted}
                for r in s.rows
            ],
        }
        console.print(row)
        results.append(row)
        return row

    ladder = search("compose (ladder)", search="compose")
    trials = policy.remediation.trials.model_copy(update={"distribution": "geometric", "mean": args.mean})
    name = f"random stopping (geometric, mean {args.mean:g})"
    for seed in range(args.seeds):
        search(name, seed=seed, search="random_stopping", trials=trials)
    if ladder["chosen_epsilon"] is not None:
        fixed = [ladder["chosen_epsilon"]]
        for seed in range(args.seeds):
            name = f"random stopping at ε = {fixed[0]:g} only"
            search(name, seed=seed, search="random_stopping", trials=trials, epsilons=fixed)
        search(f"compose at ε = {fixed[0]:g} only (no search)", search="compose", epsilons=fixed)

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
