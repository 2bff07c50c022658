"""The CLI fork servers (``tests/cli_fork.py``) give each run the process a fresh interpreter would (issue 45 item 6).

A variable read at import (``OMP_NUM_THREADS``: torch sizes its thread pool when it loads) reaches a forked run
only through a server started with it: runs are served by environment, never by a stale server.
"""

from __future__ import annotations

import ast
import json
import os
from pathlib import Path

import cli_fork
import pytest
from cases import run_cli

import privgate

#: A user's module that a config names (code the run imports): it records what torch's thread pool was sized to.
PROBE = (
    "import json, torch\nfrom pathlib import Path\n"
    'Path(__file__).with_name("threads.json").write_text(json.dumps(torch.get_num_threads()))\n\n'
    "def data():\n    return 1\n"
)


def _threads(repo: Path, **env: str) -> int:
    (repo / "threads.json").unlink(missing_ok=True)
    r = run_cli("check", cwd=repo, env=env)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr  # the probe's data is not a data set
    return json.loads((repo / "threads.json").read_text())


def test_a_run_gets_the_thread_pool_its_environment_sizes(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    config = 'model = "m.pt"\npolicy = "internal"\nnonmembers = "n.npz"\nmembers = "probe:data"\n'
    (repo / "privgate.toml").write_text(config)
    (repo / "probe.py").write_text(PROBE)
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("torch caps its thread pool at the usable cores: one core cannot tell 2 threads from 1")
    # what `OMP_NUM_THREADS=2 python -m privgate.cli check` reports, and the suite's default of 1 after it
    assert _threads(repo, OMP_NUM_THREADS="2") == 2
    assert _threads(repo) == 1


def test_servers_are_keyed_by_everything_but_the_per_run_variables():
    base = {"PATH": "/usr/bin", "OMP_NUM_THREADS": "1", "XDG_CACHE_HOME": "/a", "PRIVGATE_THREADS": "1"}
    key = cli_fork.server_key(base)
    per_run = {"XDG_CACHE_HOME": "/b", "XDG_CONFIG_HOME": "/c", "PRIVGATE_CACHE_KEY": "k", "PYTEST_CURRENT_TEST": "t"}
    per_run["MLFLOW_TRACKING_URI"] = "http://127.0.0.1:1"
    per_run["_MLFLOW_TELEMETRY_SESSION_ID"] = "0" * 32  # importing mlflow exports it, its telemetry unsets it
    assert cli_fork.server_key({**base, **per_run}) == key
    for name, value in {"OMP_NUM_THREADS": "3", "HF_HUB_OFFLINE": "1", "LD_PRELOAD": "x.so", "LANG": "C"}.items():
        assert cli_fork.server_key({**base, name: value}) != key, name


def test_what_importing_mlflow_exports_keeps_the_runs_server(tmp_path, monkeypatch):
    """Importing mlflow (test_mlflow.py's module, collected by every worker) exports _MLFLOW_TELEMETRY_SESSION_ID and
    its telemetry unsets it later: runs before and after are served by the same server, as a run reads it itself."""
    monkeypatch.delenv("_MLFLOW_TELEMETRY_SESSION_ID", raising=False)
    assert run_cli("--version", cwd=tmp_path).returncode == 0
    before = cli_fork.live_servers()
    monkeypatch.setenv("_MLFLOW_TELEMETRY_SESSION_ID", "0" * 32)
    assert run_cli("--version", cwd=tmp_path).returncode == 0
    assert cli_fork.live_servers() == before


def test_a_worker_keeps_at_most_its_bound_of_servers_ending_the_least_recently_used(monkeypatch):
    closed: list[str] = []

    class Fake:
        def __init__(self, env):
            self.name = env["OMP_NUM_THREADS"]
            self.proc = self

        def poll(self):
            return None

        def close(self):
            closed.append(self.name)

    monkeypatch.setattr(cli_fork, "_Server", Fake)
    monkeypatch.setattr(cli_fork, "_servers", type(cli_fork._servers)())
    ask = [cli_fork.server_for({"OMP_NUM_THREADS": n}, most=2).name for n in ("1", "2", "1", "3", "1", "2")]
    assert ask == ["1", "2", "1", "3", "1", "2"]
    assert closed == ["2", "3"] and [s.name for s in cli_fork._servers.values()] == ["1", "2"]


def test_privgate_reads_no_environment_variable_outside_click():
    """Why ``PRIVGATE_*`` may differ between a server and its runs: privgate never reads ``os.environ`` or
    ``os.getenv`` itself (its variables are click ``envvar`` options, read per run by the ``privgate`` group)."""
    readers = {"environ", "environb", "getenv", "getenvb"}
    found = [
        f"{path.name}:{node.lineno}"
        for path in Path(privgate.__file__).parent.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if (isinstance(node, ast.Attribute) and node.attr in readers)
        or (isinstance(node, ast.alias) and node.name in readers)
    ]
    assert found == []


def test_the_suite_sets_the_cache_folder_torch_compiler_exports_before_any_run():
    """The first torch.export or peft import of a worker loads torch._inductor, which writes TORCHINDUCTOR_CACHE_DIR
    into ``os.environ``: conftest sets torch's own default first, so the runs after it keep their server."""
    import importlib.util

    import torch

    # torch's default, read from its module without importing torch._inductor (seconds of imports)
    path = Path(torch.__file__).parent / "_inductor" / "runtime" / "cache_dir_utils.py"
    spec = importlib.util.spec_from_file_location("inductor_cache_dir_utils", path)
    assert spec is not None and spec.loader is not None
    utils = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(utils)
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == os.path.abspath(utils.default_cache_dir())
