"""The bundled examples, end to end through the CLI, and loaded side by side in one process."""

from __future__ import annotations

import json

import pytest
from cases import run_cli


def test_two_projects_with_same_module_names_do_not_mix(root):
    from privgate.inputs.entrypoints import import_factory, load_recipe

    digits, purchase = root / "examples" / "digits", root / "examples" / "purchase"
    xd, _ = import_factory("data:members", [digits])()
    xp, _ = import_factory("data:members", [purchase])()
    assert xd.shape[1] == 64 and xp.shape[1] == 600
    assert load_recipe("recipe:RECIPE", [digits]).name != load_recipe("recipe:RECIPE", [purchase]).name
    xd2, _ = import_factory("data:members", [digits])()
    assert xd2.shape[1] == 64


@pytest.mark.parametrize("example, policy", [("digits", "strict"), ("purchase", "internal")])
def test_example_fails_its_policy_for_real(root, tmp_path, example, policy):
    out = tmp_path / "r.json"
    r = run_cli("check", "--json", str(out), cwd=root / "examples" / example)
    assert r.returncode == 1, r.stdout + r.stderr
    rep = json.loads(out.read_text())
    assert rep["policy"]["name"] == policy and rep["verdict"] == "fail"
    failed = [c for c in rep["checks"] if c["status"] == "fail"]
    assert failed
    if example == "purchase":
        (acc,) = failed
        # a proven violation: even the lower bound of the best attack's accuracy is over 0.80
        assert acc["metric"] == "accuracy" and acc["ci"][0] > 0.8
    else:
        eps = next(c for c in failed if c["metric"] == "epsilon_lb")
        assert eps["value"] > 1.0
