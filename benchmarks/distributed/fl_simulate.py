"""`privgate fl simulate` at the issue's size: 10 nodes × 10 rounds × three topologies on digits.

Prints the wall time of the whole simulation (training every node every round,
then every node attacking every node's data after every round with seed 004's
five metric attacks, all metrics in every round), and the stacked-vs-sequential
training ratio measured in this run on the same federation (ring): the N node
models trained together on the vectorised engine against one
``train_model`` call per node per round. Also prints the final-round summary
per topology. One thread (PRIVGATE_THREADS to change).

    .venv/bin/python benchmarks/distributed/fl_simulate.py [--local-epochs 5]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np
from sklearn.datasets import load_digits
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from privgate.audits.federated.run import Settings, simulate, split_data  # noqa: E402
from privgate.audits.federated.simulate import train_federation  # noqa: E402
from privgate.audits.federated.topology import parse_topology  # noqa: E402
from privgate.inputs.data import Dataset  # noqa: E402
from privgate.options import RunOptions  # noqa: E402
from privgate.recipe import Recipe  # noqa: E402


def make_model() -> nn.Module:
    return nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 10))


RECIPE = Recipe(model_factory=make_model, epochs=1, batch_size=16, lr=3e-3, name="digits-fl")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--local-epochs", type=int, default=5)
    args = ap.parse_args()
    threads = int(os.environ.get("PRIVGATE_THREADS", "1"))
    d = load_digits()
    data = Dataset((d.data / 16.0).astype(np.float32), d.target.astype(np.int64), "sklearn digits")
    run = RunOptions(seed=0, threads=threads, cache_dir="off")
    t0 = time.perf_counter()
    out = simulate(
        RECIPE, data, ["fully", "ring", "star"], nodes=args.nodes, rounds=args.rounds, local_epochs=args.local_epochs,
        settings=Settings(), run=run,
    )  # fmt: skip
    total = time.perf_counter() - t0
    print(
        f"fl simulate: {args.nodes} nodes × {args.rounds} rounds × 3 topologies, {args.local_epochs} local epochs, "
        f"5 attacks, {threads} thread(s): {total:.1f} s"
    )
    for t in out.report.topologies:
        s = t.summary
        print(
            f"  {t.topology['name']:>6}: training {t.seconds['training']:.2f} s ({t.training['engine']}, "
            f"{t.training['kernel']}), attacks {t.seconds['attacks']:.1f} s; final AUC self {s['self']:.3f}, "
            f"others {s['others']:.3f}, accuracy {s['mean_accuracy_final']:.3f}"
        )
    split = split_data(data.y, args.nodes, "iid", 0.3, 0.0, 0)
    topo = parse_topology("ring", args.nodes)
    kw = {"rounds": args.rounds, "local_epochs": args.local_epochs, "seed": 0, "threads": threads}
    stacked = train_federation(RECIPE, data.x, data.y, split.shards, topo, **kw)
    seq = train_federation(RECIPE, data.x, data.y, split.shards, topo, engine="sequential", **kw)
    worst = max(
        float((stacked.states[-1][i][k] - seq.states[-1][i][k]).abs().max())
        for i in range(args.nodes)
        for k in stacked.states[-1][i]
    )
    print(
        f"training the ring federation: stacked {stacked.seconds:.2f} s ({stacked.kernel}), sequential "
        f"{seq.seconds:.2f} s: {seq.seconds / stacked.seconds:.1f}× faster stacked; largest parameter difference "
        f"{worst:.1e}"
    )


if __name__ == "__main__":
    main()
