"""Peak memory and time of ``privgate check`` as the number of audit rows grows: 100k, 1M, 2M rows × 20 features.

    python benchmarks/engine/rows_memory.py                    # 100k, 1M and 2M audit rows
    python benchmarks/engine/rows_memory.py --rows 100000      # one size
    python benchmarks/engine/rows_memory.py --models 8         # more reference models

For each size, in a scratch folder:

1. a fresh subprocess draws the data from a seed — ``x ~ N(0, 1)`` with 20
   features, the label from a random teacher MLP 20 → 16 → 10 (argmax of its
   logits plus Gumbel noise, 10 classes) — and trains the target, an MLP
   20 → 32 → 10 (ReLU, Adam, one epoch, batch 1024), on the members; members
   and non-members are half the audit rows each, the population 5,000 more rows;
2. another fresh subprocess runs ``privgate check`` on those files, as a user
   would (the CLI in-process, ``--cache-dir off``, one thread), with a policy of
   the default black-box family (loss, confidence, entropy, modified entropy,
   true-class confidence, correctness) plus LiRA and RMIA with ``--models``
   reference models each, and an AUC and a TPR-at-1 %-FPR check, and reports its
   own peak resident set size (``getrusage``: the high-water mark of the whole
   process, torch and the data files included) and its wall time.

Each check runs in its own process, so one size's peak cannot hide another's.
The reference models train on the audit rows (half of them each), so their
training time grows with the rows; their parameters do not.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SIZES = (100_000, 1_000_000, 2_000_000)
FEATURES = 20
CLASSES = 10
POPULATION = 5_000
TARGET_GB = 2.0

RECIPE = textwrap.dedent(
    f"""
    from torch import nn
    from privgate.recipe import Recipe

    def make_model():
        return nn.Sequential(nn.Linear({FEATURES}, 32), nn.ReLU(), nn.Linear(32, {CLASSES}))

    RECIPE = Recipe(model_factory=make_model, epochs=1, batch_size=1024, lr=3e-3, name="rows-mlp")
    """
)

POLICY = textwrap.dedent(
    """
    name: rows-memory
    sensitivity: internal
    release: api
    confidence: 0.95
    attacks:
      loss: {}
      confidence: {}
      entropy: {}
      modified_entropy: {class_dependent: true}
      true_class_confidence: {class_dependent: true}
      correctness: {}
      lira: {models: MODELS}
      rmia: {models: MODELS}
    checks:
      - {id: auc, attack: best, metric: auc, max: 0.9}
      - {id: tpr, attack: best, metric: tpr_at_fpr, fpr: 0.01, max: 0.5}
    """
)

# Runs in a fresh interpreter: draw the data, train the target, write the files.
MAKE = textwrap.dedent(
    f"""
    import sys
    import numpy as np
    import torch
    sys.path.insert(0, ".")
    from recipe import RECIPE

    rows, seed = int(sys.argv[1]), int(sys.argv[2])
    rng = np.random.default_rng(seed)
    total = rows + {POPULATION}
    x = rng.standard_normal((total, {FEATURES}), dtype=np.float32)
    w1 = rng.standard_normal(({FEATURES}, 16)).astype(np.float32)
    w2 = rng.standard_normal((16, {CLASSES})).astype(np.float32)
    logits = np.tanh(x @ w1) @ w2
    y = (logits + rng.gumbel(size=logits.shape).astype(np.float32)).argmax(axis=1).astype(np.int64)
    half = rows // 2
    parts = {{"members": slice(0, half), "nonmembers": slice(half, rows), "population": slice(rows, total)}}
    for name, sl in parts.items():
        np.savez(name + ".npz", x=x[sl], y=y[sl])
    torch.set_num_threads(1)
    net = train_model(RECIPE, x[:half], y[:half], seed=seed)
    torch.save(net.state_dict(), "model.pt")
    """
)

# Runs in a fresh interpreter: the CLI in-process, then this process's own peak RSS.
CHECK = textwrap.dedent(
    """
    import json, resource, sys, time
    from privgate.cli import cli

    t0 = time.perf_counter()
    args = ["check", "model.pt", "--policy", "policy.yaml", "--recipe", "recipe:RECIPE",
            "--members", "members.npz", "--nonmembers", "nonmembers.npz", "--population", "population.npz",
            "--cache-dir", "off", "--threads", "1", "--device", "cpu", "--json", "report.json", "-q",
            "--no-step-summary"]
    try:
        cli.main(args, prog_name="privgate", standalone_mode=False)
        code = 0
    except SystemExit as exc:
        code = exc.code
    seconds = time.perf_counter() - t0
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # kilobytes on Linux
    print(json.dumps({"exit": code, "seconds": seconds, "peak_mb": peak_kb / 1024}))
    """
)


def run_size(rows: int, models: int, seed: int, keep: Path | None) -> dict:
    with tempfile.TemporaryDirectory(prefix=f"privgate-rows-{rows}-") as tmp:
        work = Path(tmp)
        (work / "recipe.py").write_text(RECIPE)
        (work / "policy.yaml").write_text(POLICY.replace("MODELS", str(models)))
        env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        env.pop("PRIVGATE_CACHE_DIR", None)
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", MAKE, str(rows), str(seed)], cwd=work, env=env, check=True)
        made = time.perf_counter() - t0
        out = subprocess.run([sys.executable, "-c", CHECK], cwd=work, env=env, capture_output=True, text=True)
        if out.returncode or not (work / "report.json").exists():
            raise RuntimeError(f"privgate check on {rows} rows failed:\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}")
        result = json.loads(out.stdout.strip().splitlines()[-1])
        report = json.loads((work / "report.json").read_text())
        result["make_seconds"] = made
        result["verdict"] = report["verdict"]
        result["auc"] = {a["name"]: a.get("auc") for a in report["attacks"] if a.get("status") == "ran"}
        result["n_eval"] = next(
            (a["n_members"] + a["n_nonmembers"] for a in report["attacks"] if a.get("status") == "ran"), None
        )
        if keep is not None:
            keep.mkdir(parents=True, exist_ok=True)
            (keep / f"report-{rows}.json").write_text(json.dumps(report, indent=1))
        return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, nargs="*", default=list(SIZES), help="audit rows (members + non-members)")
    ap.add_argument("--models", type=int, default=4, help="reference models of LiRA and of RMIA (default 4)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--keep", type=Path, default=None, help="copy each run's JSON report into this folder")
    args = ap.parse_args()
    print(
        f"privgate check on N audit rows x {FEATURES} features ({CLASSES} classes), default black-box attacks + "
        f"LiRA and RMIA with {args.models} reference models each; one thread; each size in a fresh process",
        flush=True,
    )
    print(f"{'rows':>10}  {'peak RSS':>10}  {'check time':>10}  {'verdict':>12}  best AUC", flush=True)
    results = {}
    for rows in args.rows:
        r = run_size(rows, args.models, args.seed, args.keep)
        results[rows] = r
        best = max((v for v in r["auc"].values() if v is not None), default=float("nan"))
        print(
            f"{rows:>10,}  {r['peak_mb'] / 1024:>8.2f} GB  {r['seconds']:>8.1f} s  {r['verdict']:>12}  {best:.4f}",
            flush=True,
        )
    if len(results) > 1:
        lo, hi = min(results), max(results)
        grow = results[hi]["peak_mb"] / results[lo]["peak_mb"]
        print(f"peak RSS at {hi:,} rows / at {lo:,} rows: {grow:.2f}x for {hi / lo:.0f}x the rows")
    for rows, r in results.items():
        if rows >= 2_000_000:
            ok = r["peak_mb"] / 1024 < TARGET_GB
            verdict = "met" if ok else "MISSED"
            print(f"{rows:,} rows: peak {r['peak_mb'] / 1024:.2f} GB, target < {TARGET_GB:g} GB: {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
