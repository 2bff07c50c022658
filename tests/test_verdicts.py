"""Verdicts a team can act on: false-alarm rates of the built-in policies, nesting, proven failures.

The truths tested here (see tests/verdict_world.py):

* a model that never saw its members fails a built-in policy at most at the
  rate 1 − confidence the policy promises, over 4 seeds here (the 20-seed sweep, with the same
  assertions, is ``benchmarks/false_alarms/null_false_alarms.py``);
* a model that memorises its members fails every built-in policy;
* a well-generalising model audited on 5,000 + 5,000 rows passes `confidential`;
* a stricter built-in policy is never softer than a weaker one on the same inputs.

The memorising model's audit is the CLI in a subprocess (exit 1); every other audit runs in process through
``privgate.check`` (the CLI's report, see ``test_front_door.py``). The four null models' `strict` audits are
run once for the module and shared by the tests that read them.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from cases import run_cli
from scipy import stats as st
from verdict_world import LADDER, SEVERITY, World, generalising_world, memorising_world, null_world, partly_leaky_world

import privgate
from privgate.decision import verdict_of

#: the 20-seed sweep with the same assertions: benchmarks/false_alarms/null_false_alarms.py (`make bench`)
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


@pytest.fixture(scope="module")
def null_strict(tmp_path_factory) -> Callable[[int], tuple[World, privgate.Report, Path]]:
    """``null_strict(seed)``: the null world of ``seed``, its `strict` report (audited with that seed) and the
    reference-model cache that audit filled; each seed's is built when first asked for, once per module."""
    d = tmp_path_factory.mktemp("null-worlds")

    @functools.cache
    def build(seed: int) -> tuple[World, privgate.Report, Path]:
        world = null_world(d / f"seed-{seed}", seed)
        return world, _check(world, "strict", seed, d / "cache"), d / "cache"

    return build


def test_null_models_fail_no_built_in_policy_more_often_than_promised(null_strict):
    """4 seeds of a model trained on other rows than its 'members': count the fails per policy."""
    seeds = list(NULL_SEEDS)
    fails = {p: 0 for p in LADDER}
    verdicts = []
    for seed in seeds:
        _, report, _ = null_strict(seed)
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


def test_inherited_checks_are_the_extended_policys_own_decisions(null_strict):
    """`strict` contains `confidential`'s and `internal`'s checks with the numbers they give alone (null seed 3: its
    `strict` report is the one the test above counts)."""
    world, strict, cache = null_strict(3)
    for name in ("internal", "confidential"):
        alone = _check(world, name, 3, cache)
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


def test_stricter_built_in_policies_are_never_softer(null_strict):
    """On a null model (seed 1: each policy audited alone, `strict`'s audit shared with the tests above); the
    memorising model fails every policy and the partly leaky one shows the ladder exactly (the tests below), which
    implies the same order for them."""
    world, strict, cache = null_strict(1)
    reports = {p: strict if p == "strict" else _check(world, p, 1, cache) for p in LADDER}
    severity = [SEVERITY[reports[p].verdict] for p in LADDER]
    assert severity == sorted(severity), dict(zip(LADDER, severity))


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
    """In process (the model, data and recipe in memory; the CLI's report, see test_front_door.py): the test above
    runs the CLI on files."""
    world = generalising_world(tmp_path / "recipes")
    report = _check(world, "confidential", 0, tmp_path / "cache")
    assert report.exit_code == 0, report.summary
    rep = json.loads(report.to_json())
    assert rep["verdict"] == "pass"
    assert [c["id"] for c in rep["checks"]] == ["mia-accuracy", "mia-auc", "mia-tpr-1pct", "internal:mia-accuracy"]
    assert all(c["ci"][1] <= c["threshold"] for c in rep["checks"])
    assert {a["name"] for a in rep["attacks"] if a["status"] == "ran"} >= {"rmia", "label_only", "loss"}
    tpr = next(c for c in rep["checks"] if c["id"] == "mia-tpr-1pct")
    assert tpr["n_members"] == 2500 and tpr["n_nonmembers"] == 2500
    # the TPR is reported with the FPR it was measured at, and attacks that cannot be placed at 1 % FPR are named
    assert tpr["details"]["fpr_achieved"] < 0.02 and "correctness" in tpr["details"]["excluded"]


def test_partly_leaky_model_shows_the_ladder(tmp_path):
    """A leak that `internal` cannot prove at 99 % but `confidential`'s tighter bounds can. One `strict` audit:
    its report holds `internal`'s and `confidential`'s checks as they give them alone
    (test_inherited_checks_are_the_extended_policys_own_decisions), so each policy's verdict is read from it;
    `public` runs no attack and is audited on its own."""
    world = partly_leaky_world(tmp_path)
    strict = _check(world, "strict", 0, tmp_path / "cache")
    verdicts = {"public": _check(world, "public").verdict, **_verdicts_from_strict(strict)}
    assert strict.verdict == verdicts["strict"]
    assert verdicts == {"public": "pass", "internal": "inconclusive", "confidential": "fail", "strict": "fail"}
