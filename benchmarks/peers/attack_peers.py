"""privgate's attacks against IBM ART's membership-inference attacks, on the same evaluation rows.

    pip install -e '.[bench]'                                  # adversarial-robustness-toolbox
    python benchmarks/peers/attack_peers.py                          # the real survey table (about 20 min on 2 cores)
    python benchmarks/peers/attack_peers.py --example purchase       # a synthetic example
    python benchmarks/peers/attack_peers.py --no-nn                  # skip ART's neural-network attacks (the slow part)

Every attack scores the same pooled audit rows (members and non-members of the
example's ``model.pt``), split as the gate splits them (seeded, half for
calibration, half for evaluation). privgate's attacks run as the gate runs them;
the learned ones are cross-fitted on the calibration split. IBM ART's
``MembershipInferenceBlackBox`` (rf, gb and nn attack models; ``input_type``
``loss`` and ``prediction``) is trained on known members and non-members, so it
gets the same protocol as privgate's learned attack: cross-fitted over the
calibration split (5 folds; 2 for nn, which trains for minutes per fold), each
evaluation row scored by one fold's model. Then for every attack:

* AUC on the evaluation split with its 95 % DeLong interval;
* TPR at 1 % and 0.1 % FPR at a threshold chosen on the calibration
  non-members, measured on the evaluation split, with its interval
  (:func:`privgate.stats.tpr_at_fpr`) and the FPR that threshold achieved;
* "eval-ROC": the TPR read off the evaluation ROC curve at FPR ≤ 1 % — the
  threshold chosen on the very rows it is measured on. Optimistic, for every
  attack alike; it is what many papers report.

ML Privacy Meter's RMIA is not on the package index: ``privacy-meter`` 1.0.1
(July 2023, the last release there) predates RMIA, and installing the research
code from its repository is not possible here, so the script prints the figures
recorded in issue 16 instead of running it. ``benchmarks/peers/attack_peers_tables.py``
runs a re-implementation of its RMIA configuration, with ART, on three more
real tables.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from privgate import stats  # noqa: E402
from privgate.attacks import AttackContext, get_attack  # noqa: E402
from privgate.attacks.crossfit import CalibrationLabels, cross_fit  # noqa: E402
from privgate.inputs.data import AuditData, Dataset  # noqa: E402
from privgate.inputs.target import Target  # noqa: E402
from privgate.options import RunOptions  # noqa: E402

#: privgate's attacks in the comparison: (label, registry name, options).
PRIVGATE = (
    ("loss", "loss", {}),
    ("loss two-sided/class", "loss", {"direction": "two_sided", "class_dependent": True}),
    ("confidence", "confidence", {}),
    ("entropy", "entropy", {}),
    ("modified entropy/class", "modified_entropy", {"class_dependent": True}),
    ("true-class conf./class", "true_class_confidence", {"class_dependent": True}),
    ("learned (loss)", "learned", {"signals": "loss"}),
    ("learned (outputs)", "learned", {"signals": "outputs"}),
    ("learned (all)", "learned", {}),
    ("RMIA offline (4)", "rmia", {"models": 4}),
    ("RMIA offline (16)", "rmia", {"models": 16}),
    ("LiRA offline (16)", "lira", {"models": 16, "offline": True}),
    ("LiRA online (16)", "lira", {"models": 16}),
    ("LiRA online (64)", "lira", {"models": 64}),
    ("learned_reference (16)", "learned_reference", {"models": 16}),
    ("learned_reference (64)", "learned_reference", {"models": 64}),
)
#: Peer figures recorded in issue 16 on its 10k-row table (not re-run here).
RECORDED = {"Privacy Meter RMIA (16 references)": 0.247, "ART gb on loss": 0.246}


@dataclass
class Audit:
    """The pooled audit rows as the gate orders and splits them."""

    target: Target
    x: np.ndarray
    y: np.ndarray
    membership: np.ndarray
    calibration: np.ndarray
    population: Dataset | None
    recipe: object
    seed: int

    def context(
        self, cache: str, threads: int, options: dict | None = None, ensembles: dict | None = None
    ) -> AttackContext:
        """An attack's context on these rows, as the gate builds it (``ensembles``: reference models shared
        by the attacks of one run)."""
        run = RunOptions(seed=self.seed, cache_dir=cache, threads=threads)
        return AttackContext(
            target=self.target,
            x=self.x,
            y=self.y,
            population=self.population,
            recipe=self.recipe,
            options=dict(options or {}),
            run=run,
            ensembles={} if ensembles is None else ensembles,
        )


def _load(example: str):  # noqa: ANN202
    folder = ROOT / "examples" / example
    sys.path.insert(0, str(folder))
    mods = {}
    for name in ("data", "recipe"):
        spec = importlib.util.spec_from_file_location(f"_peers_{example}_{name}", folder / f"{name}.py")
        mod = importlib.util.module_from_spec(spec)
        assert spec.loader is not None
        spec.loader.exec_module(mod)
        mods[name] = mod
    return folder, mods["data"], mods["recipe"].RECIPE


def prepare(example: str, seed: int) -> Audit:
    from privgate.gate import audit_rows

    folder, data, recipe = _load(example)
    audit = AuditData(*(Dataset(*f()) for f in (data.members, data.nonmembers, data.population)), seed=seed)
    r = audit_rows(audit, seed)
    target = Target.load(folder / "model.pt", recipe=recipe)
    return Audit(target, r.x, r.y, r.membership, r.calibration, audit.population, recipe, seed)


@dataclass
class Row:
    name: str
    scores: np.ndarray
    seconds: float
    note: str = ""


def run_privgate(a: Audit, cache: str, threads: int) -> list[Row]:
    from privgate.gate import final_scores
    from privgate.threads import limit_threads

    rows = []
    for label, name, options in PRIVGATE:
        ctx = a.context(cache, threads, options)
        t0 = time.perf_counter()
        with limit_threads(threads):
            result = get_attack(name)(**options).run(ctx)
            scores = final_scores(result, a.calibration, a.membership)
        rows.append(
            Row(
                label,
                scores,
                time.perf_counter() - t0,
                f"{result.models_trained} trained" if result.models_trained else "",
            )
        )
        print(f"  ran {label} ({rows[-1].seconds:.0f} s)", flush=True)
    return rows


def run_art(a: Audit, kinds: tuple[str, ...], threads: int) -> list[Row]:
    """ART's MembershipInferenceBlackBox, cross-fitted on the calibration split like privgate's learned attack."""
    import torch
    from art.attacks.inference.membership_inference import MembershipInferenceBlackBox
    from art.estimators.classification import PyTorchClassifier

    from privgate.threads import limit_threads

    module = a.target.module
    classes = int(a.target.predict_proba(a.x[:2]).shape[1])
    clf = PyTorchClassifier(
        model=module, loss=torch.nn.CrossEntropyLoss(), input_shape=a.x.shape[1:], nb_classes=classes
    )
    labels = CalibrationLabels.of(a.calibration, a.membership)
    rows = []
    for input_type in ("loss", "prediction"):
        for kind in kinds:

            def fit_score(
                train: np.ndarray,
                train_members: np.ndarray,
                score: np.ndarray,
                input_type: str = input_type,
                kind: str = kind,
            ) -> np.ndarray:
                att = MembershipInferenceBlackBox(clf, input_type=input_type, attack_model_type=kind)
                np.random.seed(a.seed + len(train))  # ART's rf has no random_state: seeded through numpy's global RNG
                torch.manual_seed(a.seed + len(train))
                tin, tout = train[train_members], train[~train_members]
                att.fit(a.x[tin], a.y[tin], a.x[tout], a.y[tout])
                p = np.asarray(att.infer(a.x[score], a.y[score], probabilities=True), dtype=np.float64)
                return p.reshape(len(score), -1)[:, -1]

            t0 = time.perf_counter()
            folds = 2 if kind == "nn" else 5
            with limit_threads(threads):
                scores = cross_fit(labels, fit_score, folds, a.seed)
            rows.append(Row(f"ART {kind} on {input_type}", scores, time.perf_counter() - t0, f"{folds} folds"))
            print(f"  ran {rows[-1].name} ({rows[-1].seconds:.0f} s)", flush=True)
    return rows


def _ci(e: stats.Estimate) -> str:
    if not e.resolvable:
        return "unresolvable"
    return f"{e.value:.3f} [{e.lo:.3f}, {e.hi:.3f}] @{e.details['fpr_achieved']:.4f}"


def table(a: Audit, rows: list[Row]) -> dict[str, float]:
    n_in, n_out = int((~a.calibration & a.membership).sum()), int((~a.calibration & ~a.membership).sum())
    print(
        f"\nevaluation split: {n_in} members, {n_out} non-members "
        "(95 % intervals; @ = FPR achieved on the evaluation split)"
    )
    print(f"| {'attack':<24} | {'AUC':<22} | {'TPR@1%FPR':<32} | {'TPR@0.1%FPR':<32} | eval-ROC TPR@1% | s | note |")
    print(f"|{'-' * 26}|{'-' * 24}|{'-' * 34}|{'-' * 34}|---|---|---|")
    best = {}
    for r in rows:
        sp = stats.SplitScores.from_mask(r.scores, a.membership, a.calibration)
        auc = stats.auc(sp.eval_in, sp.eval_out)
        t1, t01 = stats.tpr_at_fpr(sp, 0.01), stats.tpr_at_fpr(sp, 0.001)
        emp = stats.empirical_tpr_at_fpr(sp.eval_in, sp.eval_out, 0.01)
        best[r.name] = t1.value if t1.resolvable else float("nan")
        print(
            f"| {r.name:<24} | {auc.value:.3f} [{auc.lo:.3f}, {auc.hi:.3f}] | {_ci(t1):<32} | {_ci(t01):<32} | "
            f"{emp:.3f} | "
            f"{r.seconds:.0f} | {r.note} |",
            flush=True,
        )
    return best


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--example", default="survey", choices=["survey", "purchase", "digits"])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--threads",
        type=int,
        default=1,
        help="threads per attack (2 only on an idle machine: OpenMP stalls when oversubscribed)",
    )
    ap.add_argument("--no-nn", action="store_true", help="skip ART's neural-network attack models (minutes each)")
    ap.add_argument("--no-art", action="store_true", help="privgate's attacks only")
    args = ap.parse_args(argv)
    a = prepare(args.example, args.seed)
    print(
        f"=== {args.example}: {int(a.membership.sum())} members, {int((~a.membership).sum())} non-members, "
        f"{len(a.population) if a.population is not None else 0} population; seed {args.seed}",
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="privgate-peers-") as cache:
        rows = run_privgate(a, cache, args.threads)
    peers: list[Row] = []
    if not args.no_art:
        try:
            import art  # noqa: F401
        except ImportError:
            print("IBM ART is not installed (pip install -e '.[bench]'): peers skipped")
        else:
            peers = run_art(a, ("rf", "gb") if args.no_nn else ("rf", "gb", "nn"), args.threads)
    tpr = table(a, rows + peers)
    mine = {r.name: tpr[r.name] for r in rows if np.isfinite(tpr[r.name])}
    theirs = {r.name: tpr[r.name] for r in peers if np.isfinite(tpr[r.name])}
    if mine:
        b = max(mine, key=mine.get)
        print(f"\nprivgate's best at 1 % FPR: {b} {mine[b]:.3f}")
        if theirs:
            p = max(theirs, key=theirs.get)
            print(
                f"best peer at 1 % FPR: {p} {theirs[p]:.3f}; ratio {mine[b] / max(theirs[p], 1e-9):.2f}x (target ≥ 2x)"
            )
            for sig in ("loss", "outputs"):
                ours = tpr.get(f"learned ({sig})")
                art_sig = {
                    k: v for k, v in theirs.items() if k.endswith("on " + ("loss" if sig == "loss" else "prediction"))
                }
                if ours is not None and art_sig:
                    k = max(art_sig, key=art_sig.get)
                    print(f"learned ({sig}) {ours:.3f} vs ART's best on the same signal, {k} {art_sig[k]:.3f}")
    print(
        "ML Privacy Meter RMIA: not installable from the package index (privacy-meter 1.0.1 predates RMIA); "
        "recorded in issue 16 on its 10k-row table: " + ", ".join(f"{k} {v:.3f}" for k, v in RECORDED.items())
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
