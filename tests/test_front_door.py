"""One front door: every job through ``privgate.api``, every report of one family, in every format.

For each job the CLI (a subprocess, as a user runs it) and the Python API, given
the same inputs and seed, return the same report; the claim audits and the
federated audit write JUnit and SARIF that parse back; the output flags of every
command are the format registry's; a federated ``attack: best`` check decides
over every attack that ran.
"""

from __future__ import annotations

import hashlib
import json
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import inproc
import numpy as np
import pytest
from cases import run_cli, stable
from test_federated import DATA_SOURCE as FL_DATA
from test_federated import RECIPE_SOURCE as FL_RECIPE

#: What differs between two runs of the same job: clocks and the host; and where each door took its threads and
#: device from (the CLI: a flag or a variable; the API: its defaults): the report says so, the numbers are the same.
VOLATILE = {"started", "duration_s", "seconds", "game_seconds", "training_seconds", "trials_per_second",
            "audit_seconds", "calibration_seconds", "platform", "hostname", "image",
            "threads_reason", "device_requested", "device_reason"}  # fmt: skip


def _stable(value: Any, also: frozenset[str] = frozenset()) -> Any:
    return stable(value, VOLATILE | also)


def _differences(a: Any, b: Any, where: str = "") -> list[str]:
    """The paths at which two parsed reports differ (for a readable failure)."""
    if isinstance(a, dict) and isinstance(b, dict):
        keys = sorted(set(a) | set(b))
        return [d for k in keys for d in _differences(a.get(k), b.get(k), f"{where}.{k}")]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in _differences(x, y, f"{where}[{i}]")]
    return [] if a == b else [f"{where}: {a!r} != {b!r}"]


def _same(cli_json: Path, api_report: Any, also: frozenset[str] = frozenset()) -> dict[str, Any]:
    """The CLI's JSON report equals the API's, but for :data:`VOLATILE` (and ``also``) keys; the CLI's, parsed."""
    from_cli = json.loads(cli_json.read_text(encoding="utf-8"))
    from_api = json.loads(api_report.to_json())
    assert _differences(_stable(from_cli, also), _stable(from_api, also)) == []
    return from_cli


def test_check_cli_and_api_give_the_same_report(case, tmp_path):
    from privgate import CheckSettings, api

    out = tmp_path / "cli.json"
    r = run_cli(
        "check", str(case.leaky_ts), "--policy", "internal", "--members", str(case.members), "--nonmembers",
        str(case.nonmembers), "--json", str(out), "--cache-dir", "off", "--exposed", "0", cwd=tmp_path,
    )  # fmt: skip
    assert r.returncode == 1, r.stdout + r.stderr
    settings = CheckSettings(str(case.leaky_ts), "internal", str(case.members), str(case.nonmembers))
    report = api.check(settings, cache_dir="off", exposed=0)
    rep = _same(out, report)
    assert rep["job"] == "check" and rep["verdict"] == "fail" and report.exit_code == 1
    # the library form (model, policy, data) is the same job
    again = api.check(str(case.leaky_ts), "internal", str(case.members), str(case.nonmembers), cache_dir="off",
                      exposed=0)  # fmt: skip
    assert _stable(json.loads(again.to_json())) == _stable(rep)


def test_ldp_claim_audit_cli_and_api_agree_and_write_every_format(tmp_path):
    from privgate import LdpAuditSettings, RunOptions, api

    outs = {f: tmp_path / f"ldp.{f}" for f in ("json", "junit", "sarif", "markdown", "html")}
    flags = [a for f, p in outs.items() for a in (f"--{f}", str(p))]
    r = run_cli("audit", "ldp", "--epsilon", "0.5,2", "--trials", "400", "--adversary", "input_perturbation",
                "--seed", "3", *flags, cwd=tmp_path)  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    settings = LdpAuditSettings(epsilons=(0.5, 2.0), trials=400, adversaries=("input_perturbation",))
    report = api.audit_ldp(settings, RunOptions(seed=3))
    rep = _same(outs["json"], report)
    assert rep["job"] == "audit-ldp" and [c["id"] for c in rep["checks"]] == ["ldp-epsilon-0.5", "ldp-epsilon-2"]
    for check, claim in zip(rep["checks"], rep["claims"]):
        assert check["metric"] == "epsilon_lb" and check["threshold"] == claim["claimed_epsilon"]
        assert check["value"] == claim["max_epsilon_lb"] and check["status"] == claim["status"] == "pass"
        assert (check["n_members"], check["n_nonmembers"]) == (200, 200)
    suite = ET.parse(outs["junit"]).getroot().find("testsuite")
    assert suite.get("tests") == "2" and suite.get("failures") == "0"
    assert [c.get("name") for c in suite.iter("testcase")] == ["ldp-epsilon-0.5", "ldp-epsilon-2"]
    sarif = json.loads(outs["sarif"].read_text())
    assert sarif["runs"][0]["results"] == [] and sarif["runs"][0]["invocations"][0]["exitCode"] == 0
    md = outs["markdown"].read_text()
    assert "claim `claimed ε = 0.5, 2`" in md and "| 2 | " in md and "Matsumoto et al. 2022" in md
    assert "<svg" in outs["html"].read_text()


