"""Threads default to the cores this process may use (affinity, cgroup quota, $OMP_NUM_THREADS) that other work leaves
free; the report says why.

The cgroup readers are checked on cgroup trees written to a temporary folder
(v2, v1, hybrid, nested quotas, garbage), the CLI's order of precedence in
process (click's runner) and in one real process, and the pytest plugin's one
thread per xdist worker with pytester. The suite itself keeps one thread per
process: its CLI runs and plugin audits get ``$PRIVGATE_THREADS=1`` and its
in-process runs torch's one thread (``tests/conftest.py``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from cases import LOSS_ONLY

from privgate import RunOptions
from privgate.threads import (
    cgroup_cpus,
    default_threads,
    library_threads,
    max_threads,
    omp_threads,
    usable_cores,
)

pytest_plugins = ["pytester"]

AFFINITY = len(os.sched_getaffinity(0))


def free_of_usable(threads: tuple[int, str]) -> bool:
    """Whether ``threads`` is the default: the usable cores other work leaves free (tests/test_budget.py: the rule)."""
    n, reason = threads
    cores = usable_cores()
    return 1 <= n <= cores.n and reason.startswith(f"{cores.reason}, {n} of them free (")


def tree(tmp_path: Path, proc: str, files: dict[str, str]) -> tuple[Path, Path]:
    """A cgroup mount under ``tmp_path/cgroup`` holding ``files``, and a ``/proc/self/cgroup`` saying ``proc``."""
    root = tmp_path / "cgroup"
    root.mkdir()
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    (tmp_path / "proc_cgroup").write_text(proc)
    return root, tmp_path / "proc_cgroup"


@pytest.mark.parametrize(
    "proc, files, cpus",
    [
        ("0::/\n", {"cpu.max": "150000 100000\n"}, 1.5),  # a container's --cpus 1.5 (cgroup v2)
        ("0::/\n", {"cpu.max": "max 100000\n"}, None),  # no quota
        # a job's cgroup without a quota inside a slice with one: the parent binds
        ("0::/user.slice/job\n", {"user.slice/cpu.max": "200000 100000", "user.slice/job/cpu.max": "max 100000"}, 2.0),
        ("0::/a\n", {"a/cpu.max": "300000 100000", "cpu.max": "100000 100000"}, 1.0),  # the smallest binds
        (
            "4:cpu,cpuacct:/docker/abc\n",
            {"cpu,cpuacct/docker/abc/cpu.cfs_quota_us": "50000", "cpu,cpuacct/docker/abc/cpu.cfs_period_us": "100000"},
            0.5,
        ),  # v1
        ("2:cpu:/\n", {"cpu/cpu.cfs_quota_us": "-1", "cpu/cpu.cfs_period_us": "100000"}, None),  # v1, no quota
        ("1:cpu:/\n0::/\n", {"unified/cpu.max": "400000 100000"}, 4.0),  # hybrid: v2 mounted at unified/
        ("0::/\n", {"cpu.max": "lots of cpu\n"}, None),  # garbage is no quota
        ("", {}, None),  # nothing readable (not Linux, no /proc)
    ],
)
def test_the_cgroup_quota_is_read_from_v1_v2_and_their_parents(tmp_path, proc, files, cpus):
    root, proc_cgroup = tree(tmp_path, proc, files)
    assert cgroup_cpus(root, proc_cgroup) == cpus
    n, reason = usable_cores(root, proc_cgroup)
    if cpus is not None and int(cpus) < AFFINITY:
        assert n == max(1, int(cpus))  # rounded down: a throttled thread holds up its siblings
        assert reason.startswith(f"the cores this process may use: its cgroup's CPU quota of {cpus:g} CPUs")
    else:
        assert n == AFFINITY and reason.startswith("the cores this process may use (CPU affinity")


def test_omp_num_threads_is_read_as_openmp_reads_it():
    assert [omp_threads(v) for v in ("4", " 3 ", "4,2", "", None, "0", "-2", "two")] == [4, 3, 4, None, None, None] + [
        None,
        None,
    ]
    assert default_threads("3") == (3, "$OMP_NUM_THREADS=3")
    assert default_threads("100000") == (max_threads(), f"$OMP_NUM_THREADS=100000, capped at {max_threads()}")
    assert free_of_usable(default_threads(None)) and free_of_usable(default_threads("not a number"))


def test_a_library_call_takes_torchs_own_setting():
    """Below the front doors nothing reads the environment: threads=None is torch's setting (here, the suite's 1)."""
    assert torch.get_num_threads() == 1
    assert library_threads() == (1, "torch's thread setting in this process (torch.get_num_threads() = 1)")
    run = RunOptions().resolved()
    assert (run.threads, run.threads_reason) == library_threads()
    assert RunOptions(threads=2).resolved().threads_reason == "threads=2 was asked for"


def test_without_torch_a_library_call_takes_the_pools_setting(monkeypatch):
    """A process that never imported torch (a scikit-learn audit through the API) is not made to import it: threads=None
    is the loaded BLAS and OpenMP pools' setting (threadpoolctl's), capped the same way."""
    from threadpoolctl import threadpool_limits

    monkeypatch.setitem(sys.modules, "torch", None)  # what sys.modules.get("torch") gives before torch is imported
    with threadpool_limits(limits=1):
        assert library_threads() == (1, "the BLAS and OpenMP pools' thread setting in this process (threadpoolctl: 1)")
        run = RunOptions(device="cpu").resolved()
    assert (run.threads, run.threads_reason) == (1, "the BLAS and OpenMP pools' thread setting in this process "
                                                    "(threadpoolctl: 1)")  # fmt: skip


def test_with_ray_each_task_defaults_to_one_thread():
    """A Ray task asks the cluster for ``threads`` CPUs on some node: this machine's cores are not the default."""
    from privgate.cli.threads import threads_setting
    from privgate.threads import RAY_DEFAULT

    run = RunOptions(executor="ray").resolved()
    assert (run.threads, run.threads_reason) == RAY_DEFAULT == (1, "one thread per Ray task (the cluster runs the "
                                                                   "tasks side by side)")  # fmt: skip
    assert threads_setting(None, executor="ray") == {"threads": 1, "threads_reason": RAY_DEFAULT.reason}
    assert threads_setting(None, 3, Path("privgate.toml"), "ray") == {
        "threads": 3,
        "threads_reason": "'threads = 3' in privgate.toml",
    }


