"""pytest_privgate: the assertions (called directly) and the plugin (run with pytester, as a user would)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import unittest
from pathlib import Path

import numpy as np
import pytest
import torch
from pipeline_cases import constant_model, leaky_tree

import privgate
from privgate import AuditData, Dataset
from pytest_privgate import (
    PrivacyAssertionError,
    assert_epsilon_below,
    assert_inversion_below,
    assert_mia_below,
    assert_policy,
)

pytest_plugins = ["pytester"]

CASES = (Path(__file__).parent / "pipeline_cases.py").read_text()


@pytest.fixture(scope="module")
def leaky():
    return leaky_tree()


@pytest.fixture(scope="module")
def blind():
    return constant_model()


# --------------------------------------------------------------------------- assertions


def test_mia_failure_names_attack_metric_value_interval_threshold_and_sizes(leaky):
    with pytest.raises(PrivacyAssertionError) as info:
        assert_mia_below(*leaky, accuracy=0.8)
    report = info.value.report
    c = report.checks[0]
    assert report.verdict == "fail" and c.status == "fail" and c.value > 0.8
    msg = str(info.value)
    assert msg.startswith("assert_mia_below failed (policy 'assert_mia_below' on <DecisionTreeClassifier>):")
    assert f"attack best → {c.chosen_attack}" in msg
    m = sum(a.status == "ran" for a in report.attacks)
    assert m >= 5 and c.confidence == pytest.approx(1 - 0.05 / m)  # Bonferroni over the attacks that ran
    assert f"metric accuracy = {c.value:.3f} [{c.ci[0]:.3f}, {c.ci[1]:.3f}] ({c.confidence:.1%} CI)" in msg
    assert "threshold ≤ 0.8" in msg
    assert "evaluation split 100 members / 100 non-members; audit set 200 members / 200 non-members" in msg


def test_mia_pass_returns_the_report(blind):
    report = assert_mia_below(*blind, accuracy=0.8, auc=0.8)
    assert report.verdict == "pass"
    assert [c.id for c in report.checks] == ["mia-accuracy", "mia-auc"]
    assert all(c.ci[1] <= 0.8 for c in report.checks)
    # 'best' ran the black-box membership attacks: not label-only, white-box or attribute ones (tests/test_budget.py)
    ran = {a.name for a in report.attacks}
    assert {"loss", "confidence", "learned"} <= ran
    assert not ran & {"correctness", "label_only", "attribute", "inversion", "gradient", "blind"}


def test_mia_with_named_attacks_and_torch_inputs():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(12, 4))
    rng = np.random.default_rng(3)
    members = (
        torch.from_numpy(rng.normal(size=(120, 12)).astype(np.float32)),
        torch.from_numpy(rng.integers(0, 4, 120)),
    )
    nonmembers = (rng.normal(size=(120, 12)).astype(np.float32), rng.integers(0, 4, 120))
    report = assert_mia_below(model, members, nonmembers, auc=0.9, attack=["loss", "confidence"])
    assert {a.name for a in report.attacks} == {"loss", "confidence"}
    assert report.checks[0].chosen_attack in ("loss", "confidence")
    single = assert_mia_below(model, members, nonmembers, auc=0.9, attack="loss")
    assert single.checks[0].attack == "loss" and single.checks[0].chosen_attack is None


def test_inconclusive_fails_by_default_and_skips_on_request(blind):
    with pytest.raises(PrivacyAssertionError) as info:
        assert_mia_below(*blind, tpr_at_fpr=0.1, fpr=0.001)
    msg = str(info.value)
    assert msg.startswith("assert_mia_below inconclusive")
    assert "inconclusive — check mia-tpr-at-fpr" in msg and "1000 non-members" in msg
    with pytest.raises(unittest.SkipTest, match="inconclusive"):
        assert_mia_below(*blind, tpr_at_fpr=0.1, fpr=0.001, on_inconclusive="skip")
    with pytest.raises(ValueError, match="on_inconclusive"):
        assert_mia_below(*blind, accuracy=0.8, on_inconclusive="ignore")


def test_epsilon_bound(leaky, blind):
    with pytest.raises(PrivacyAssertionError, match=r"proves ε ≥") as info:
        assert_epsilon_below(*leaky, epsilon=1.0)
    assert info.value.report.checks[0].value > 1.0
    # nothing leaks from a constant model: the data could prove ε up to ~2.8, it proves none
    report = assert_epsilon_below(*blind, epsilon=2.0)
    assert report.verdict == "pass" and report.checks[0].value < 2.0
    # a bound above what 100 + 100 evaluation examples could ever prove cannot be tested: inconclusive, not a pass
    with pytest.raises(PrivacyAssertionError, match="cannot be tested") as info:
        assert_epsilon_below(*blind, epsilon=10.0)
    assert info.value.report.verdict == "inconclusive"


def test_inversion_without_weights_is_inconclusive_never_a_pass(leaky):
    with pytest.raises(PrivacyAssertionError) as info:
        assert_inversion_below(*leaky, similarity=0.5)
    assert "inconclusive: attack not available" in str(info.value)
    assert info.value.report.verdict == "inconclusive"
    with pytest.raises(unittest.SkipTest, match="attack not available"):
        assert_inversion_below(*leaky, similarity=0.5, on_inconclusive="skip")


def test_inversion_on_a_torch_model_is_measured():
    from pipeline_cases import random_labels

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(12, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    report = assert_inversion_below(model, random_labels(120, 0), random_labels(120, 1), similarity=0.5)
    c = report.checks[0]
    assert (c.attack, c.metric, c.status) == ("inversion", "similarity", "pass")
    assert c.ci[0] <= c.value <= c.ci[1] <= 0.5


def test_assert_policy_accepts_tuple_mapping_and_auditdata(leaky, blind):
    assert assert_policy(blind[0], blind[1:], "internal").verdict == "pass"
    assert (
        assert_policy(blind[0], {"members": blind[1], "nonmembers": blind[2]}, privgate.load_policy("internal")).verdict
        == "pass"
    )
    data = AuditData(Dataset(*leaky[1]), Dataset(*leaky[2]))
    with pytest.raises(PrivacyAssertionError, match="assert_policy failed") as info:
        assert_policy(leaky[0], data, "internal")
    assert info.value.report.checks[0].id == "mia-accuracy"
    with pytest.raises(TypeError, match="members"):
        assert_policy(blind[0], {"members": blind[1]}, "internal")


def test_no_bound_is_a_usage_error(blind):
    with pytest.raises(TypeError, match="at least one bound"):
        assert_mia_below(*blind)


def test_privgate_reexports_lazily_without_importing_pytest():
    code = (
        "import sys, privgate, pytest_privgate as a\n"
        "assert 'pytest' not in sys.modules\n"
        "assert privgate.assert_mia_below is a.assert_mia_below and privgate.assert_policy is a.assert_policy\n"
        "from privgate import assert_epsilon_below, assert_inversion_below\n"
        "assert 'pytest' not in sys.modules\n"
        "import pytest_privgate.plugin\n"
        "print('ok')\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.stdout.strip() == "ok", r.stderr
    # the plugin, loaded in every pytest session, does not import the engine (torch) until an audit runs
    r = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, pytest_privgate.plugin; print('torch' in sys.modules, 'privgate.gate' in sys.modules)",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.stdout.split() == ["False", "False"], r.stderr


# --------------------------------------------------------------------------- the plugin, via pytester

USER_TESTS = """
import pytest
from pipeline_cases import constant_model, leaky_tree
from pytest_privgate import assert_mia_below


