"""Remediation through the CLI: ``privgate harden`` and ``check --remediate`` on the tiny digits model's files.

Exit codes, the files written (or, on failure, not written, the input left alone) and the report as the user
reads it; the setup is tests/remediation_case.py (the ``tiny`` fixture), the search in process:
``test_remediation.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import inproc
import pytest
import torch
from cases import run_cli
from click.testing import CliRunner
from remediation_case import POLICY_IMPOSSIBLE, POLICY_PASSABLE
from remediation_case import sha as _sha

# torch.jit (TorchScript, the portable format privgate writes and loads) warns that it is deprecated
pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit:DeprecationWarning")


def _cli(tiny, *args: str) -> subprocess.CompletedProcess:
    """``privgate ARGS`` on the tiny model's audit files, in its own process (forked from the suite's server)."""
    data = ["--members", "members.npz", "--nonmembers", "nonmembers.npz", "--population", "population.npz"]
    return run_cli(*args, *data, cwd=tiny["dir"])


def test_cli_harden_writes_the_model_and_leaves_the_input_alone(tiny):
    d = tiny["dir"]
    before = _sha(d / "model.pt")
    t0 = time.perf_counter()
    r = _cli(
        tiny, "harden", "model.pt", "--policy", "passable.yaml", "--recipe", "tiny_recipe:RECIPE", "--json",
        "hard.json", "--output-model", "model.hardened.pt2",
    )  # fmt: skip
    wall = time.perf_counter() - t0
    assert r.returncode == 0, r.stdout + r.stderr
    assert _sha(d / "model.pt") == before
    assert (d / "model.hardened.pt2").is_file() and (d / "model.hardened.state_dict.pt").is_file()
    assert not (d / "model.hardened.pt").exists()  # the model exports: a torch.export program, no TorchScript
    report = json.loads((d / "hard.json").read_text())
    section = report["remediation"]
    assert report["verdict"] == "pass" and section["chosen_epsilon"] == 8 and section["input_sha256"] == before
    # every audit counted once: the run's duration fits in the process's wall time, the search in the run
    assert section["rows"][0]["audit_seconds"] < section["seconds"] <= report["duration_s"] <= wall
    assert report["target"]["path"].endswith("model.hardened.pt2") and report["target"]["sha256"] == _sha(
        d / "model.hardened.pt2"
    )
    assert report["target"]["format"] == section["output"]["format"] == "torch.export"
    assert "model.hardened.pt2 (torch.export)" in " ".join(r.stdout.split())
    assert "ε = 8" in r.stdout and "accepted" in r.stdout and "Remediation: DP-SGD ε search" in r.stdout
    # the DP statement: in the JSON, in one console line, and in the model card written beside the model
    from privgate.dp.card import read_statement
    from privgate.report.remediation_section import DPStatement

    st = DPStatement.model_validate(section["statement"])
    assert st.line() in " ".join(r.stdout.split()) and section["output"]["model_card"].endswith(
        "model.hardened.card.md"
    )
    assert (
        read_statement((d / "model.hardened.card.md").read_text()) == st and st.released_epsilon >= st.training_epsilon
    )
    # the hardened .pt2 passes the policy when audited on its own, without a recipe (in process: the CLI's
    # report, tests/test_front_door.py)
    again = inproc.check(d / "model.hardened.pt2", str(d / "passable.yaml"), d / "members.npz", d / "nonmembers.npz",
                         population=str(d / "population.npz"))  # fmt: skip
    assert again.exit_code == 0, again.summary


def test_cli_exits_1_when_no_epsilon_meets_the_policy_within_the_floor(tiny):
    t0 = time.perf_counter()
    r = _cli(
        tiny,
        "check",
        "model.pt",
        "--policy",
        "impossible.yaml",
        "--recipe",
        "tiny_recipe:RECIPE",
        "--remediate",
        "--output-model",
        "never.pt",
        "--json",
        "never.json",
    )
    wall = time.perf_counter() - t0
    assert r.returncode == 1, r.stdout + r.stderr
    report = json.loads((tiny["dir"] / "never.json").read_text())
    assert report["remediation"]["seconds"] <= report["duration_s"] <= wall  # the original audit is counted once
    out = " ".join(r.stdout.split())
    assert "the utility floor broke first: at ε = 1" in out and "check 'mia-auc' is fail" in out
    assert not (tiny["dir"] / "never.pt").exists()


def test_cli_max_total_epsilon_stops_the_search_and_hands_out_nothing(tiny):
    """ε = 8 fails the impossible check; ε = 1 would take the released ε (composed, RDP) from 7.99 to 8.11."""
    d = tiny["dir"]
    (d / "budget.yaml").write_text(
        POLICY_IMPOSSIBLE.replace("name: impossible", "name: budget").replace(
            "max_grad_norm: 1.0}", "max_grad_norm: 1.0, max_total_epsilon: 8.05}"
        )
    )
    r = _cli(tiny, "harden", "model.pt", "--policy", "budget.yaml", "--recipe", "tiny_recipe:RECIPE",
             "--output-model", "budget.pt", "--json", "budget.json")  # fmt: skip
    assert r.returncode == 1, r.stdout + r.stderr
    assert not any((d / f).exists() for f in ("budget.pt", "budget.state_dict.pt", "budget.card.md"))
    section = json.loads((d / "budget.json").read_text())["remediation"]
    assert section["status"] == "budget_exceeded" and section["trainings"] == 1 and section["output"] is None
    assert section["best_not_released"]["epsilon"] == 8 and section["accounting"]["epsilon"] <= 8.05
    assert section["statement"] is None and section["accounting"]["max_total_epsilon"] == 8.05
    out = " ".join(r.stdout.split())
    assert "would take the released ε to 8.111, over the policy's max_total_epsilon 8.05" in out
    assert (
        f"DP: no model handed out; the 1 DP-SGD run(s) on the members spent ε = {section['accounting']['epsilon']:.3g}"
        in out
    )
    assert "the best candidate trained (ε = 8" in out and "is not handed out" in out
    bad = d / "bad-budget.yaml"
    bad.write_text(POLICY_PASSABLE.replace("max_grad_norm: 1.0}", "max_grad_norm: 1.0, max_total_epsilon: -1}"))
    v = run_cli("policy", "validate", str(bad))
    assert v.returncode == 2 and "max_total_epsilon" in v.stdout + v.stderr


def test_cli_bad_input_exits_2(tiny, monkeypatch):
    from privgate.cli import cli

    monkeypatch.chdir(tiny["dir"])
    monkeypatch.syspath_prepend(str(tiny["dir"]))
    runner = CliRunner()
    data = ["--members", "members.npz", "--nonmembers", "nonmembers.npz"]
    ts = tiny["dir"] / "model.ts.pt"
    torch.jit.save(torch.jit.trace(tiny["model"], torch.zeros(1, 64)), str(ts))
    cases = {
        "needs its training recipe": ["harden", str(ts), "--policy", "passable.yaml", *data],
        "Opacus cannot compute per-example gradients": [
            "harden",
            str(ts),
            "--policy",
            "passable.yaml",
            "--recipe",
            "tiny_recipe:BAD",
            *data,
        ],
        "remediation is not enabled": [
            "harden",
            "model.pt",
            "--policy",
            "disabled.yaml",
            "--recipe",
            "tiny_recipe:RECIPE",
            *data,
        ],
        "would overwrite an input": [
            "harden",
            "model.pt",
            "--policy",
            "passable.yaml",
            "--recipe",
            "tiny_recipe:RECIPE",
            "--output-model",
            "members.npz",
            *data,
        ],
    }
    for message, args in cases.items():
        result = runner.invoke(cli, args)
        assert result.exit_code == 2, (message, result.output)
        assert message in " ".join(result.output.split()), result.output


def test_cli_harden_writes_the_model_and_its_reports_together_or_not_at_all(tiny, monkeypatch):
    """The disk fills up at the very last rename (the state_dict): the reports and the TorchScript already moved
    into place are taken back, and the file the user had at the output path is as it was."""
    import errno

    from privgate.cli import cli
    from privgate.io import atomic

    d = tiny["dir"]
    monkeypatch.chdir(d)
    monkeypatch.syspath_prepend(str(d))
    (d / "keep.pt").write_bytes(b"the user's own model, not to be lost")
    real_replace = os.replace

    def full_at_the_end(src, dst):  # noqa: ANN001, ANN202
        if Path(dst).name == "keep.state_dict.pt":
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_replace(src, dst)

    monkeypatch.setattr(atomic.os, "replace", full_at_the_end)
    args = [
        "harden",
        "model.pt",
        "--policy",
        "passable.yaml",
        "--recipe",
        "tiny_recipe:RECIPE",
        "--members",
        "members.npz",
        "--nonmembers",
        "nonmembers.npz",
        "--population",
        "population.npz",
        "--output-model",
        "keep.pt",
        "--json",
        "keep.json",
        "--html",
        "keep.html",
    ]
    result = CliRunner().invoke(cli, args)
    monkeypatch.undo()
    assert result.exit_code == 2, result.output
    assert (
        "keep.state_dict.pt: cannot write the hardened model's state_dict (No space left on device); nothing "
        "was written." in " ".join(result.output.split())
    )
    assert (d / "keep.pt").read_bytes() == b"the user's own model, not to be lost"
    assert not any((d / f).exists() for f in ("keep.state_dict.pt", "keep.card.md", "keep.json", "keep.html"))
    assert not [p for p in d.rglob("*") if p.name.endswith(".tmp")]
    (d / "keep.pt").unlink()
