"""Queries per second: a model behind a real MLServer on 127.0.0.1 vs the same model file in-process.

A random forest (30 trees) and a logistic regression on digits are saved with joblib, served by MLServer's
scikit-learn runtime (from .venv-serve, built by `make install`) and queried through privgate's endpoint target
(Open Inference Protocol v2 over HTTP/JSON) at several batch sizes and concurrencies; the same files are scored
in-process through Target.load(..., trust_checkpoint=True). Rows are distinct (the endpoint answers a repeated
row from memory), every configuration is timed in this one run, and the ratio printed is in-process rows/s over
endpoint rows/s. Threads: 1 (OMP_NUM_THREADS=1 for both processes).

    OMP_NUM_THREADS=1 nice -n 10 .venv/bin/python benchmarks/serving/endpoint_throughput.py [--rows 20000]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=20000)
    args = parser.parse_args()

    import joblib
    from servers.mlserver import SERVE_BIN, mlserver
    from sklearn.datasets import load_digits
    from sklearn.ensemble import RandomForestClassifier
    from sklearn.linear_model import LogisticRegression

    from privgate.inputs.target import Target
    from privgate.inputs.targets.endpoint import Access

    if not SERVE_BIN.exists():
        print(f"{SERVE_BIN} is missing: run `make install` first")
        return 2
    x, y = load_digits(return_X_y=True)
    x = x / 16
    rng = np.random.default_rng(0)
    rows = x[rng.integers(0, len(x), args.rows)] + rng.normal(0, 1e-3, (args.rows, x.shape[1]))  # distinct rows
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        models = {
            "forest": RandomForestClassifier(30, random_state=0).fit(x, y),
            "logistic": LogisticRegression(max_iter=2000).fit(x, y),
        }
        for name, model in models.items():
            joblib.dump(model, d / f"{name}.joblib")
        with mlserver(d / "repo", {name: d / f"{name}.joblib" for name in models}) as base:
            print(f"{args.rows} distinct digits rows, 64 features, 10 classes; MLServer 1.7.1 on 127.0.0.1")
            print(f"{'model':9} {'where':28} {'rows/s':>9} {'in-process / endpoint':>22}")
            for name in models:
                local = Target.load(d / f"{name}.joblib", trust_checkpoint=True)
                local.predict_proba(rows[:10])
                t0 = time.perf_counter()
                p_local = local.predict_proba(rows)
                local_rate = args.rows / (time.perf_counter() - t0)
                print(f"{name:9} {'in-process (joblib file)':28} {local_rate:9.0f} {'1.00':>22}")
                for batch, concurrency in ((64, 1), (256, 1), (256, 4), (1024, 4)):
                    target = Target.load(
                        f"{base}/v2/models/{name}", access=Access(batch=batch, concurrency=concurrency)
                    )
                    target.predict_proba(rows[:1] + 1.0)  # settles the output (predict_proba), not timed
                    t0 = time.perf_counter()
                    p_ep = target.predict_proba(rows)
                    rate = args.rows / (time.perf_counter() - t0)
                    assert np.allclose(p_ep, p_local, atol=1e-12), "the endpoint answers other numbers"
                    where = f"endpoint batch {batch}, conc. {concurrency}"
                    print(f"{name:9} {where:28} {rate:9.0f} {local_rate / rate:22.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