def test_policy_fixture(privgate_policy):
    assert privgate_policy.name == "team"


def test_audit_fixture(privgate_audit):
    report = privgate_audit(*leaky_tree())
    assert report.verdict == "fail"


@pytest.mark.privacy
def test_marked(privgate_audit):
    assert_mia_below(*constant_model(), accuracy=0.8)


def test_not_privacy():
    assert True
"""

TEAM_POLICY = """\
name: team
sensitivity: internal
release: api
attacks: {loss: {}, correctness: {}}
checks:
  - {id: mia-accuracy, attack: best, metric: accuracy, max: 0.8}
"""


def _user_project(pytester: pytest.Pytester, ini: str = "") -> None:
    pytester.makepyfile(pipeline_cases=CASES, test_user=USER_TESTS)
    (pytester.path / "policies").mkdir()
    (pytester.path / "policies" / "team.yaml").write_text(TEAM_POLICY)
    pytester.makeini("[pytest]\nprivgate_policy = policies/team.yaml\n" + ini)


def test_plugin_fixtures_marker_summary_and_json_reports(pytester: pytest.Pytester):
    _user_project(pytester)
    result = pytester.runpytest("-m", "privacy", "--privgate-report", "out", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=3, deselected=1)  # fixture users are marked `privacy` automatically
    result.stdout.fnmatch_lines(
        [
            "*= privgate: privacy checks =*",
            "test_user.py::test_audit_fixture [[]privgate_audit, policy team[]]: fail",
            "  fail * mia-accuracy * best → * accuracy = 0.* [[]0.*, 0.*[]] ≤ 0.8 (n = 100/100)",
            "test_user.py::test_marked [[]assert_mia_below, policy assert_mia_below[]]: pass",
            "  pass * mia-accuracy *",
            "2 privacy checks in 2 audits: 1 pass, 1 fail, 0 inconclusive",
            f"JSON reports: {pytester.path / 'out'}",
        ]
    )
    files = sorted((pytester.path / "out").iterdir())
    assert [f.name for f in files] == ["test_user.py_test_audit_fixture-1.json", "test_user.py_test_marked-1.json"]
    reports = [privgate.Report.from_json(f.read_text()) for f in files]
    assert [r.verdict for r in reports] == ["fail", "pass"]
    assert reports[0].policy["name"] == "team" and reports[0].checks[0].value > 0.8


def test_marker_is_registered_with_a_description(pytester: pytest.Pytester):
    result = pytester.runpytest("--markers")
    result.stdout.fnmatch_lines(["@pytest.mark.privacy: a privacy test *select with -m privacy*"])


def test_policy_option_beats_ini_and_a_missing_policy_is_an_error(pytester: pytest.Pytester):
    pytester.makepyfile(test_p="def test_p(privgate_policy):\n    assert privgate_policy.name == 'strict'\n")
    pytester.runpytest("--privgate-policy", "strict").assert_outcomes(passed=1)
    ini = pytester.makeini("[pytest]\nprivgate_policy = internal\n")
    pytester.runpytest("--privgate-policy", "strict").assert_outcomes(passed=1)
    pytester.runpytest().assert_outcomes(failed=1)
    ini.unlink()
    result = pytester.runpytest()
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*privgate_policy: no policy configured; pass --privgate-policy*"])
    result = pytester.runpytest("--privgate-policy", "no-such-policy")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*privgate_policy: unknown policy 'no-such-policy'*"])


def test_inconclusive_fails_or_skips_per_ini(pytester: pytest.Pytester):
    pytester.makepyfile(
        pipeline_cases=CASES,
        test_i=textwrap.dedent("""
        from pipeline_cases import constant_model
        from pytest_privgate import assert_mia_below

        def test_tpr():
            assert_mia_below(*constant_model(), tpr_at_fpr=0.05)
    """),
    )
    result = pytester.runpytest()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*assert_mia_below inconclusive*", "*1 privacy checks in 1 audits: 0 pass, 0 fail, 1 inconclusive*"]
    )
    pytester.makeini("[pytest]\nprivgate_on_inconclusive = skip\n")
    result = pytester.runpytest("-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["SKIPPED*assert_mia_below inconclusive*needs at least 1000 non-members*"])
    pytester.runpytest("--privgate-on-inconclusive", "fail").assert_outcomes(failed=1)


def test_plugin_can_be_disabled(pytester: pytest.Pytester):
    pytester.makepyfile(test_d="def test_d(privgate_audit):\n    pass\n")
    result = pytester.runpytest("-p", "no:privgate")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*fixture 'privgate_audit' not found*"])
    assert "privgate: privacy checks" not in result.stdout.str()


#: One file per inner xdist worker (``--dist loadfile``): a fixture audit under the team policy and a direct one.
WORKER_TESTS = """
from pipeline_cases import constant_model, leaky_tree
from pytest_privgate import assert_mia_below


