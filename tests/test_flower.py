"""Flower (issue 14 C): AuditedStrategy saves every round of a Flower federation for ``privgate fl audit``.

One test runs Flower's own simulation (``flwr.simulation.run_simulation`` on Ray,
``examples/flower/app.py``) and audits what was saved through the CLI; the others
drive the wrapper with Flower's own types (Message, ArrayRecord, FedAvg, a Grid
answered in this process) to reach partial participation, failed rounds and bad
declarations in a second.
"""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from cases import run_cli
from torch import nn

flwr = pytest.importorskip("flwr")

from flwr.app import ArrayRecord, ConfigRecord, Error, Message, MetricRecord, RecordDict  # noqa: E402
from flwr.serverapp import Grid  # noqa: E402
from flwr.serverapp.strategy import FedAvg  # noqa: E402

from privgate import Target  # noqa: E402
from privgate.audits.federated.flower import AuditedStrategy, FlowerAuditError  # noqa: E402
from privgate.audits.federated.manifest import load_manifest  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def _state(path: Path) -> dict[str, torch.Tensor]:
    return torch.load(path, map_location="cpu", weights_only=True)


def test_flower_simulation_saved_then_audited_by_the_cli(tmp_path):
    """Flower's simulation (Ray, 3 clients × 3 rounds) → the saved layout → ``privgate fl audit`` → verdict.

    One CPU, so one Flower actor trains the clients in turn: a second actor would import Flower, torch and
    privgate once more for a federation that trains in a second.
    """
    for f in ("app.py", "recipe.py"):
        shutil.copy(ROOT / "examples" / "flower" / f, tmp_path / f)
    args = ["--clients", "3", "--rounds", "3", "--holdout", "0.85", "--out", "fl-run", "--cpus", "1"]
    sim = subprocess.run(
        [sys.executable, "app.py", *args],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert sim.returncode == 0, sim.stdout[-3000:] + sim.stderr[-3000:]
    assert "saved: fl-run/federation.yaml" in sim.stdout

    fed, upd = (
        load_manifest(tmp_path / "fl-run" / "federation.yaml"),
        load_manifest(tmp_path / "fl-run" / "updates.yaml"),
    )
    assert fed.names == upd.names == ["client-0", "client-1", "client-2"] and fed.rounds == upd.rounds == 3
    assert fed.spec.recipe == "recipe:RECIPE" and fed.spec.topology == "fully"
    assert (fed.spec.name, upd.spec.name) == ("flower-digits", "flower-digits-updates")
    sizes = np.array([len(np.load(p)["y"]) for p in fed.data])
    assert sizes.tolist() == [90, 90, 90]
    for r in range(3):
        # every client holds the round's global model, and it is FedAvg of the updates the clients sent
        assert len({cps[r] for cps in fed.checkpoints}) == 1
        glob = _state(fed.checkpoints[0][r])
        sent = [_state(cps[r]) for cps in upd.checkpoints]
        for k, v in glob.items():
            avg = sum(n * s[k] for n, s in zip(sizes, sent)) / sizes.sum()
            assert torch.allclose(v, avg, atol=1e-6), (r, k)
        assert not torch.equal(sent[0][k], sent[1][k])  # the clients really sent different models

    policy = tmp_path / "gate.yaml"
    policy.write_text(
        "name: flower-gate\nsensitivity: confidential\nrelease: model\nconfidence: 0.95\nchecks:\n"
        "  - {id: global-auc, attack: loss, metric: auc, max: 0.75, federated: {pairs: all}}\n"
    )
    gated = run_cli(
        "fl", "audit", "fl-run/federation.yaml", "--attacks", "loss", "--policy", str(policy), "--json", "global.json",
        cwd=tmp_path,
    )  # fmt: skip
    assert gated.returncode == 0, gated.stdout + gated.stderr
    assert "PASS: 1 checks" in gated.stdout
    g = json.loads((tmp_path / "global.json").read_text())
    t = g["topologies"][0]
    auc = np.asarray(t["mia"]["values"], dtype=float)
    assert auc.shape == (3, 3, 3) and t["victims"][0]["evaluation_members"] == 45
    assert np.all(auc == auc[:, :1, :])  # one global model: every attacker row is the same
    check = g["checks"][0]
    assert check["status"] == "pass" and check["ci"][1] <= 0.75

    updates = run_cli("fl", "audit", "fl-run/updates.yaml", "--attacks", "loss", "--json", "updates.json", cwd=tmp_path)
    assert updates.returncode == 0, updates.stdout + updates.stderr
    final = np.asarray(json.loads((tmp_path / "updates.json").read_text())["topologies"][0]["mia"]["values"])[-1]
    # a client's own update knows its data better than the others' updates do (paired over the 3 attackers)
    diff = np.diag(final) - (final.sum(axis=1) - np.diag(final)) / 2
    assert diff.mean() > 2 * diff.std(ddof=1) / np.sqrt(3), final
    assert not np.allclose(final, final[:1])  # three different models


# ---------------------------------------------------------------- in-process Flower


@pytest.fixture(autouse=True)
def _server_identity(monkeypatch):
    """What a ServerApp process has set when its strategy builds messages (run, node and task ids)."""
    from flwr.supercore.task_identity import TaskIdentity

    for attr, value in (("_run_id", 1), ("_node_id", 0), ("_task_id", 1)):
        monkeypatch.setattr(TaskIdentity, attr, value)


class LocalGrid(Grid):
    """Flower's Grid answered in this process: node ``i`` replies with ``clients[i](message)``."""

    def __init__(self, clients: dict[int, Callable[[Message], Message]]) -> None:
        self.clients = clients

    def set_run(self, run):  # pragma: no cover - not used by Strategy.start
        raise NotImplementedError

    @property
    def run(self):  # pragma: no cover
        raise NotImplementedError

    def create_message(self, *args, **kwargs):  # pragma: no cover
        raise NotImplementedError

    def get_node_ids(self):
        return list(self.clients)

    def push_messages(self, messages):  # pragma: no cover
        raise NotImplementedError

    def pull_messages(self, message_ids):  # pragma: no cover
        raise NotImplementedError

    def send_and_receive(self, messages, *, timeout=None):
        return (self.clients[m.metadata.dst_node_id](m) for m in messages)  # a generator, read once


def _net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 3))


