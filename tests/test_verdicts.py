"""Verdicts a team can act on: false-alarm rates of the built-in policies, nesting, proven failures.

The truths tested here (see tests/verdict_world.py):

* a model that never saw its members fails a built-in policy at most at the
  rate 1 − confidence the policy promises, over 4 seeds here (the 20-seed sweep, with the same
  assertions, is ``benchmarks/null_false_alarms.py``);
* a model that memorises its members fails every built-in policy;
* a well-generalising model audited on 5,000 + 5,000 rows passes `confidential`;
* a stricter built-in policy is never softer than a weaker one on the same inputs.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
from cases import run_cli
from scipy import stats as st
from verdict_world import LADDER, SEVERITY, World, generalising_world, memorising_world, null_world, partly_leaky_world

import privgate
from privgate.decision import verdict_of

#: the 20-seed sweep with the same assertions: benchmarks/null_false_alarms.py (`make bench`)
NULL_SEEDS = range(4)


def _check(world: World, policy: str, seed: int = 0, cache: Path | None = None) -> privgate.Report:
    return privgate.check(
        world.model,
        policy,
        world.members,
        world.nonmembers,
        population=world.population,
        recipe=world.recipe,
        seed=seed,
        cache_dir=str(cache) if cache else None,
    )


def _verdicts_from_strict(report: privgate.Report) -> dict[str, str]:
    """Each built-in policy's verdict, read from a `strict` report: it holds their checks verbatim."""
    origin = {
        "internal": {"internal"},
        "confidential": {"internal", "confidential"},
        "strict": {"internal", "confidential", "strict"},
    }
    return {p: verdict_of([c for c in report.checks if c.policy in names]) for p, names in origin.items()}


def test_null_models_fail_no_built_in_policy_more_often_than_promised(tmp_path):
    """4 seeds of a model trained on other rows than its 'members': count the fails per policy."""
    seeds = list(NULL_SEEDS)
    fails = {p: 0 for p in LADDER}
    verdicts = []
    for seed in seeds:
        world = null_world(tmp_path, seed)
        report = _check(world, "strict", seed, tmp_path / "cache")
        v = {"public": "pass", **_verdicts_from_strict(report)}
        verdicts.append(v)
        for p in LADDER:
            fails[p] += v[p] == "fail"
    for policy in LADDER:
        alpha = 1 - privgate.load_policy(policy).confidence
        # one-sided binomial test of "fail rate ≤ α" at level 0.01: the count must be consistent with it
        assert st.binom.sf(fails[policy] - 1, len(seeds), alpha) > 0.01, (policy, fails, verdicts)
    # and the null models are not all lumped as inconclusive: the weaker policies pass them
    assert sum(v["internal"] == "pass" for v in verdicts) >= len(seeds) - 2
    assert sum(v["confidential"] != "fail" for v in verdicts) == len(seeds)


def test_inherited_checks_are_the_extended_policys_own_decisions(tmp_path):
    """`strict` contains `confidential`'s and `internal`'s checks with the numbers they give alone."""
    world = null_world(tmp_path, 3)
    strict = _check(world, "strict", 3, tmp_path / "cache")
    for name in ("internal", "confidential"):
        alone = _check(world, name, 3, tmp_path / "cache")
        own = {c.id: c for c in alone.checks if c.policy == name}
        inherited = {c.id.removeprefix(f"{name}:"): c for c in strict.checks if c.policy == name}
        assert set(own) == set(inherited) and own
        for cid, c in own.items():
            d = inherited[cid]
            assert (d.status, d.value, d.ci, d.confidence, d.chosen_attack) == (
                c.status,
                c.value,
                c.ci,
                c.confidence,
                c.chosen_attack,
            )
    assert strict.policy["extends"][0]["name"] == "internal" and strict.policy["extends"][1]["name"] == "confidential"