TRAINER = textwrap.dedent(
    """
    import torch
    from torch import nn

    def memorise(x, y, epsilon, delta, seed):
        torch.manual_seed(seed)
        model = nn.Sequential(nn.Linear(x.shape[1], 64), nn.ReLU(), nn.Linear(64, int(y.max()) + 1))
        opt = torch.optim.Adam(model.parameters(), lr=1e-2)
        xt, yt = torch.as_tensor(x, dtype=torch.float32), torch.as_tensor(y)
        for _ in range(150):
            opt.zero_grad()
            nn.functional.cross_entropy(model(xt), yt).backward()
            opt.step()
        return model
    """
)


def test_dpsgd_claim_audit_cli_and_api_agree_and_fail_in_junit_and_sarif(tmp_path):
    """A trainer without noise claiming ε = 1: the one-run audit refutes it, the same way through both doors."""
    from privgate import DpsgdAuditSettings, RunOptions, api

    (tmp_path / "trainers.py").write_text(TRAINER)
    rng = np.random.default_rng(0)
    y = rng.integers(0, 4, 600)
    np.savez(tmp_path / "d.npz", x=(rng.normal(size=(600, 10)) + y[:, None]).astype(np.float32), y=y)
    outs = {f: tmp_path / f"dp.{f}" for f in ("json", "junit", "sarif")}
    flags = [a for f, p in outs.items() for a in (f"--{f}", str(p))]
    r = run_cli("audit", "dpsgd", "--epsilon", "1", "--train", "trainers:memorise", "--data", "d.npz",
                "--canaries", "200", *flags, cwd=tmp_path)  # fmt: skip
    assert r.returncode == 1, r.stdout + r.stderr
    settings = DpsgdAuditSettings(epsilon=1.0, canaries=200, data="d.npz", train="trainers:memorise",
                                  search_dirs=(tmp_path,))  # fmt: skip
    report = api.audit_dpsgd(settings, RunOptions(seed=0))
    rep = _same(outs["json"], report)
    (check,) = rep["checks"]
    assert rep["job"] == "audit-dpsgd" and check["status"] == "fail" and check["value"] > 1 == check["threshold"]
    assert check["n_members"] + check["n_nonmembers"] == 200 and check["ci"] == [check["value"], None]
    suite = ET.parse(outs["junit"]).getroot().find("testsuite")
    assert suite.get("failures") == "1" and suite.find("testcase/failure") is not None
    (result,) = json.loads(outs["sarif"].read_text())["runs"][0]["results"]
    assert result["level"] == "error" and result["properties"]["check"] == "dpsgd-epsilon"


FL_POLICY = (
    "name: fl-best\nsensitivity: confidential\nrelease: model\nconfidence: 0.95\nchecks:\n"
    "  - {id: self-best, attack: best, metric: auc, max: 0.5, federated: {pairs: self}}\n"
)


def test_federation_jobs_cli_and_api_agree_and_best_decides_over_every_attack(tmp_path, monkeypatch):
    from privgate import FederationAuditSettings, RunOptions, SimulationSettings, api

    (tmp_path / "flrecipe.py").write_text(FL_RECIPE)  # the digits MLP and data of tests/test_federated.py
    (tmp_path / "fldata.py").write_text(FL_DATA)
    (tmp_path / "pol.yaml").write_text(FL_POLICY)
    sim = run_cli("fl", "simulate", "--recipe", "flrecipe:RECIPE", "--data", "fldata:digits", "--nodes", "3",
                  "--rounds", "1", "--local-epochs", "60", "--topology", "none", "--attacks", "loss,correctness",
                  "--json", "sim.json", "--html", "sim.html", "--save", "saved", cwd=tmp_path)  # fmt: skip
    assert sim.returncode == 0, sim.stdout + sim.stderr
    simulated = api.simulate_federation(
        SimulationSettings(recipe="flrecipe:RECIPE", data="fldata:digits", topologies=("none",), nodes=3, rounds=1,
                           local_epochs=60, attacks=("loss", "correctness"), save_dir=tmp_path / "saved",
                           search_dirs=(tmp_path,)),
        RunOptions(seed=0, cache_dir="off"),
    )  # fmt: skip
    rep = _same(tmp_path / "sim.json", simulated.report)
    assert rep["job"] == "fl-simulate" and rep["verdict"] is None and simulated.exit_code == 0
    assert sorted(p.name for p in simulated.files) == sorted(p.name for p in (tmp_path / "saved").rglob("*.*"))

    manifest = tmp_path / "saved" / "none" / "federation.yaml"
    monkeypatch.chdir(tmp_path)  # where the CLI ran: the manifest's recipe is found from there
    outs = {f: tmp_path / f"fl.{f}" for f in ("json", "junit", "sarif", "markdown")}
    flags = [a for f, p in outs.items() for a in (f"--{f}", str(p))]
    audited = run_cli("fl", "audit", str(manifest), "--policy", "pol.yaml", "--attacks", "loss,correctness", *flags,
                      cwd=tmp_path)  # fmt: skip
    assert audited.returncode == 1, audited.stdout + audited.stderr
    report = api.audit_federation(
        FederationAuditSettings(manifest=manifest, policy="pol.yaml", attacks=("loss", "correctness"))
    )
    rep = _same(outs["json"], report)
    (check,) = rep["checks"]
    # best = the strongest of the 2 attacks that ran, each pair's interval at 1 - α/(k·m·pairs)
    assert check["status"] == "fail" and check["chosen_attack"] in ("loss", "correctness")
    bonferroni = check["details"]["bonferroni"]
    assert bonferroni == {"alpha": pytest.approx(0.05), "checks": 1, "attacks": 2, "pairs": 3, "rounds": 1}
    assert check["confidence"] == pytest.approx(1 - 0.05 / 6)
    assert rep["verdict"] == "fail" and rep["summary"].startswith("FAIL: 1 checks (1 fail)")
    assert ET.parse(outs["junit"]).getroot().find("testsuite").get("failures") == "1"
    assert json.loads(outs["sarif"].read_text())["runs"][0]["results"][0]["level"] == "error"
    assert "### Final round: AUC of the strongest attack" in outs["markdown"].read_text()


