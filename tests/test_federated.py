"""Federated audits (issue 14): seed 004's findings with numbers, the engine, the manifest audit and its gate.

``privgate fl simulate`` and ``privgate fl audit`` run in a subprocess where their exit codes, files and output are
the point; the passing gate on the saved federation is decided in process (``privgate.api.audit_federation``, the
CLI's report, see ``test_front_door.py``), its console view rendered as the CLI prints it.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import inproc
import numpy as np
import pytest
import torch
from cases import run_cli
from sklearn.datasets import load_digits
from torch import nn

from privgate import Dataset, Recipe, RunOptions, stats, train_model
from privgate.audits.federated.run import Settings, simulate
from privgate.audits.federated.simulate import train_federation
from privgate.audits.federated.split import Distribution, matched_nonmembers, shards
from privgate.audits.federated.topology import mixing_matrix, parse_topology

RECIPE_SOURCE = textwrap.dedent(
    """
    from torch import nn
    from privgate.recipe import Recipe

    def make_model():
        return nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 10))

    RECIPE = Recipe(model_factory=make_model, epochs=1, batch_size=16, lr=3e-3, name="digits-fl")
    """
)
DATA_SOURCE = textwrap.dedent(
    """
    import numpy as np
    from sklearn.datasets import load_digits

    def digits():
        d = load_digits()
        return (d.data / 16.0).astype(np.float32), d.target.astype(np.int64)
    """
)


def _make() -> nn.Module:
    return nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 10))


RECIPE = Recipe(model_factory=_make, epochs=1, batch_size=16, lr=3e-3, name="digits-fl")


def _digits() -> Dataset:
    d = load_digits()
    return Dataset((d.data / 16.0).astype(np.float32), d.target.astype(np.int64))


@pytest.fixture(scope="module")
def findings():
    """8 nodes × 3 rounds × 20 local epochs on digits, four topologies on one split (a few seconds; 5 rounds kept
    the same margins, docs/federated.md)."""
    out = simulate(
        RECIPE, _digits(), ["none", "fully", "ring", "star"], nodes=8, rounds=3, local_epochs=20,
        settings=Settings(attacks=("loss", "correctness"), every_round=False), run=RunOptions(cache_dir="off"),
    )  # fmt: skip
    return {t.topology["name"]: t for t in out.report.topologies}


def _final_auc(t, attack: str = "loss") -> np.ndarray:
    return next(a for a in t.attacks if a.name == attack).auc.final()


def _paired(diffs: np.ndarray) -> tuple[float, float]:
    """Mean of paired differences and its standard error."""
    return float(diffs.mean()), float(diffs.std(ddof=1) / np.sqrt(len(diffs)))


def test_federation_lowers_self_attack_auc(findings):
    none_self = np.diag(_final_auc(findings["none"])).mean()
    fully_self = np.diag(_final_auc(findings["fully"])).mean()
    print(f"self-attack AUC: none {none_self:.3f}, fully {fully_self:.3f}")
    assert none_self > fully_self + 0.05
    assert none_self > 0.58  # local models memorise their shard
    assert findings["none"].summary["self"] > findings["fully"].summary["self"]


def test_fully_connected_every_attacker_infers_all_victims_equally(findings):
    m = _final_auc(findings["fully"])
    assert np.abs(m - m[0]).max() < 1e-9  # every node holds the same model after averaging
    off = ~np.eye(len(m), dtype=bool)
    gap = np.diag(m).mean() - m[off].mean()
    print(f"fully: self {np.diag(m).mean():.4f}, others {m[off].mean():.4f}")
    assert abs(gap) < 0.02
    self_ci = next(a for a in findings["fully"].attacks if a.name == "loss").auc.ci[-1]
    assert all(lo <= 0.5 + 0.2 and hi >= 0.5 - 0.2 for lo, hi in (c for row in self_ci for c in row))


def test_ring_ladder_self_over_neighbours_over_distant(findings):
    m = _final_auc(findings["ring"])
    hops = parse_topology("ring", 8).hops()
    n = len(m)
    own = np.diag(m)
    near = np.array([m[hops[:, v] == 1, v].mean() for v in range(n)])
    far = np.array([m[hops[:, v] >= 2, v].mean() for v in range(n)])
    d1, se1 = _paired(own - near)
    d2, se2 = _paired(near - far)
    print(f"ring: self−neighbours {d1:.4f} ± {se1:.4f}, neighbours−distant {d2:.4f} ± {se2:.4f}")
    assert d1 > 2 * se1 and d1 > 0
    assert d2 > 2 * se2 and d2 > 0.005


def test_star_hub_differs_and_leaves_infer_themselves_and_the_hub(findings):
    m = _final_auc(findings["star"])
    # each victim's own difficulty removed: the same rows attacked by the fully connected federation's model
    centred = m - _final_auc(findings["fully"])[0][None, :]
    leaves = range(1, len(m))
    self_gap = np.array([centred[i, i] - np.mean([centred[i, j] for j in leaves if j != i]) for i in leaves])
    hub_gap = np.array([centred[i, 0] - np.mean([centred[i, j] for j in leaves if j != i]) for i in leaves])
    s, s_se = _paired(self_gap)
    h, h_se = _paired(hub_gap)
    # the hub infers a leaf less than that leaf infers itself
    hub_vs_leaf = np.array([m[j, j] - m[0, j] for j in leaves])
    d, d_se = _paired(hub_vs_leaf)
    print(f"star: leaf self−other {s:.4f} ± {s_se:.4f}, hub−other {h:.4f} ± {h_se:.4f}, leaf−hub {d:.4f} ± {d_se:.4f}")
    assert s > 2 * s_se and h > 2 * h_se
    assert d > 2 * d_se
    star = findings["star"].summary["star"]
    assert star["leaf_on_hub"] > star["leaf_on_other_leaves"]


def test_stacked_and_sequential_training_agree():
    ds = _digits()
    sh = shards(ds.y[:600], 3, Distribution("iid"), 0)
    topo = parse_topology("ring", 3)
    a = train_federation(RECIPE, ds.x, ds.y, sh, topo, rounds=2, local_epochs=2, seed=1)
    b = train_federation(RECIPE, ds.x, ds.y, sh, topo, rounds=2, local_epochs=2, seed=1, engine="sequential")
    assert (a.mode, a.kernel, b.mode, b.kernel) == ("vectorised", "mlp", "sequential", "loop")
    worst = max(float((a.states[r][i][k] - b.states[r][i][k]).abs().max()) for r in range(2) for i in range(3)
                for k in a.states[r][i])  # fmt: skip
    assert worst < 1e-4
    # and they differ from another seed by far more: the comparison can fail
    c = train_federation(RECIPE, ds.x, ds.y, sh, topo, rounds=2, local_epochs=2, seed=2)
    assert float((a.states[1][0]["0.weight"] - c.states[1][0]["0.weight"]).abs().max()) > 1e-2


def test_mixing_matrix_is_sample_weighted_fedavg():
    star = parse_topology("star", 4)
    w = mixing_matrix(star, [10, 30, 20, 40])
    assert np.allclose(w.sum(axis=1), 1.0)
    assert np.allclose(w[0], [0.1, 0.3, 0.2, 0.4])  # the hub averages everyone
    assert np.allclose(w[1], [0.25, 0.75, 0, 0])  # a leaf averages with the hub only
    assert np.allclose(mixing_matrix(parse_topology("none", 3), [1, 2, 3]), np.eye(3))
    ring = parse_topology("ring", 6)
    assert ring.hops()[0].tolist() == [0, 1, 2, 3, 2, 1]


def test_dirichlet_shards_are_skewed_and_nonmembers_matched():
    y = _digits().y
    parts = shards(y, 5, Distribution("dirichlet", 0.1), 0)
    assert sorted(np.concatenate(parts).tolist()) == list(range(len(y)))
    top_share = [np.bincount(y[p], minlength=10).max() / len(p) for p in parts]
    iid = [np.bincount(y[p], minlength=10).max() / len(p) for p in shards(y, 5, Distribution("iid"), 0)]
    assert np.mean(top_share) > 0.3 > 0.15 > np.mean(iid)  # α = 0.1: a few dominant classes per node
    pick = matched_nonmembers(y[parts[0]], y, 0)
    want = np.bincount(y[parts[0]], minlength=10) / len(parts[0])
    got = np.bincount(y[pick], minlength=10) / len(pick)
    assert np.abs(want - got).max() < 0.02


def test_precision_recall_f1_at_guessing_and_the_formula():
    rng = np.random.default_rng(0)
    covered = 0
    for _ in range(100):
        sp = stats.SplitScores(*(rng.normal(0, 1, 200) for _ in range(4)))  # members look like non-members
        est = stats.precision_recall_f1(sp, 0.9)
        p = est["precision"]
        covered += p.resolvable and p.lo <= 0.5 <= p.hi
        r, f = est["recall"].value, est["f1"].value
        if p.resolvable:
            assert f == pytest.approx(2 * p.value * r / (p.value + r))
    assert covered >= 88  # 90 % intervals around the guessing precision 0.5


def _write_case(d: Path) -> None:
    (d / "fedrecipe.py").write_text(RECIPE_SOURCE)
    (d / "feddata.py").write_text(DATA_SOURCE)


def test_cli_simulate_save_then_audit_and_gate(tmp_path, monkeypatch):
    _write_case(tmp_path)
    sim = run_cli(
        "fl", "simulate", "--recipe", "fedrecipe:RECIPE", "--data", "feddata:digits", "--nodes", "8", "--rounds", "2",
        "--local-epochs", "40", "--topology", "none", "--topology", "ring", "--attacks", "loss,correctness",
        "--json", "sim.json", "--html", "sim.html", "--save", "saved", cwd=tmp_path,
    )  # fmt: skip
    assert sim.returncode == 0, sim.stderr
    report = json.loads((tmp_path / "sim.json").read_text())
    assert report["schema_version"] == 1 and report["kind"] == "simulation"
    none, ring = report["topologies"]
    assert (none["topology"]["name"], none["nodes"], none["rounds"]) == ("none", 8, 2)
    assert np.asarray(none["mia"]["values"]).shape == (2, 8, 8)
    assert np.asarray(none["accuracy"]["values"]).shape == (2, 8)
    assert ring["edges"] == [[0, 1], [0, 7], [1, 2], [2, 3], [3, 4], [4, 5], [5, 6], [6, 7]]
    html = (tmp_path / "sim.html").read_text()
    assert html.count("class='heat'") == 4 and "class='topology'" in html and "id='comparison'" in html
    assert "none" in sim.stdout and "ring" in sim.stdout

    manifest = tmp_path / "saved" / "none" / "federation.yaml"
    policy = tmp_path / "pol.yaml"
    policy.write_text(
        "name: fl\nsensitivity: confidential\nrelease: model\nconfidence: 0.95\nchecks:\n"
        "  - {id: self-loss, attack: loss, metric: auc, max: 0.5, federated: {pairs: self}}\n"
    )
    audited = run_cli(
        "fl", "audit", str(manifest), "--policy", str(policy), "--attacks", "loss,correctness", "--json", "a.json",
        "--junit", "j.xml", "--sarif", "s.sarif", cwd=tmp_path,
    )  # fmt: skip
    a = json.loads((tmp_path / "a.json").read_text())
    # the audit of the saved checkpoints finds exactly what the simulation measured
    assert np.allclose(
        np.asarray(a["topologies"][0]["mia"]["values"], dtype=float), np.asarray(none["mia"]["values"], dtype=float)
    )
    check = a["checks"][0]
    assert check["status"] == "fail" and audited.returncode == 1, audited.stdout + audited.stderr
    assert check["ci"][0] > 0.5 and check["details"]["bonferroni"]["pairs"] == 8
    assert 'failures="1"' in (tmp_path / "j.xml").read_text()
    sarif = json.loads((tmp_path / "s.sarif").read_text())
    assert sarif["runs"][0]["results"][0]["level"] == "error"

    # a looser bound passes: in process (`fl audit MANIFEST --policy pol.yaml --attacks loss`, from the same folder)
    from privgate import FederationAuditSettings, api

    policy.write_text(policy.read_text().replace("max: 0.5", "max: 0.95"))
    monkeypatch.chdir(tmp_path)  # where the CLI ran: the manifest's recipe is found from there
    passed = api.audit_federation(FederationAuditSettings(manifest=manifest, policy=str(policy), attacks=("loss",)))
    stdout = inproc.console(passed)
    assert passed.exit_code == 0, stdout
    assert "PASS" in stdout
    no_fed = run_cli("fl", "audit", str(manifest), "--policy", "strict", cwd=tmp_path)
    assert no_fed.returncode == 2 and "has no federated check" in no_fed.stderr


def test_cli_bad_inputs_exit_2_with_one_sentence(tmp_path):
    _write_case(tmp_path)
    bad = run_cli(
        "fl", "simulate", "--recipe", "fedrecipe:RECIPE", "--data", "feddata:digits", "--topology", "rnig",
        cwd=tmp_path,
    )  # fmt: skip
    assert bad.returncode == 2 and "unknown topology 'rnig'" in bad.stderr and "ring" in bad.stderr
    assert "Traceback" not in bad.stderr
    (tmp_path / "federation.yaml").write_text(
        "version: 1\nnonmembers: non.npz\nnodes:\n  - name: a\n    data: a.npz\n    checkpoints: [r1.pt]\n"
    )
    np.savez(tmp_path / "a.npz", x=np.zeros((3, 2)), y=np.zeros(3))
    missing = run_cli("fl", "audit", "federation.yaml", cwd=tmp_path)
    assert missing.returncode == 2
    assert (
        "federation.yaml: line 6: nodes[0].checkpoints[0]: checkpoint" in missing.stderr and "r1.pt" in missing.stderr
    )


def test_a_federated_check_is_not_decided_on_one_model():
    from privgate.decision import Level, decide_check
    from privgate.policy import parse_policy

    pol = parse_policy(
        "name: p\nsensitivity: internal\nrelease: api\nchecks:\n"
        "  - {id: x, attack: loss, metric: auc, max: 0.6, federated: {pairs: others}}\n"
    )
    result = decide_check(pol.checks[0], Level.of(pol, pol), {}, {}, set())
    assert result.status == "inconclusive" and "privgate fl audit" in result.reason
    with pytest.raises(Exception, match="federated"):
        parse_policy(
            "name: p\nsensitivity: internal\nrelease: api\nchecks:\n"
            "  - {id: x, attack: loss, metric: epsilon_lb, max: 1, federated: {pairs: others}}\n"
        )


def test_torchscript_checkpoints_need_no_recipe(tmp_path):
    """A manifest written by hand: TorchScript checkpoints, a star given by edges."""
    from privgate.audits.federated.audit import audit_checkpoints
    from privgate.audits.federated.manifest import load_manifest

    ds = _digits()
    torch.manual_seed(0)
    nodes = []
    for i in range(3):
        rows = slice(100 * i, 100 * i + 100)
        np.savez(tmp_path / f"n{i}.npz", x=ds.x[rows], y=ds.y[rows])
        net = train_model(RECIPE, ds.x[rows], ds.y[rows], seed=i)
        torch.jit.save(torch.jit.script(net), str(tmp_path / f"n{i}.pt"))
        nodes.append(f"  - {{name: site{i}, data: n{i}.npz, checkpoints: 'n{i}.pt'}}")
    np.savez(tmp_path / "non.npz", x=ds.x[1000:1400], y=ds.y[1000:1400])
    (tmp_path / "f.yaml").write_text(
        "version: 1\nrounds: 1\nedges: [[0, 1], [0, 2]]\nnonmembers: non.npz\nnodes:\n" + "\n".join(nodes) + "\n"
    )
    out = audit_checkpoints(load_manifest(tmp_path / "f.yaml"), Settings(attacks=("loss",)), RunOptions())
    t = out.report.topologies[0]
    assert t.node_names == ["site0", "site1", "site2"] and t.edges == [[0, 1], [0, 2]]
    m = next(a for a in t.attacks if a.name == "loss").auc.final()
    assert np.diag(m).min() > 0.6  # each site's own model (one epoch of training on 100 rows) knows its data
