"""Attack strength at equal budget on three real tables: privgate vs IBM ART and Privacy Meter's RMIA configuration.

    pip install -e '.[bench]'                                     # adversarial-robustness-toolbox
    OMP_NUM_THREADS=1 python benchmarks/peers/attack_peers_tables.py --threads 1 # 212 s on the loaded 2-core machine
    OMP_NUM_THREADS=2 python benchmarks/peers/attack_peers_tables.py --threads 2 # same numbers; idle machine only
    python benchmarks/peers/attack_peers_tables.py --tables loans       # one table
    python benchmarks/peers/attack_peers_tables.py --variants           # and the scoring variants tried (not adopted)
    python benchmarks/peers/attack_peers_tables.py --art-nn             # add ART's neural-network attack model (slow)

The tables (:mod:`_common.peer_tables`: ``vote``, ``diamonds``, ``loans``; 2, 5 and 7
classes, 137, 22 and 124 features, 4,000–5,000 members each) each get a
memorising target: an MLP (features → 256 → 256 → classes, ReLU, Adam 1e-3,
40 epochs, batch 128, no weight decay), trained here on the table's members.
The audit rows (members and non-members) are pooled, shuffled and split as the
gate splits them (seeded, half calibration, half evaluation). Every attack scores
the same rows; every reference-model attack uses the **same 16 reference
models** (trained once per table by privgate's engine on complementary halves
of the audit pool, shared).

Peers, measured in the same run:

* IBM ART's ``MembershipInferenceBlackBox`` with ``attack_model_type`` ``rf``
  and ``gb`` (and ``nn`` with ``--art-nn``) on ``input_type`` ``loss`` and
  ``prediction`` — ART's documented attack models — trained on known members
  and non-members: cross-fitted over the calibration split (5 folds), each
  evaluation row scored by one fold's model (privgate's learned attack gets the
  same protocol);
* Privacy Meter's RMIA with 16 reference models (its defaults: offline,
  γ = 1, temperature 1, ``a`` tuned on a reference model), re-implemented in
  :mod:`_common.privacy_meter_rmia` because its RMIA is not installable here; it scores
  with privgate's 16 reference models.

Per attack: AUC with its 95 % DeLong interval; TPR at 1 % FPR at a threshold
chosen on the calibration non-members, measured on the evaluation split, with
its 95 % interval (:func:`privgate.stats.tpr_at_fpr`, Clopper–Pearson on the
members, the threshold's own uncertainty included) and "@" the FPR it achieved
there. Then per table the ratio best privgate / best peer at 1 % FPR, and the
median ratio over the tables against the goal (≥ 2×).
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

import numpy as np  # noqa: E402

from privgate import stats  # noqa: E402
from privgate.training.loop import train_model  # noqa: E402

#: privgate's attacks: (label, registry name, options). Every reference attack uses the same 16 models;
#: "temperature 1" is privgate's RMIA at Privacy Meter's temperature, to separate the settings from the rest.
PRIVGATE = (
    ("loss", "loss", {}),
    ("learned (all)", "learned", {}),
    ("LiRA offline (16)", "lira", {"models": 16, "offline": True}),
    ("LiRA online (16)", "lira", {"models": 16}),
    ("RMIA (16)", "rmia", {"models": 16}),
    ("RMIA (16), temperature 1", "rmia", {"models": 16, "temperature": 1.0}),
    ("RMIA online (16)", "rmia", {"models": 16, "online": True}),
    ("learned_reference (16)", "learned_reference", {"models": 16}),
)
#: Printed for the comparison with Privacy Meter's settings, not counted as a candidate for privgate's best.
DIAGNOSTIC = ("RMIA (16), temperature 1",)
#: The one attack named before measuring: its ratio is free of the best-of-several selection.
DECLARED = "learned_reference (16)"
GOAL = 2.0
EPOCHS = 40


def make_recipe(features: int, classes: int):  # noqa: ANN201
    """The memorising MLP recipe of a table's target."""
    from torch import nn

    from privgate.recipe import Recipe

    def factory() -> nn.Module:
        return nn.Sequential(
            nn.Linear(features, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, classes)
        )

    return Recipe(
        model_factory=factory,
        epochs=EPOCHS,
        batch_size=128,
        lr=1e-3,
        optimizer="adam",
        weight_decay=0.0,
        name=f"mlp-{features}-{classes}",
    )