def _args(case, folder: Path) -> list[str]:
    (folder / "loss.yaml").write_text(LOSS_ONLY)
    return ["check", str(case.safe_ts), "--policy", str(folder / "loss.yaml"), "--members", str(case.members),
            "--nonmembers", str(case.nonmembers), "--json", "r.json", "-q"]  # fmt: skip


def test_the_cli_says_where_its_threads_come_from(case, tmp_path, monkeypatch):
    """Flag, $PRIVGATE_THREADS, the config, $OMP_NUM_THREADS, the usable cores: the report names which."""
    from click.testing import CliRunner

    from privgate.cli import cli

    monkeypatch.chdir(tmp_path)

    def environment(*extra: str, **env: str | None) -> tuple[int, str]:
        res = CliRunner().invoke(cli, [*_args(case, tmp_path), *extra], env={"PRIVGATE_THREADS": None, **env})
        assert res.exit_code == 0, res.output
        e = json.loads((tmp_path / "r.json").read_text())["environment"]
        return e["threads"], e["threads_reason"]

    assert environment(OMP_NUM_THREADS="1") == (1, "$OMP_NUM_THREADS=1")
    assert free_of_usable(environment(OMP_NUM_THREADS=None))
    assert environment("--threads", "2") == (2, "--threads=2")
    assert environment(PRIVGATE_THREADS="2") == (2, "$PRIVGATE_THREADS=2")
    (tmp_path / "privgate.toml").write_text("threads = 2\n")
    assert environment(OMP_NUM_THREADS="1") == (2, "'threads = 2' in privgate.toml")


def test_a_user_process_defaults_to_its_cores(case, tmp_path):
    """As a user runs it: no flag, no variable; the threads are the cores this process may use, less busy ones."""
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "PRIVGATE_THREADS", "OMP_WAIT_POLICY")}
    out = subprocess.run(
        [sys.executable, "-m", "privgate.cli", *_args(case, tmp_path)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    e = json.loads((tmp_path / "r.json").read_text())["environment"]
    assert free_of_usable((e["threads"], e["threads_reason"]))
    assert e["threads_reason"].startswith(f"the cores this process may use (CPU affinity {AFFINITY} of")


PLUGIN_TEST = """
from pipeline_cases import constant_model


def test_audit(privgate_audit):
    assert privgate_audit(*constant_model(), policy="loss.yaml").verdict == "pass"
"""


def test_the_pytest_plugin_gives_each_xdist_worker_one_thread(pytester, monkeypatch):
    pytester.makepyfile(pipeline_cases=(Path(__file__).parent / "pipeline_cases.py").read_text(), test_t=PLUGIN_TEST)
    (pytester.path / "loss.yaml").write_text(LOSS_ONLY)

    def threads(**env: str | None) -> tuple[int, str]:
        for k, v in {"PYTEST_XDIST_WORKER": None, "PRIVGATE_THREADS": None, **env}.items():
            monkeypatch.setenv(k, v) if v is not None else monkeypatch.delenv(k, raising=False)
        pytester.runpytest("--privgate-report", "out", "-p", "no:cacheprovider").assert_outcomes(passed=1)
        (report,) = (pytester.path / "out").iterdir()
        e = json.loads(report.read_text())["environment"]
        report.unlink()
        return e["threads"], e["threads_reason"]

    assert threads(PYTEST_XDIST_WORKER="gw3", OMP_NUM_THREADS=None) == (1, "one thread per pytest-xdist worker (gw3)")
    assert free_of_usable(threads(OMP_NUM_THREADS=None))  # a single pytest process: the CLI's default
    assert threads(PRIVGATE_THREADS="2", PYTEST_XDIST_WORKER="gw0") == (2, "$PRIVGATE_THREADS=2")
    monkeypatch.setenv("PRIVGATE_THREADS", "0")
    result = pytester.runpytest("-p", "no:cacheprovider")
    assert "$PRIVGATE_THREADS: threads must be a positive integer, got 0." in result.stderr.str()
