"""Assertions run what their bounds need; a time budget leaves out the attacks that do not fit, and says so.

The budget's mechanics are checked with one registered attack whose estimate is a
day (``SlowAttack``: the loss attack, saying it is slow), so no test depends on the
machine's speed; the real attacks' estimates are checked as formulas on given facts.
The thread rule under load is checked as a pure function of cores and load, never timed.
"""

from __future__ import annotations

import json

import pytest
from pipeline_cases import constant_model, leaky_tree

from privgate.attacks import registry
from privgate.attacks.budget import GRADIENT_PASSES, CostFacts
from privgate.attacks.threshold import LossAttack
from privgate.machine_load import Load, machine_load, threads_under_load
from privgate.threads import Threads, free_cores
from pytest_privgate import PrivacyAssertionError, assert_mia_below

pytest_plugins = ["pytester"]

DAY = 86400.0


class SlowAttack(LossAttack):
    """The loss attack, estimating a day: it never fits a test's budget."""

    name = "slow"

    def estimated_seconds(self, facts: CostFacts) -> float:
        return DAY


@pytest.fixture
def slow(monkeypatch):
    monkeypatch.setitem(registry._ATTACKS, "slow", SlowAttack)


# --------------------------------------------------------------------------- threads under load (pure)


@pytest.mark.parametrize(
    "cores, others, cpus, threads",
    [
        (2, 0.0, 2, 2),  # idle: every core
        (2, 3.0, 2, 1),  # three busy processes beside it on two cores: one thread
        (2, 0.4, 2, 2),  # a blip: the nearest whole core
        (2, 0.6, 2, 1),
        (16, 3.0, 16, 13),  # the cores the others leave
        (4, 100.0, 8, 1),  # never fewer than one
        (2, 3.0, 16, 2),  # 2 of 16 CPUs: the others spread over all 16, 0.375 of them here
        (4, 8.0, 16, 2),
    ],
)
def test_threads_are_the_cores_other_work_leaves_free(cores, others, cpus, threads):
    assert threads_under_load(cores, others, cpus) == threads


def test_the_load_is_read_from_proc_stat_else_the_load_average(tmp_path):
    stat = tmp_path / "stat"
    stat.write_text("cpu  1 2 3 4\nprocs_running 4\nprocs_blocked 0\n")
    assert machine_load(stat, samples=2, pause_s=0) == Load(3.0, "runnable threads now, from /proc/stat")
    missing = tmp_path / "none"
    assert machine_load(missing, loadavg=lambda: (2.5, 1.0, 1.0)) == Load(1.5, "the 1-minute load average")
    assert machine_load(missing, loadavg=None) is None
    busy = free_cores(Threads(2, "the cores this process may use"), Load(3.0, "from /proc/stat"), 2)
    assert busy == (1, "the cores this process may use, 1 of them free (3.0 other runnable threads: from /proc/stat)")
    assert free_cores(Threads(2, "cores"), None, 2) == (2, "cores")


# --------------------------------------------------------------------------- what the assertion runs


def test_best_runs_the_black_box_attacks_and_all_runs_every_kind():
    from privgate.attacks.selection import membership_attacks

    black_box = {"confidence", "entropy", "learned", "loss", "modified_entropy", "true_class_confidence"}
    assert set(membership_attacks("best", white_box=True, family="classifier")) == black_box
    with_recipe = set(membership_attacks("best", recipe=True, population=True, family="classifier"))
    assert with_recipe == black_box | {"learned_reference", "lira", "rmia", "shadow", "blind"}
    every = set(membership_attacks("all", white_box=True, family="classifier"))
    assert every == black_box | {"correctness", "label_only", "boundary", "gradient", "structural"}
    options = {"learned": {"classifier": "logistic", "folds": 2}, "label_only": {"queries": 2}}
    report = assert_mia_below(*constant_model(), accuracy=0.9, attack_options=options)
    assert {a.name for a in report.attacks} == black_box | {"label_only"}  # named in attack_options: asked for


# --------------------------------------------------------------------------- estimates (formulas on given facts)


def test_estimates_count_the_passes_each_attack_makes():
    from privgate.attacks import get_attack

    facts = CostFacts(rows=1000, classes=10, pass_s=0.01, population=300, planned=16, epochs=10)
    assert get_attack("loss")().estimated_seconds(facts) == 0.01
    assert get_attack("label_only")(queries=64).estimated_seconds(facts) == pytest.approx(0.01 * (65 + 400 * 72 / 1000))
    assert get_attack("gradient")(mode="norm").estimated_seconds(facts) == pytest.approx(0.01 * GRADIENT_PASSES)
    # the first reference attack trains the run's 16 models (10 epochs on 500 rows, 12 passes a row), then scores
    lira = get_attack("lira")(models=4).estimated_seconds(facts)
    assert lira == pytest.approx(16 * 10 * 0.5 * 12 * 0.01 + 4 * 0.01)
    trained = CostFacts(rows=1000, classes=10, pass_s=0.01, trained=16, planned=16, epochs=10)
    assert get_attack("lira")(models=4).estimated_seconds(trained) == pytest.approx(0.04)  # shared models