def prepare(name: str, seed: int, threads: int):  # noqa: ANN201
    """The table's audit rows (as the gate splits them), its target and recipe."""
    from _common import peer_tables as _peer_tables
    from attack_peers import Audit

    from privgate.gate import audit_rows
    from privgate.inputs.data import AuditData, Dataset
    from privgate.inputs.target import Target
    from privgate.threads import limit_threads

    p = _peer_tables.parts(name)
    features, classes = _peer_tables.shape(name)
    recipe = make_recipe(features, classes)
    data = AuditData(*(Dataset(*p[k]) for k in ("members", "nonmembers", "population")), seed=seed)
    r = audit_rows(data, seed)
    t0 = time.perf_counter()
    with limit_threads(threads):
        model = train_model(recipe, *p["members"], seed=seed + 7)
    target = Target(model)
    acc = [float((target.predict(p[k][0]) == p[k][1]).mean()) for k in ("members", "nonmembers")]
    info = (
        f"{features} features, {classes} classes; target train accuracy {acc[0]:.3f}, test {acc[1]:.3f} "
        f"(trained in {time.perf_counter() - t0:.0f} s)"
    )
    return Audit(target, r.x, r.y, r.membership, r.calibration, data.population, recipe, seed), info


def run_privgate(a, ctx_ensembles: dict, cache: str, threads: int, attacks=PRIVGATE) -> list:  # noqa: ANN001
    from attack_peers import Row

    from privgate.attacks import get_attack
    from privgate.gate import final_scores
    from privgate.threads import limit_threads

    rows = []
    for label, name, options in attacks:
        ctx = a.context(cache, threads, options, ctx_ensembles)
        t0 = time.perf_counter()
        with limit_threads(threads):
            result = get_attack(name)(**options).run(ctx)
            scores = final_scores(result, a.calibration, a.membership)
        note = f"{result.models_trained} trained" if result.models_trained else ""
        rows.append(Row(label, scores, time.perf_counter() - t0, note))
    return rows


def run_privacy_meter(a, ctx_ensembles: dict, cache: str, threads: int):  # noqa: ANN001, ANN201
    """Privacy Meter's RMIA-16 configuration (:mod:`_common.privacy_meter_rmia`) on the shared 16 reference models."""
    from _common.privacy_meter_rmia import privacy_meter_rmia
    from attack_peers import Row

    from privgate.attacks.reference import build_references
    from privgate.attacks.rmia import tempered_true_class
    from privgate.threads import limit_threads

    def p1(lp: np.ndarray, y: np.ndarray) -> np.ndarray:
        return tempered_true_class(lp, y, 1.0)

    t0 = time.perf_counter()
    ctx = a.context(cache, threads, ensembles=ctx_ensembles)
    with limit_threads(threads):
        refs = build_references(ctx, 16, z_samples=len(a.population), min_population=10, attack="privacy-meter")
        scores, off_a = privacy_meter_rmia(
            ctx.per_row(p1),
            refs.per_row(p1),
            refs.inside,
            tempered_true_class(a.target.log_proba(refs.z_x), refs.z_y, 1.0),
            refs.z_per_row(p1),
        )
    return Row("Privacy Meter RMIA (16)*", scores, time.perf_counter() - t0, f"a = {off_a:g}")


def measure(a, rows: list) -> dict[str, tuple]:  # noqa: ANN001
    """name -> (AUC estimate, TPR@1%FPR estimate)."""
    out = {}
    for r in rows:
        sp = stats.SplitScores.from_mask(r.scores, a.membership, a.calibration)
        out[r.name] = (stats.auc(sp.eval_in, sp.eval_out), stats.tpr_at_fpr(sp, 0.01))
    return out


def _tpr(e) -> float:  # noqa: ANN001
    return e.value if e.resolvable else float("nan")


def _best(tpr: dict[str, float]) -> str | None:
    """The name with the highest TPR (an unresolvable one counts as none), or None for no names."""
    return max(tpr, key=lambda k: np.nan_to_num(tpr[k], nan=-1.0)) if tpr else None


def print_table(a, rows: list, peers: set[str], m: dict) -> None:  # noqa: ANN001
    n_in, n_out = int((~a.calibration & a.membership).sum()), int((~a.calibration & ~a.membership).sum())
    print(f"evaluation split: {n_in} members, {n_out} non-members (95 % intervals; @ = FPR achieved there)")
    print(f"| {'attack':<34} | {'AUC':<21} | {'TPR@1%FPR':<32} | s | note |")
    print(f"|{'-' * 36}|{'-' * 23}|{'-' * 34}|---|---|")
    for r in rows:
        auc, t1 = m[r.name]
        tpr = (
            f"{t1.value:.3f} [{t1.lo:.3f}, {t1.hi:.3f}] @{t1.details['fpr_achieved']:.4f}"
            if t1.resolvable
            else "unresolvable"
        )
        name = r.name + (" (peer)" if r.name in peers else " (diag.)" if r.name in DIAGNOSTIC else "")
        print(f"| {name:<34} | {auc.value:.3f} [{auc.lo:.3f}, {auc.hi:.3f}] | {tpr:<32} | {r.seconds:.0f} | {r.note} |")


