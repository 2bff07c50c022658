"""What the API serves vs the verdict: full probabilities, top-1 rounded to 2 decimals, the label only.

    nice -n 10 python benchmarks/attacks/served_surface.py                    # digits and purchase
    nice -n 10 python benchmarks/attacks/served_surface.py --example survey   # one (survey: 10,000 + 10,000 rows)

For each bundled example the gate audits the example's model under the policy
``confidential`` (accuracy ≤ 0.65, AUC ≤ 0.70, TPR@1 % FPR ≤ 5 %, every
decision at 0.975 confidence; its attacks: the black-box threshold family, the
learned attack, RMIA with 4 reference models, the label-only robustness attack
and the blind baseline), extended by a policy that names what the API serves
(``serves:``) and adds the boundary-distance label-only attack
(:mod:`privgate.attacks.boundary`), three times:

* ``probabilities``: every class's probability, full precision (today's audit);
* ``top-1, 2 decimals``: the highest class's probability rounded to 2 decimals;
* ``label``: the predicted class only (black-box attacks are not applicable).

It prints the verdict, the strongest attack's TPR at 1 % FPR with its 95 %
Clopper-Pearson interval (evaluation split; threshold chosen on the calibration
split), and the queries the audit sent to the served model; then, for the label
surface, the two label-only attacks side by side (AUC and TPR@1 % FPR with
intervals). One thread, a fresh cache per example (the three surfaces share it:
reference models are trained once and read through each surface).

Last, the random-guess sanity of the label-only attacks (``--null`` runs only
this): a model trained with the example's recipe on half of the population,
never on the audit rows, is attacked through its labels on the same members and
non-members (the other half of the population calibrates); both attacks' AUC
intervals should contain 0.5.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from attack_strength import _ci, _load  # noqa: E402

from privgate.gate import check_model  # noqa: E402
from privgate.inputs.data import AuditData, Dataset  # noqa: E402
from privgate.inputs.target import Target  # noqa: E402
from privgate.policy import parse_policy  # noqa: E402
from privgate.training.loop import train_model  # noqa: E402

SURFACES = {
    "probabilities": "{output: probabilities}",
    "top-1, 2 decimals": "{output: probabilities, top_k: 1, decimals: 2}",
    "label": "{output: label}",
}


def _policy(serves: str):  # noqa: ANN202
    return parse_policy(
        "name: served\nextends: confidential\nsensitivity: confidential\nrelease: api\nconfidence: 0.95\n"
        f"serves: {serves}\nattacks: {{boundary: {{}}}}\n"
    )


def _best_tpr(rep) -> tuple[str, str]:  # noqa: ANN001
    """The attack with the highest TPR at 1 % FPR among those that ran (the blind baseline excluded)."""
    best = None
    for a in rep.attacks:
        if a.status != "ran" or a.name == "blind":
            continue
        p = next(p for p in a.tpr_at_fpr if p.fpr == 0.01)
        if p.resolvable and (best is None or p.tpr > best[1].tpr):
            best = (a.name, p)
    return ("-", "unresolvable") if best is None else (best[0], _ci(best[1].tpr, best[1].ci))


def run(example: str, seed: int) -> None:
    folder, data, recipe = _load(example)
    members, nonmembers, population = (Dataset(*f()) for f in (data.members, data.nonmembers, data.population))
    print(f"\n=== {example}: {len(members)} members, {len(nonmembers)} non-members, {len(population)} population")
    print(f"  {'served':<20} {'verdict':<13} {'best TPR@1%FPR [95% CI]':<28} {'by':<16} {'queries':>10} {'s':>6}")
    label_attacks = []
    with tempfile.TemporaryDirectory(prefix="privgate-served-") as cache:
        for name, serves in SURFACES.items():
            target = Target.load(folder / "model.pt", recipe=recipe)
            t0 = time.perf_counter()
            rep = check_model(
                target,
                AuditData(members, nonmembers, population, seed=seed),
                _policy(serves),
                recipe=recipe,
                seed=seed,
                cache_dir=cache,
                threads=1,
            )
            by, tpr = _best_tpr(rep)
            queries = rep.target["served"]["queries"]
            print(f"  {name:<20} {rep.verdict:<13} {tpr:<28} {by:<16} {queries:>10,} {time.perf_counter() - t0:>6.0f}")
            if name == "label":
                label_attacks = [a for a in rep.attacks if a.threat_model == "label-only"]
                skipped = sorted({a.reason for a in rep.attacks if a.status != "ran"})
    print(f"  label: not run: {'; '.join(skipped)}")
    print(f"  label-only attacks under 'label' ({example}):")
    for a in label_attacks:
        p = next(p for p in a.tpr_at_fpr if p.fpr == 0.01)
        tpr = _ci(p.tpr, p.ci) if p.resolvable else "unresolvable"
        print(f"    {a.name:<12} AUC {_ci(a.auc, a.auc_ci):<22} TPR@1%FPR {tpr:<24} {a.seconds:>6.1f} s")


def null(example: str, seed: int) -> None:
    """Random-guess sanity: a model trained on half of the population, labels served, attacked on two random
    halves of the non-members as "members" and "non-members" — rows drawn alike that it never saw. (The example's
    own members would not do: an example may mislabel its members on purpose, as digits does, which no model of
    other rows fits, so they differ from non-members for any model.)"""
    import numpy as np
    import torch

    folder, data, recipe = _load(example)
    heldout, population = Dataset(*data.nonmembers()), Dataset(*data.population())
    split = np.random.default_rng(seed + 1).permutation(len(heldout))
    members = heldout.subset(np.sort(split[: len(split) // 2]))
    nonmembers = heldout.subset(np.sort(split[len(split) // 2 :]))
    order = np.random.default_rng(seed).permutation(len(population))
    half = len(population) // 2
    train, rest = population.subset(np.sort(order[:half])), population.subset(np.sort(order[half:]))
    torch.manual_seed(seed)
    independent = Target(
        train_model(recipe, train.x, train.y, seed=seed + 1), source=f"<{example}: {half} population rows>"
    )
    rep = check_model(
        independent,
        AuditData(members, nonmembers, rest, seed=seed),
        parse_policy(
            "name: independent\nsensitivity: public\nrelease: api\nserves: {output: label}\n"
            "attacks: {label_only: {}, boundary: {}}\n"
        ),
        seed=seed,
        threads=1,
    )
    print(
        f"  random-guess sanity ({example}: a model trained on {half} population rows, labels served; "
        f"{len(members)} + {len(nonmembers)} non-members it never saw as the audit set):"
    )
    for a in rep.attacks:
        inside = a.auc_ci[0] <= 0.5 <= a.auc_ci[1]
        print(f"    {a.name:<12} AUC {_ci(a.auc, a.auc_ci):<22} interval contains 0.5: {'yes' if inside else 'NO'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--example", choices=("digits", "purchase", "survey"), action="append")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--null", action="store_true", help="only the random-guess sanity of the label-only attacks")
    args = parser.parse_args()
    for example in args.example or ("digits", "purchase"):
        if not args.null:
            run(example, args.seed)
        null(example, args.seed)


if __name__ == "__main__":
    main()