def _client(pid: int, *, named: bool = True, key: str = "partition-id", fail: set[int] = frozenset(), log=None):
    """A client that adds ``pid + 1`` to every array, weighs ``10 (pid + 1)`` rows and says who it is under ``key``."""

    def reply(msg: Message) -> Message:
        rnd = int(msg.content["config"]["server-round"])
        if log is not None:
            log.append((rnd, pid))
        if rnd in fail:
            return Message(Error(code=0, reason="client crashed"), reply_to=msg)
        state = msg.content["arrays"].to_torch_state_dict()
        if named:
            rec = ArrayRecord({k: v + (pid + 1) for k, v in state.items()})
        else:  # Flower's list-of-NumPy style: the keys are "0", "1", …
            rec = ArrayRecord([v.numpy() + (pid + 1) for v in state.values()])
        content = RecordDict(
            {"arrays": rec, "metrics": MetricRecord({"num-examples": 10 * (pid + 1)}), "who": ConfigRecord({key: pid})}
        )
        return Message(content=content, reply_to=msg)

    return reply


def _rows(pid: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(pid)
    return rng.normal(size=(12, 4)).astype(np.float32), rng.integers(0, 3, 12)


def _recipe(tmp_path: Path, monkeypatch) -> str:
    (tmp_path / "flwr_recipe.py").write_text(
        textwrap.dedent(
            """
            from torch import nn
            from privgate.recipe import Recipe

            RECIPE = Recipe(model_factory=lambda: nn.Sequential(nn.Linear(4, 3)), epochs=1, name="tiny")
            """
        )
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    return "flwr_recipe:RECIPE"


def test_partial_participation_nameless_arrays_and_arrays_as_data(tmp_path, monkeypatch):
    recipe = _recipe(tmp_path, monkeypatch)
    random.seed(3)  # FedAvg samples 2 of the 4 clients per round with random.sample
    strategy = AuditedStrategy(
        FedAvg(fraction_train=0.5, fraction_evaluate=0.0, min_available_nodes=4), tmp_path / "run",
        clients=_rows, nonmembers=_rows(99), recipe=recipe,
    )  # fmt: skip
    assert strategy.fraction_train == 0.5  # the wrapped strategy's attributes read through
    sampled: list[tuple[int, int]] = []
    grid = LocalGrid({100 + i: _client(i, named=False, log=sampled) for i in range(4)})
    result = strategy.start(grid=grid, initial_arrays=ArrayRecord(_net().state_dict()), num_rounds=3)
    assert len(sampled) == 6 and len({pid for _, pid in sampled}) > 2  # some client missed a round

    run = tmp_path / "run"
    upd, fed = load_manifest(run / "updates.yaml"), load_manifest(run / "federation.yaml")
    assert upd.rounds == fed.rounds == 3 and sorted(upd.names) == sorted({f"client-{p}" for _, p in sampled})
    text = (run / "updates.yaml").read_text()
    starts = [run / "rounds" / "r00" / "global.pt", *fed.checkpoints[0][:2]]  # the model sent at each round's start
    missed = 0
    for i, (name, cps, data) in enumerate(zip(upd.names, upd.checkpoints, upd.data)):
        pid = int(name.split("-")[1])
        saved = np.load(data)
        assert np.array_equal(saved["x"], _rows(pid)[0]) and np.array_equal(saved["y"], _rows(pid)[1])
        for r, cp in enumerate(cps, start=1):
            state = _state(cp)
            assert list(state) == ["0.weight", "0.bias"]  # nameless arrays matched to the model by order
            if (r, pid) in sampled:
                assert cp == run / "rounds" / f"r{r:02d}" / f"node{i}.pt"
                assert torch.allclose(state["0.weight"], _state(starts[r - 1])["0.weight"] + pid + 1)
            else:  # its last model, or before its first reply the global model it would have started from
                sent_before = any(p == pid and rr < r for rr, p in sampled)
                assert cp == (cps[r - 2] if sent_before else starts[r - 1])
                assert f"{name} in round {r}" in text
                missed += 1
    assert missed == len(upd.names) * 3 - 6  # clients never heard from are unknown to a callable clients=
    final = _state(fed.checkpoints[0][-1])
    assert torch.allclose(final["0.bias"], torch.from_numpy(result.arrays.to_numpy_ndarrays()[1]))


def test_torchscript_checkpoints_and_a_round_without_aggregate(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    np.savez(tmp_path / "c0.npz", x=_rows(0)[0], y=_rows(0)[1])
    np.savez(tmp_path / "c1.npz", x=_rows(1)[0], y=_rows(1)[1])
    np.savez(tmp_path / "non.npz", x=_rows(9)[0], y=_rows(9)[1])
    strategy = AuditedStrategy(
        FedAvg(fraction_evaluate=0.0), "out", clients={0: "c0.npz", 1: "c1.npz"}, nonmembers="non.npz",
        model=_net(), client_key=lambda m: m.metadata.src_node_id - 100,
    )  # fmt: skip
    grid = LocalGrid({100: _client(0, fail={2}), 101: _client(1, fail={2})})
    strategy.start(grid=grid, initial_arrays=ArrayRecord(_net().state_dict()), num_rounds=3)

    fed = load_manifest(tmp_path / "out" / "federation.yaml")
    assert fed.spec.recipe is None and [p.resolve() for p in fed.data] == [tmp_path / "c0.npz", tmp_path / "c1.npz"]
    g1, g2, g3 = fed.checkpoints[0]
    assert g2 == g1 and g3.parent.name == "r03"  # round 2: every client failed, the global model is unchanged
    assert "no model in round(s) [2]" in (tmp_path / "out" / "federation.yaml").read_text()
    target = Target.load(g3)
    assert target.fmt == "torchscript"
    x = torch.from_numpy(_rows(0)[0])
    net = _net()
    net.load_state_dict(_state_of(g1))
    w = net[0].weight.detach() + (10 * 1 + 20 * 2) / 30  # FedAvg of +1 (10 rows) and +2 (20 rows), once more
    b = net[0].bias.detach() + (10 * 1 + 20 * 2) / 30
    assert torch.allclose(target.model(x), x @ w.T + b, atol=1e-5)
    upd = (tmp_path / "out" / "updates.yaml").read_text()
    assert "client-0 in round 2, client-1 in round 2" in upd


def _state_of(torchscript: Path) -> dict[str, torch.Tensor]:
    return Target.load(torchscript).model.state_dict()


def test_bad_declarations_fail_with_one_sentence_and_leave_the_saved_rounds_whole(tmp_path, monkeypatch):
    recipe = _recipe(tmp_path, monkeypatch)
    init = ArrayRecord(_net().state_dict())

    def run(clients, grid, rounds=2, **kw):
        s = AuditedStrategy(
            FedAvg(fraction_evaluate=0.0), tmp_path / "bad", clients=clients, nonmembers=_rows(9), recipe=recipe,
            overwrite=True, **kw,
        )  # fmt: skip
        return s.start(grid=grid, initial_arrays=init, num_rounds=rounds)

    with pytest.raises(FlowerAuditError, match=r"client 2 sent a model but has no training data in clients="):
        run({0: _rows(0), 1: _rows(1)}, LocalGrid({100: _client(0), 101: _client(2)}))
    with pytest.raises(FlowerAuditError, match=r"has no 'partition-id' in its ConfigRecord or MetricRecord"):
        run(_rows, LocalGrid({100: _client(0, key="pid"), 101: _client(1, key="pid")}))

    calls = {"n": 0}

    def shrinking(msg: Message) -> Message:  # round 2 sends an array of the wrong shape
        calls["n"] += 1
        reply = _client(1)(msg)
        if calls["n"] == 2:
            reply.content["arrays"] = ArrayRecord({"0.weight": torch.zeros(3, 5), "0.bias": torch.zeros(3)})
        return reply

    with pytest.raises(FlowerAuditError, match=r"round 2: client 1's model: array '0.weight' has shape \(3, 5\)"):
        run(_rows, LocalGrid({100: _client(0), 101: shrinking}), rounds=3)
    saved = load_manifest(tmp_path / "bad" / "updates.yaml")
    assert saved.rounds == 1  # round 1 was written whole; round 2 wrote nothing

    def renamed(msg: Message) -> Message:
        reply = _client(0)(msg)
        reply.content["arrays"] = ArrayRecord({"fc.weight": torch.zeros(3, 4), "fc.bias": torch.zeros(3)})
        return reply

    with pytest.raises(FlowerAuditError, match=r"arrays fc.weight, fc.bias do not match the model's 2 tensors"):
        run(_rows, LocalGrid({100: renamed, 101: _client(1)}))

    with pytest.raises(FlowerAuditError, match="already holds a federation"):
        AuditedStrategy(FedAvg(), tmp_path / "bad", clients=_rows, nonmembers=_rows(9), recipe=recipe)
    with pytest.raises(FlowerAuditError, match="exactly one"):
        AuditedStrategy(FedAvg(), tmp_path / "new", clients=_rows, nonmembers=_rows(9))
    with pytest.raises(FlowerAuditError, match="non-members file not found"):
        AuditedStrategy(FedAvg(), tmp_path / "new", clients=_rows, nonmembers="nowhere.npz", recipe=recipe)
