"""A Flower federation on digits whose every round is saved for ``privgate fl audit``.

    python app.py --clients 4 --rounds 3 --out fl-run
    privgate fl audit fl-run/federation.yaml   # the global model, round by round
    privgate fl audit fl-run/updates.yaml      # what each client sent to the server

The ClientApp and ServerApp are ordinary Flower (Message API, ``flwr.simulation``
on Ray); the only privgate line is the strategy: ``AuditedStrategy(FedAvg(), ...)``
wraps FedAvg and declares each client's training data and the shared non-members.
Each client returns its ``partition-id`` in a ConfigRecord so the server knows whose
model a reply carries.
"""

from __future__ import annotations

import os

# Nothing leaves this machine: Flower's telemetry and Ray's usage statistics are on by default.
os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

import argparse  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict  # noqa: E402
from flwr.clientapp import ClientApp  # noqa: E402
from flwr.serverapp import Grid, ServerApp  # noqa: E402
from flwr.serverapp.strategy import FedAvg  # noqa: E402
from flwr.simulation import run_simulation  # noqa: E402
from recipe import RECIPE  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402

from privgate import train_model  # noqa: E402
from privgate.audits.federated.flower import AuditedStrategy  # noqa: E402


def prepare(folder: Path, clients: int, holdout: float = 0.3, seed: int = 0) -> None:
    """Digits shuffled once: ``holdout`` of the rows kept as non-members, the rest dealt to the clients (iid)."""
    d = load_digits()
    x, y = (d.data / 16.0).astype(np.float32), d.target.astype(np.int64)
    order = np.random.default_rng(seed).permutation(len(y))
    held = order[: int(holdout * len(y))]
    folder.mkdir(parents=True, exist_ok=True)
    np.savez(folder / "nonmembers.npz", x=x[held], y=y[held])
    for i, part in enumerate(np.array_split(order[len(held) :], clients)):
        np.savez(folder / f"client{i}.npz", x=x[part], y=y[part])


def client_app(data: Path) -> ClientApp:
    app = ClientApp()

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        torch.set_num_threads(1)
        pid = int(context.node_config["partition-id"])
        rows = np.load(data / f"client{pid}.npz")
        net = RECIPE.build()
        net.load_state_dict(msg.content["arrays"].to_torch_state_dict())
        seed = 1000 * int(msg.content["config"]["server-round"]) + pid
        train_model(RECIPE, rows["x"], rows["y"], seed=seed, model=net)
        content = RecordDict(
            {
                "arrays": ArrayRecord(net.state_dict()),
                "metrics": MetricRecord({"num-examples": len(rows["y"])}),
                "client": ConfigRecord({"partition-id": pid}),  # whose model this is, for privgate
            }
        )
        return Message(content=content, reply_to=msg)

    return app


def server_app(data: Path, out: Path, clients: int, rounds: int) -> ServerApp:
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        strategy = AuditedStrategy(
            FedAvg(fraction_evaluate=0.0, min_train_nodes=clients, min_available_nodes=clients),
            out,
            clients={i: data / f"client{i}.npz" for i in range(clients)},
            nonmembers=data / "nonmembers.npz",
            recipe="recipe:RECIPE",
            name="flower-digits",
            overwrite=True,
        )
        torch.manual_seed(0)
        strategy.start(grid=grid, initial_arrays=ArrayRecord(RECIPE.build().state_dict()), num_rounds=rounds)

    return app


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--holdout", type=float, default=0.3, help="fraction of digits kept as non-members")
    ap.add_argument("--out", default="fl-run")
    ap.add_argument("--cpus", type=int, default=2, help="CPUs of the local Ray: Flower runs one client actor per CPU")
    args = ap.parse_args()
    out = Path(args.out).resolve()
    data = out.parent / f"{out.name}-data"
    prepare(data, args.clients, args.holdout)
    t0 = time.perf_counter()
    run_simulation(
        server_app=server_app(data, out, args.clients, args.rounds),
        client_app=client_app(data),
        num_supernodes=args.clients,
        backend_config={
            "client_resources": {"num_cpus": 1, "num_gpus": 0.0},
            # a simulation has no use for Ray's dashboard: not starting it saves its processes (≈ 2 s of start-up)
            "init_args": {"num_cpus": args.cpus, "include_dashboard": False},
        },
    )
    print(f"Flower simulation: {args.clients} clients x {args.rounds} rounds in {time.perf_counter() - t0:.1f} s")
    print(f"saved: {args.out}/federation.yaml (global model), {args.out}/updates.yaml (client updates)")
    print(f"next:  privgate fl audit {args.out}/federation.yaml")


if __name__ == "__main__":
    main()