def test_every_command_offers_exactly_the_formats_of_its_job():
    from privgate.cli import cli
    from privgate.report import available_formats, formats_for

    commands = {
        ("check",): "check",
        ("harden",): "harden",
        ("audit", "ldp"): "audit-ldp",
        ("audit", "dpsgd"): "audit-dpsgd",
        ("fl", "audit"): "fl-audit",
        ("fl", "simulate"): "fl-simulate",
    }
    for path, job in commands.items():
        cmd = cli
        for name in path:
            cmd = cmd.commands[name]  # type: ignore[attr-defined]
        flags = {o for p in cmd.params for o in p.opts}
        offered = {f.name for f in formats_for(job)}
        assert {f"--{f}" for f in offered} <= flags, path
        assert not {f"--{f}" for f in set(available_formats()) - offered} & flags, path
        if job != "fl-simulate":
            assert offered == {"json", "junit", "sarif", "markdown", "html"}, job
    assert {f.name for f in formats_for("fl-simulate")} == {"json", "html"}


def test_report_render_reads_every_job_back(tmp_path):
    """A saved claim-audit report renders in the other formats; a format a job has no form of is one sentence.

    The report is saved in process (``privgate audit ldp --json``'s: the test above); rendering it is the CLI's."""
    _, _, audit = inproc.audit("ldp", epsilons=(2.0,), trials=200, adversaries=("input_perturbation",))
    assert audit.exit_code == 0
    (tmp_path / "a.json").write_text(inproc.render(audit, "json")["json"], encoding="utf-8")
    rendered = run_cli("report", "render", "a.json", "--junit", "a.xml", "--markdown", "a.md", cwd=tmp_path)
    assert rendered.returncode == 0, rendered.stderr
    assert ET.parse(tmp_path / "a.xml").getroot().get("tests") == "1"
    outputs = run_cli("report", "outputs", "a.json", cwd=tmp_path)
    assert "verdict=pass" in outputs.stdout and "checks=1" in outputs.stdout


def test_harden_cli_and_api_give_the_same_report_and_files(tiny, tmp_path, monkeypatch):
    """privgate harden and api.harden on the same inputs: the same report (job harden) and the same model files."""
    from privgate import HardenSettings, api

    d, out = tiny["dir"], tmp_path / "hardened.pt"
    r = run_cli("harden", "model.pt", "--policy", "passable.yaml", "--recipe", "tiny_recipe:RECIPE", "--members",
                "members.npz", "--nonmembers", "nonmembers.npz", "--population", "population.npz", "--output-model",
                str(out), "--json", str(tmp_path / "h.json"), "--cache-dir", "off", cwd=d)  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    monkeypatch.chdir(d)
    settings = HardenSettings("model.pt", "passable.yaml", "members.npz", "nonmembers.npz",
                              population="population.npz", recipe="tiny_recipe:RECIPE", output_model=str(out),
                              search_dirs=(d,))  # fmt: skip
    result = api.harden(settings, cache_dir="off")
    # TorchScript archives are not byte-reproducible; the weights are: the state_dict's sha256 is compared
    rep = _same(tmp_path / "h.json", result.report, also=frozenset({"sha256", "torchscript_sha256", "model_sha256"}))
    assert rep["remediation"]["output"]["state_dict_sha256"] == result.report.remediation.output["state_dict_sha256"]
    assert result.status == "hardened" and result.exit_code == 0 and rep["job"] == "harden"
    assert {p.name: what for p, (what, _) in result.files.items()} == {
        "hardened.pt": "hardened model",
        "hardened.state_dict.pt": "hardened model's state_dict",
        "hardened.card.md": "hardened model's card (DP statement)",
    }
    assert rep["target"]["path"] == str(out) and rep["target"]["sha256"] == hashlib.sha256(out.read_bytes()).hexdigest()