# --------------------------------------------------------------------------- the budget: api, assertions, CLI


def test_a_pass_on_the_attacks_that_fit_is_not_a_pass(slow):
    blind = constant_model()
    with pytest.raises(PrivacyAssertionError) as info:
        assert_mia_below(*blind, accuracy=0.8, attack=["loss", "slow"], budget_s=60)
    report, msg = info.value.report, str(info.value)
    (check,) = report.checks
    assert check.status == "inconclusive" and check.value is not None and check.ci[1] <= 0.8
    assert "but 1 of its attacks did not run within the time budget: slow (≈ 8.6e+04 s)" in check.reason
    assert msg.endswith("not run for want of time (budget_s = 60 s): slow (≈ 8.6e+04 s)")
    (skipped,) = [a for a in report.attacks if a.name == "slow"]
    assert skipped.status == "skipped" and skipped.extras["budget"] == {"budget_s": 60.0, "estimated_s": DAY}
    assert any(w.startswith("1 attack did not run within the time budget of 60 s: slow") for w in report.warnings)
    with pytest.raises(PrivacyAssertionError) as info:  # a violation the attacks that ran prove stands
        assert_mia_below(*leaky_tree(), accuracy=0.8, attack=["loss", "slow"], budget_s=60)
    assert info.value.report.checks[0].status == "fail"
    assert "not run within the time budget: slow" in info.value.report.checks[0].reason


def test_the_api_runs_every_attack_without_a_budget(slow):
    import privgate

    model, members, nonmembers = constant_model()
    policy = {
        "name": "p", "sensitivity": "internal", "release": "api", "attacks": {"loss": {}, "slow": {}},
        "checks": [{"id": "acc", "attack": "best", "metric": "accuracy", "max": 0.8}],
    }  # fmt: skip
    from privgate import Policy

    report = privgate.check(model, Policy.model_validate(policy), members, nonmembers)
    assert report.verdict == "pass" and {a.name: a.status for a in report.attacks} == {"loss": "ran", "slow": "ran"}


PLUGIN_TEST = """
from pipeline_cases import constant_model
from pytest_privgate import assert_mia_below


def test_mia():
    assert_mia_below(*constant_model(), accuracy=0.8, attack=["loss", "slow"])
"""


def test_the_plugin_budget_names_what_did_not_run_in_the_message_and_summary(pytester, slow):
    from pathlib import Path

    pytester.makepyfile(pipeline_cases=(Path(__file__).parent / "pipeline_cases.py").read_text(), test_b=PLUGIN_TEST)
    result = pytester.runpytest("--privgate-budget", "60", "-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*assert_mia_below inconclusive*",
            "*not run for want of time (budget_s = 60 s): slow (≈ 8.6e+04 s)",
            "*privgate: privacy checks*",
            "  not run for want of time (budget_s = 60 s): slow (≈ 8.6e+04 s)",
        ]
    )
    pytester.makeini("[pytest]\nprivgate_budget_s = 60\nprivgate_on_inconclusive = skip\n")
    result = pytester.runpytest("-rs", "-p", "no:cacheprovider")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["SKIPPED*not run for want of time (budget_s = 60 s): slow*"])
    result = pytester.runpytest("--privgate-budget", "soon", "-p", "no:cacheprovider")
    assert "privgate budget: expected a positive number of seconds, got 'soon'" in result.stderr.str()


def test_the_cli_budget_leaves_out_what_does_not_fit(case, tmp_path, monkeypatch, slow):
    from click.testing import CliRunner

    from privgate.cli import cli

    monkeypatch.chdir(tmp_path)
    (tmp_path / "p.yaml").write_text(
        "name: p\nsensitivity: internal\nrelease: api\nattacks: {loss: {}, slow: {}}\n"
        "checks:\n  - {id: auc, attack: best, metric: auc, max: 0.99}\n"
    )
    args = ["check", str(case.safe_ts), "--policy", "p.yaml", "--members", str(case.members),
            "--nonmembers", str(case.nonmembers), "--json", "r.json", "-q"]  # fmt: skip
    res = CliRunner().invoke(cli, [*args, "--budget", "60"])
    assert res.exit_code == 3, res.output
    report = json.loads((tmp_path / "r.json").read_text())
    assert {a["name"]: a["status"] for a in report["attacks"]} == {"loss": "ran", "slow": "skipped"}
    assert report["checks"][0]["status"] == "inconclusive"
    assert "did not run within the time budget of 60 s: slow" in " ".join(report["warnings"])
    res = CliRunner().invoke(cli, [*args, "--budget", "0"])
    assert res.exit_code == 2 and "--budget" in res.output
