"""``privgate init`` (starter policy + workflow, never overwriting) and shell completion."""

from __future__ import annotations

import re
from pathlib import Path

import yaml
from click.testing import CliRunner

from privgate import load_policy
from privgate.cli import cli

ROOT = Path(__file__).resolve().parent.parent
WORKFLOW = Path(".github/workflows/privacy-gate.yml")


def invoke(*args: str, env: dict | None = None):
    return CliRunner().invoke(cli, list(args), env=env, prog_name="privgate")


def test_init_writes_a_valid_policy_and_workflow(tmp_path):
    project = tmp_path / "shop-model"
    project.mkdir()
    r = invoke("init", str(project))
    assert r.exit_code == 0, r.output
    policy = load_policy(project / "privacy-policy.yaml")
    builtin = load_policy("internal")
    assert policy.name == "shop-model"
    assert [(c.id, c.metric, c.max) for c in policy.checks] == [(c.id, c.metric, c.max) for c in builtin.checks]
    text = (project / "privacy-policy.yaml").read_text()
    assert (
        text.startswith("# privgate policy for shop-model") and "privgate policy validate privacy-policy.yaml" in text
    )

    wf = yaml.safe_load((project / WORKFLOW).read_text())
    action = yaml.safe_load((ROOT / "action.yml").read_text())
    gate = next(s for s in wf["jobs"]["privacy-gate"]["steps"] if s.get("id") == "gate")
    assert gate["uses"] == "privgate/privgate@v0"
    assert gate["with"]["policy"] == "privacy-policy.yaml" and gate["with"]["model"] == "model.pt"
    assert set(gate["with"]) <= set(action["inputs"])
    used = set(re.findall(r"steps\.gate\.outputs\.([A-Za-z0-9_-]+)", (project / WORKFLOW).read_text()))
    assert used == {"sarif", "reports-dir"} and used <= set(action["outputs"])
    assert wf["permissions"]["security-events"] == "write"
    assert f"wrote {project / 'privacy-policy.yaml'}" in r.output


def test_init_refuses_to_overwrite_and_writes_nothing(tmp_path):
    (tmp_path / WORKFLOW).parent.mkdir(parents=True)
    (tmp_path / WORKFLOW).write_text("mine\n")
    r = invoke("init", str(tmp_path))
    assert r.exit_code == 2
    line = r.output.strip()
    assert len(line.splitlines()) == 1 and "already exists" in line and "nothing was written" in line
    assert (tmp_path / WORKFLOW).read_text() == "mine\n"
    assert not (tmp_path / "privacy-policy.yaml").exists()  # all or nothing

    r = invoke("init", str(tmp_path), "--no-workflow")
    assert r.exit_code == 0
    before = (tmp_path / "privacy-policy.yaml").read_bytes()
    r = invoke("init", str(tmp_path), "--no-workflow")
    assert r.exit_code == 2 and "privacy-policy.yaml: already exists" in r.output
    assert (tmp_path / "privacy-policy.yaml").read_bytes() == before


def test_init_options(tmp_path):
    r = invoke(
        "init",
        str(tmp_path),
        "--from",
        "strict",
        "--policy-file",
        "gate.yaml",
        "--action-ref",
        "acme/privgate@v1.2",
        "--model",
        "out/model.pt",
    )
    assert r.exit_code == 0, r.output
    assert load_policy(tmp_path / "gate.yaml").sensitivity.value == "strictly_confidential"
    wf = (tmp_path / WORKFLOW).read_text()
    assert "uses: acme/privgate@v1.2" in wf and "model: out/model.pt" in wf and "policy: gate.yaml" in wf
    r = invoke("init", str(tmp_path / "other"), "--from", "lenient")
    assert r.exit_code == 2 and "unknown built-in policy 'lenient'" in r.output
    assert not (tmp_path / "other").exists()


def test_shell_completion_uses_clicks_mechanism():
    source = invoke(env={"_PRIVGATE_COMPLETE": "bash_source"})
    assert (
        source.exit_code == 0
        and "_privgate_completion()" in source.output
        and "_PRIVGATE_COMPLETE=bash_complete" in source.output
    )
    r = invoke(env={"_PRIVGATE_COMPLETE": "bash_complete", "COMP_WORDS": "privgate report r", "COMP_CWORD": "2"})
    assert r.output.split() == ["plain,render"]
    r = invoke(env={"_PRIVGATE_COMPLETE": "bash_complete", "COMP_WORDS": "privgate check --ju", "COMP_CWORD": "2"})
    assert r.output.split() == ["plain,--junit"]
    zsh = invoke(env={"_PRIVGATE_COMPLETE": "zsh_source"})
    assert "#compdef privgate" in zsh.output
    fish = invoke(env={"_PRIVGATE_COMPLETE": "fish_source"})
    assert "complete" in fish.output and "privgate" in fish.output


def test_init_adds_the_cache_to_an_existing_gitignore_once(tmp_path):
    ignore = tmp_path / ".gitignore"
    ignore.write_text("node_modules/\n# build output\ndist\n*.pyc")  # no newline at the end
    ignore.chmod(0o640)
    r = invoke("init", str(tmp_path))
    assert r.exit_code == 0, r.output
    assert (
        ignore.read_text()
        == "node_modules/\n# build output\ndist\n*.pyc\n# privgate's reference-model cache (privgate "
        "init)\n.privgate-cache/\n"
    )
    assert ignore.stat().st_mode & 0o777 == 0o640
    assert f"added .privgate-cache/ to {ignore}" in r.output
    before = ignore.read_text()
    r = invoke("init", str(tmp_path), "--no-workflow", "--policy-file", "second.yaml")
    assert r.exit_code == 0, r.output
    assert ignore.read_text() == before and ".gitignore" not in r.output  # never twice
    assert not list(tmp_path.glob(".gitignore.*"))  # no temporary file left behind


def test_init_creates_a_gitignore_or_keeps_one_that_already_ignores_the_cache(tmp_path):
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    r = invoke("init", str(fresh), "--no-workflow")
    assert r.exit_code == 0, r.output
    assert (
        fresh / ".gitignore"
    ).read_text() == "# privgate's reference-model cache (privgate init)\n.privgate-cache/\n"
    kept = tmp_path / "kept"
    kept.mkdir()
    (kept / ".gitignore").write_text("/.privgate-cache\n")
    r = invoke("init", str(kept), "--no-workflow")
    assert r.exit_code == 0 and (kept / ".gitignore").read_text() == "/.privgate-cache\n"
    # an existing policy file: nothing is written, the .gitignore included
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "privacy-policy.yaml").write_text("mine\n")
    r = invoke("init", str(tmp_path / "busy"))
    assert r.exit_code == 2 and not (tmp_path / "busy" / ".gitignore").exists()