def _write(world: World, dir: Path) -> list[str]:
    """The world on disk, as a user has it: TorchScript model, .npz audit files, the recipe module."""
    dir.mkdir(parents=True, exist_ok=True)
    torch.jit.save(torch.jit.script(world.model), str(dir / "model.pt"))
    for name, (x, y) in (
        ("members", world.members),
        ("nonmembers", world.nonmembers),
        ("population", world.population),
    ):
        np.savez(dir / f"{name}.npz", x=x, y=y)
    module = world.spec.split(":")[0]
    (dir / f"{module}.py").write_text((world.dir / f"{module}.py").read_text())
    return [
        "--members",
        "members.npz",
        "--nonmembers",
        "nonmembers.npz",
        "--population",
        "population.npz",
        "--recipe",
        world.spec,
    ]


def test_memorising_model_fails_every_built_in_policy(tmp_path):
    """One CLI run of `strict` (exit 1): its report holds the checks of `internal` and `confidential` as they give
    them alone (test_inherited_checks_are_the_extended_policys_own_decisions), so each policy's verdict is read
    from it; a model that fails every policy also shows that the stricter ones are never softer on it."""
    world = memorising_world(tmp_path / "recipes")
    args = _write(world, tmp_path / "memo")
    out = tmp_path / "strict.json"
    r = run_cli("check", "model.pt", "--policy", "strict", *args, "--json", str(out), cwd=tmp_path / "memo")
    assert r.returncode == 1, (r.stdout, r.stderr)
    rep = json.loads(out.read_text())
    assert rep["verdict"] == "fail"
    origin = {"internal": {"internal"}, "confidential": {"internal", "confidential"}, "strict": set(LADDER)}
    for policy in LADDER[1:]:
        checks = [c for c in rep["checks"] if c["policy"] in origin[policy]]
        assert checks and verdict_of([privgate.CheckResult(**c) for c in checks]) == "fail", policy
        failed = [c for c in checks if c["status"] == "fail"]
        # every fail is proven: the lower bound is over the threshold (ε: the bound itself)
        assert failed and all(c["ci"][0] > c["threshold"] for c in failed), policy


def test_well_generalising_model_passes_confidential_with_5000_rows(tmp_path):
    world = generalising_world(tmp_path / "recipes")
    args = _write(world, tmp_path / "gen")
    out = tmp_path / "r.json"
    r = run_cli("check", "model.pt", "--policy", "confidential", *args, "--json", str(out), cwd=tmp_path / "gen")
    assert r.returncode == 0, r.stdout + r.stderr
    rep = json.loads(out.read_text())
    assert rep["verdict"] == "pass"
    assert [c["id"] for c in rep["checks"]] == ["mia-accuracy", "mia-auc", "mia-tpr-1pct", "internal:mia-accuracy"]
    assert all(c["ci"][1] <= c["threshold"] for c in rep["checks"])
    assert {a["name"] for a in rep["attacks"] if a["status"] == "ran"} >= {"rmia", "label_only", "loss"}
    tpr = next(c for c in rep["checks"] if c["id"] == "mia-tpr-1pct")
    assert tpr["n_members"] == 2500 and tpr["n_nonmembers"] == 2500
    # the TPR is reported with the FPR it was measured at, and attacks that cannot be placed at 1 % FPR are named
    assert tpr["details"]["fpr_achieved"] < 0.02 and "correctness" in tpr["details"]["excluded"]


def test_stricter_built_in_policies_are_never_softer(tmp_path):
    """On a null model; the memorising model fails every policy and the partly leaky one shows the ladder exactly
    (the two tests around this one), which implies the same order for them."""
    world = null_world(tmp_path, 1)
    severity = [SEVERITY[_check(world, p, 0, tmp_path / "cache").verdict] for p in LADDER]
    assert severity == sorted(severity), dict(zip(LADDER, severity))


def test_partly_leaky_model_shows_the_ladder(tmp_path):
    """A leak that `internal` cannot prove at 99 % but `confidential`'s tighter bounds can."""
    world = partly_leaky_world(tmp_path)
    verdicts = {p: _check(world, p, 0, tmp_path / "cache").verdict for p in LADDER}
    assert verdicts == {"public": "pass", "internal": "inconclusive", "confidential": "fail", "strict": "fail"}
