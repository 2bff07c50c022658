"""--threads is a parameter that reaches every attack: torch, BLAS and scikit-learn's OpenMP are held to it."""

from __future__ import annotations

import json

import pytest
import threadpoolctl
import torch
from cases import run_cli, synthetic

from privgate import AuditData, Dataset, Target, check_model
from privgate.attacks import blind
from privgate.inputs.data import load_dataset
from privgate.policy import parse_policy

POLICY = """
name: threads
sensitivity: internal
release: api
attacks: {loss: {}, blind: {folds: 2}}
checks:
  - {id: auc, attack: loss, metric: auc, max: 0.9}
"""


def _pools() -> list[int]:
    """Threads of every BLAS and OpenMP library loaded in this process."""
    return sorted({i["num_threads"] for i in threadpoolctl.threadpool_info() if i["user_api"] in ("blas", "openmp")})


@pytest.mark.parametrize("threads, expected", [(2, 2), (None, 1)])
def test_sklearn_fits_are_held_to_threads(case, monkeypatch, threads, expected):
    seen: list[tuple[int, list[int]]] = []
    real = blind._classifier

    class Spy:
        """The blind baseline's classifier, recording the thread pools while it fits."""

        def __init__(self, clf):
            self.clf = clf

        def fit(self, x, y):
            seen.append((torch.get_num_threads(), _pools()))
            self.clf.fit(x, y)
            return self

        def decision_function(self, x):
            return self.clf.decision_function(x)

    monkeypatch.setattr(blind, "_classifier", lambda kind, seed, *rest: Spy(real(kind, seed, *rest)))
    x, y = synthetic(200, seed=3, label_noise=0.4)
    data = AuditData(load_dataset(case.members), load_dataset(case.nonmembers), Dataset(x, y, "population"))
    before = (torch.get_num_threads(), _pools())
    report = check_model(Target.load(case.safe_ts), data, parse_policy(POLICY), threads=threads)
    assert [a.status for a in report.attacks] == ["ran", "ran"]
    assert seen == [(expected, [expected])] * 2  # one fit per fold, torch and every BLAS/OpenMP pool at the setting
    assert (torch.get_num_threads(), _pools()) == before  # restored after
    assert report.environment["threads"] == expected


def test_threads_flag_env_and_config_reach_the_report(case, tmp_path, monkeypatch):
    """Flag over $PRIVGATE_THREADS over privgate.toml: the precedence through the click group in-process
    (CliRunner, in tmp_path), the flag-over-environment case and the refused value as a user runs them."""
    from click.testing import CliRunner

    from privgate.cli import cli

    args = [
        "check",
        str(case.safe_ts),
        "--policy",
        "public",
        "--members",
        str(case.members),
        "--nonmembers",
        str(case.nonmembers),
        "--json",
        "r.json",
    ]
    monkeypatch.chdir(tmp_path)  # privgate.toml is found from the working directory
    monkeypatch.delenv("PRIVGATE_THREADS", raising=False)

    def threads(*extra, env=None, subprocess=False) -> int:
        if subprocess:
            r = run_cli(*args, *extra, cwd=tmp_path, env=env)
            assert r.returncode == 0, r.stderr
        else:
            res = CliRunner().invoke(cli, [*args, *extra], env=env, prog_name="privgate")
            assert res.exit_code == 0, res.output
        return json.loads((tmp_path / "r.json").read_text())["environment"]["threads"]

    assert threads() == 1
    assert threads("--threads", "2") == 2
    (tmp_path / "privgate.toml").write_text("threads = 3\n")
    assert threads() == 3
    assert threads(env={"PRIVGATE_THREADS": "2"}) == 2  # the environment variable is the flag's default
    assert threads("--threads", "1", env={"PRIVGATE_THREADS": "2"}, subprocess=True) == 1
    bad = run_cli(*args, cwd=tmp_path, env={"PRIVGATE_THREADS": "0"})
    assert bad.returncode == 2 and "PRIVGATE_THREADS" in bad.stderr and "Traceback" not in bad.stderr


def test_more_than_one_thread_lets_openmp_sleep_unless_the_user_chose():
    """--threads > 1 sets OMP_WAIT_POLICY=PASSIVE for OpenMP before torch loads it (spinning threads stall a busy
    machine: benchmarks/peers/cold_start.py); a user's own setting and a torch already loaded are left alone."""
    import os
    import subprocess
    import sys

    # what OpenMP will read: the C environment, as a child process inherits it; one fresh process (torch not yet
    # loaded) tries the three cases in turn: no choice, the user's own choice, then no choice once torch is loaded
    probe = (
        "import os, subprocess, sys\n"
        "from privgate.cli.guard import passive_openmp\n"
        "def seen(chosen):\n"
        "    os.unsetenv('OMP_WAIT_POLICY')\n"
        "    if chosen: os.putenv('OMP_WAIT_POLICY', chosen)\n"
        "    passive_openmp(chosen)\n"
        "    return subprocess.run(['printenv', 'OMP_WAIT_POLICY'], capture_output=True, text=True).stdout.strip()\n"
        "first = [seen(None), seen('ACTIVE')]\n"
        "assert 'torch' not in sys.modules\n"
        "import torch\n"
        "print(*first, seen(None) or '-')\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["PASSIVE", "ACTIVE", "-"]


#: A fresh interpreter: numpy's BLAS held once, then scikit-learn's OpenMP loaded and held through the same cache.
LATE_POOL = """
import json, sys
import numpy, threadpoolctl
from privgate.threads import native_threads, pools

def held(n):
    with native_threads(n):
        return sorted((p["user_api"], p["num_threads"]) for p in threadpoolctl.threadpool_info())

first = held(1)
same = pools() is pools()
import sklearn.ensemble  # noqa: F401  (its OpenMP runtime loads now)
print(json.dumps({"first": first, "same": same, "after": held(1), "outside": threadpoolctl.threadpool_info()}))
"""


def test_a_pool_loaded_after_the_first_hold_is_held_too(tmp_path):
    """The pools' controller is reused until an import (finding the pools costs ~7 ms a time) and found again
    after one: an OpenMP runtime loaded after the first hold is held to the same threads."""
    import subprocess
    import sys

    env = {"OMP_NUM_THREADS": "3", "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", LATE_POOL], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got["same"] is True
    assert got["first"] and {n for _, n in got["first"]} == {1}
    assert {api for api, _ in got["after"]} == {"blas", "openmp"}  # the OpenMP pool arrived with scikit-learn
    assert {n for _, n in got["after"]} == {1}
    assert min(p["num_threads"] for p in got["outside"]) > 1  # every pool is given back after the hold
