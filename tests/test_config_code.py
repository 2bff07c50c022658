"""``--no-config-code``: a file may not name code, flip a trust switch or pick a server (issue 41 item 3).

A workflow that gates a pull request's model and data files where secrets are at hand (``pull_request_target``,
``workflow_run``) runs privgate on a checkout the pull request wrote: its ``privgate.toml`` or
``[tool.privgate]`` could name ``members = "evilmod:data"`` and privgate would import ``evilmod``. With the flag
(or ``$PRIVGATE_NO_CONFIG_CODE=1``, the action's ``no-config-code`` input) every such key is exit 2 naming it, and
the attacker's module never runs: each test's ``evilmod.py`` would write a marker file when imported.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from cases import run_cli

from privgate.errors import ConfigError
from privgate.inputs.config import CODE_KEYS, find_config, load_config

#: What the pull request commits beside its config: a module that leaves a marker when anything imports it.
EVIL = 'from pathlib import Path\nPath(__file__).with_name("MARKER").write_text("ran")\n\ndef data():\n    return 1\n'
DATA = 'model = "m.pt"\npolicy = "internal"\nnonmembers = "n.npz"\n'


def _repo(root: Path, config: str, name: str = "privgate.toml") -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / name).write_text(config)
    (root / "evilmod.py").write_text(EVIL)
    return root


def _refused(r, key: str, path: Path) -> str:
    assert r.returncode == 2, (r.returncode, r.stdout[-2000:], r.stderr[-2000:])
    err = " ".join(r.stderr.split())
    assert err.startswith(f"error: {path}: '{key}' ") and "--no-config-code" in err, err
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) <= 4, err
    assert not (path.parent / "MARKER").exists()  # the attacker's module was never imported
    return err


def test_a_config_naming_a_data_factory_is_refused_before_its_module_runs(tmp_path):
    repo = _repo(tmp_path / "pr", DATA + 'members = "evilmod:data"\n')
    err = _refused(run_cli("check", "--no-config-code", cwd=repo), "members", repo / "privgate.toml")
    assert "data factory" in err and "(--members)" in err
    # without the flag the config's code runs, as documented (docs/threat-model.md: code you name)
    assert run_cli("check", cwd=repo).returncode == 2 and (repo / "MARKER").read_text() == "ran"


def test_the_environment_variable_refuses_a_pyproject_recipe(tmp_path):
    """The action sets $PRIVGATE_NO_CONFIG_CODE; a ``[tool.privgate]`` table is held to the same rule."""
    body = "[tool.privgate]\n" + DATA + 'members = "m.npz"\nrecipe = "evilmod:data"\n'
    repo = _repo(tmp_path / "pr", body, "pyproject.toml")
    r = run_cli("harden", cwd=repo, env={"PRIVGATE_NO_CONFIG_CODE": "1"})
    assert "training recipe" in _refused(r, "tool.privgate.recipe", repo / "pyproject.toml")


def test_a_module_named_on_the_command_line_is_not_looked_up_in_the_configs_folder(tmp_path):
    """The workflow names ``--recipe recipe:RECIPE`` and the pull request's config folder: with the flag, the
    recipe comes from the working directory (the trusted checkout), never from beside the pull request's config."""
    work = tmp_path / "base"
    pr = _repo(tmp_path / "pr", 'members = "m.npz"\n' + DATA)
    (pr / "recipe.py").write_text(EVIL + "RECIPE = 1\n")
    work.mkdir()
    config = str(pr / "privgate.toml")
    r = run_cli("check", "--config", config, "--recipe", "recipe:RECIPE", "--no-config-code", cwd=work)
    assert r.returncode == 2 and not (pr / "MARKER").exists(), r.stderr
    assert f"no module 'recipe' in {work}" in " ".join(r.stderr.split())


def test_a_manifest_naming_a_recipe_is_refused_with_its_line(tmp_path):
    manifest = tmp_path / "pr" / "federation.yaml"
    _repo(manifest.parent, "", "unused.toml")
    manifest.write_text(
        "version: 1\nname: h\nrecipe: evilmod:data\nnonmembers: n.npz\n"
        "nodes:\n  - {name: a, data: a.npz, checkpoints: [a.pt]}\n"
    )
    r = run_cli("fl", "audit", str(manifest), "--no-config-code", cwd=manifest.parent)
    assert r.returncode == 2 and not (manifest.parent / "MARKER").exists(), r.stderr
    err = " ".join(r.stderr.split())
    assert err.startswith(f"error: {manifest}: line 3: recipe: names a training recipe") and "Traceback" not in err


@pytest.mark.parametrize(
    ("line", "key"),
    [
        ('recipe = "lm_recipe.yaml"', "recipe"),
        ('nonmembers = "evilmod:data"', "nonmembers"),
        ('population = "evilmod:data"', "population"),
        ("trust_checkpoint = true", "trust_checkpoint"),
        ('trust_types = ["evilmod.Thing"]', "trust_types"),
        ('executor = "ray"', "executor"),
        ('ray_address = "ray://attacker:10001"', "ray_address"),
        ('model = "https://attacker.example/v2/models/m"', "model"),
    ],
)
def test_every_key_that_runs_trusts_or_sends_is_refused(tmp_path, line, key):
    path = tmp_path / "privgate.toml"
    path.write_text(line + "\n")
    with pytest.raises(ConfigError) as err:
        find_config(tmp_path, code=False)
    assert str(err.value).startswith(f"{path}: '{key}' ") and f"({CODE_KEYS[key]})" in str(err.value)
    assert load_config(path).get(key) is not None  # without the flag the key is read as before


def test_a_data_only_config_is_read_whole_under_the_flag(tmp_path):
    path = tmp_path / "privgate.toml"
    body = DATA + 'members = "data/m.npz"\ntrust_checkpoint = false\ntrust_types = []\nexecutor = "local"\nseed = 3\n'
    path.write_text(body)
    cfg = load_config(path, code=False)
    assert cfg.values == {
        "model": "m.pt",
        "policy": "internal",
        "nonmembers": "n.npz",
        "members": "data/m.npz",
        "trust_checkpoint": False,
        "trust_types": [],
        "executor": "local",
        "seed": 3,
    }