def test_fixture(privgate_audit):
    assert privgate_audit(*leaky_tree(seed=SEED)).verdict == "fail"


def test_direct():
    assert_mia_below(*constant_model(seed=SEED), accuracy=0.8, attack="loss")
"""


def test_plugin_under_xdist_collects_every_worker(pytester: pytest.Pytester, monkeypatch):
    pytest.importorskip("xdist")
    _user_project(pytester)
    (pytester.path / "test_user.py").unlink()
    pytester.makepyfile(test_a=WORKER_TESTS.replace("SEED", "5"), test_b=WORKER_TESTS.replace("SEED", "7"))
    monkeypatch.delenv("PRIVGATE_THREADS")  # each worker's reports then name it: one thread per worker (gwN)
    result = pytester.runpytest_subprocess(
        "-n", "2", "--dist", "loadfile", "-p", "no:cacheprovider", "--privgate-report", "out", timeout=300
    )
    result.assert_outcomes(passed=4)
    out = result.stdout.str()
    assert out.count("privgate: privacy checks") == 1
    for test in (
        "test_a.py::test_fixture",
        "test_a.py::test_direct",
        "test_b.py::test_fixture",
        "test_b.py::test_direct",
    ):
        assert f"{test} [" in out
    result.stdout.fnmatch_lines(["4 privacy checks in 4 audits: 2 pass, 2 fail, 0 inconclusive"])
    reports = [json.loads(f.read_text()) for f in (pytester.path / "out").iterdir()]
    assert sorted(r["verdict"] for r in reports) == ["fail", "fail", "pass", "pass"]
    # the audits ran in both workers (one file each), and the controller's summary and folder hold them all
    assert sorted(r["environment"]["threads_reason"] for r in reports) == [
        f"one thread per pytest-xdist worker ({w})" for w in ("gw0", "gw0", "gw1", "gw1")
    ]