def main(argv: list[str] | None = None) -> int:
    from _common import peer_tables as _peer_tables

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tables", default=",".join(_peer_tables.STRENGTH_TABLES), help="comma-separated table names")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1, help="threads (2 only on an idle machine)")
    ap.add_argument("--art-nn", action="store_true", help="add ART's nn attack model (minutes per table)")
    ap.add_argument("--variants", action="store_true", help="also print the scoring variants tried (not adopted)")
    ap.add_argument("--no-art", action="store_true", help="skip ART (privgate and Privacy Meter's RMIA only)")
    args = ap.parse_args(argv)
    from attack_peers import Row, run_art

    start = time.perf_counter()
    ratios: dict[str, float] = {}
    art_ratios: dict[str, float] = {}
    declared: dict[str, float] = {}
    strict: dict[str, float] = {}  # the peer credited with privgate's RMIA implementation at its settings
    for name in args.tables.split(","):
        t0 = time.perf_counter()
        a, info = prepare(name, args.seed, args.threads)
        print(f"\n=== {name}: {info}", flush=True)
        ensembles: dict = {}
        with tempfile.TemporaryDirectory(prefix="privgate-peers-") as cache:
            rows = run_privgate(a, ensembles, cache, args.threads)
            peer_rows = [run_privacy_meter(a, ensembles, cache, args.threads)]
            if args.variants:
                from _strength_variants import variants

                t1 = time.perf_counter()
                tried = variants(a, ensembles, cache, args.threads)
                print(f"scoring variants tried (not counted; {time.perf_counter() - t1:.0f} s):")
                for label, scores in tried.items():
                    auc, t = measure(a, [Row(label, scores, 0.0)])[label]
                    print(f"  {label:<30} TPR@1%FPR {t.value:.3f} [{t.lo:.3f}, {t.hi:.3f}]  AUC {auc.value:.3f}")
        if not args.no_art:
            kinds = ("rf", "gb", "nn") if args.art_nn else ("rf", "gb")
            peer_rows += run_art(a, kinds, args.threads)
        m = measure(a, rows + peer_rows)
        peers = {r.name for r in peer_rows}
        print_table(a, rows + peer_rows, peers, m)
        mine = {r.name: _tpr(m[r.name][1]) for r in rows if r.name not in DIAGNOSTIC}
        theirs = {r.name: _tpr(m[r.name][1]) for r in peer_rows}
        b, p = _best(mine), _best(theirs)
        art = _best({k: v for k, v in theirs.items() if k.startswith("ART")})
        ratios[name] = mine[b] / max(theirs[p], 1e-9)
        if art:
            art_ratios[name] = mine[b] / max(theirs[art], 1e-9)
        declared[name] = mine[DECLARED] / max(theirs[p], 1e-9)
        diag = [float(np.nan_to_num(_tpr(m[r.name][1]))) for r in rows if r.name in DIAGNOSTIC]
        strict[name] = mine[b] / max(theirs[p], *diag, 1e-9)
        print(
            f"{name}: privgate's best {b} {mine[b]:.3f}; best peer {p} {theirs[p]:.3f}; ratio {ratios[name]:.2f}x"
            + (f"; ART's best {art} {theirs[art]:.3f}, ratio {art_ratios[name]:.2f}x" if art else "")
            + f" ({time.perf_counter() - t0:.0f} s)",
            flush=True,
        )
    med = float(np.median(list(ratios.values())))
    print("\n* re-implemented from the paper and Privacy Meter's source (benchmarks/_common/privacy_meter_rmia.py)")
    if art_ratios:
        print(
            f"vs IBM ART alone: median {float(np.median(list(art_ratios.values()))):.2f}x ("
            + ", ".join(f"{k} {v:.2f}x" for k, v in art_ratios.items())
            + ")"
        )
    print(
        f"{DECLARED} alone vs the best peer: median {float(np.median(list(declared.values()))):.2f}x ("
        + ", ".join(f"{k} {v:.2f}x" for k, v in declared.items())
        + ")"
    )
    print(
        "with Privacy Meter's settings credited with privgate's RMIA implementation (the diagnostic row as a peer): "
        f"median {float(np.median(list(strict.values()))):.2f}x ("
        + ", ".join(f"{k} {v:.2f}x" for k, v in strict.items())
        + ")"
    )
    print("privgate's best vs the best peer at 1 % FPR: " + ", ".join(f"{k} {v:.2f}x" for k, v in ratios.items()))
    print(
        f"median ratio to the best peer over {len(ratios)} tables: {med:.2f}x "
        f"(goal ≥ {GOAL:g}x: {'met' if med >= GOAL else 'NOT met'}); total {time.perf_counter() - start:.0f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
