"""The Ray executor (issue 15, part 5): the same tasks and seeds give the same numbers as the local executor.

One local Ray (1 CPU: each job's tasks run in one worker process, which imports torch and privgate once) is
started for the module and shut down after; the in-process runs use it, and the CLI in a process of its own joins
it through ``--ray-address``.
Every comparison is exact (``==`` on the parsed JSON, ``torch.equal`` on states), never
approximate. The CLI's reports compared are built in process (``tests/inproc.py``: the
CLI's report, see ``test_front_door.py``), except on the user's path of starting Ray
without an address, where the CLI's own process starts it.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import textwrap
import threading
from pathlib import Path
from typing import Any

import inproc
import numpy as np
import pytest
import torch
from cases import make_model, run_cli, stable, synthetic
from cli_fork import server_key

from privgate import PrivgateError, Recipe, RunOptions
from privgate.executors import ExecutorError, LocalExecutor, executor_for, task_groups

ray = pytest.importorskip("ray")

RECIPE = Recipe(model_factory=make_model, epochs=30, batch_size=64, lr=3e-3, name="tiny-mlp")

POLICY = textwrap.dedent(
    """
    name: refs
    sensitivity: confidential
    release: model
    confidence: 0.95
    attacks:
      lira: {models: 4}
      loss: {}
    checks:
      - {id: lira-auc, attack: lira, metric: auc, max: 0.6}
      - {id: loss-auc, attack: loss, metric: auc, max: 0.6}
    """
)

#: Wall times, dates, where the run happened and the notes saying so (with their seconds): they differ between runs.
VOLATILE = {"seconds", "duration_s", "started", "environment", "audit_seconds", "game_seconds", "trials_per_second",
            "notes"}  # fmt: skip


#: This worker's environment as the module's Ray found it (the fixture's).
ENV_BEFORE_RAY: dict[str, str] = {}


@pytest.fixture(scope="module")
def cluster() -> Any:
    """One local Ray of 1 CPU for the module: its GCS address (what ``--ray-address`` takes). Its 2 GPUs are
    stand-ins: Ray assigns them to tasks (``CUDA_VISIBLE_DEVICES``) as it does real ones; only a task that asks for
    one gets one.

    ``ray.init`` exports variables of its own (``PYTHONBREAKPOINT``, ``RAY_USAGE_STATS_ENABLED``); they are taken
    back at once: left in ``os.environ``, they would key a CLI fork server of their own (tests/cli_fork.py) for this
    module's runs and every later test's in this worker, one more server start of privgate's imports.
    """
    ENV_BEFORE_RAY.update(os.environ)
    ray.init(num_cpus=1, num_gpus=2, include_dashboard=False, log_to_driver=False, logging_level="warning")
    os.environ.clear()
    os.environ.update(ENV_BEFORE_RAY)
    try:
        yield ray.get_runtime_context().gcs_address
    finally:
        ray.shutdown()


def _stable(value: Any) -> Any:
    """The report without wall times, dates, the environment and notes (which give seconds and the executor)."""
    return stable(value, VOLATILE)


def _where(i: int) -> tuple[int, int]:
    return i * i, os.getpid()


def _visible(i: int) -> tuple[int, str | None, list[str]]:
    return os.getpid(), os.environ.get("CUDA_VISIBLE_DEVICES"), [str(g) for g in ray.get_gpu_ids()]


def test_each_gpu_task_sees_only_the_gpu_ray_assigned_it(cluster: str) -> None:
    """A task of a cuda run uses bare ``cuda``: the first GPU its process sees, which must be the one Ray assigned it.
    Ray sets ``CUDA_VISIBLE_DEVICES`` before each task, but CUDA reads it once per process, so each GPU task gets a
    worker process of its own (a reused worker would keep its first task's GPU)."""
    out = executor_for(RunOptions(executor="ray")).map(_visible, [(0,), (1,)], threads=1, gpus=1)  # one at a time
    assert all(len(ids) == 1 and visible == ids[0] for _, visible, ids in out), out
    assert out[0][0] != out[1][0], out  # the second task in a fresh worker process, not the first one's


def test_tasks_run_in_ray_workers_and_come_back_in_order(cluster: str, monkeypatch: pytest.MonkeyPatch) -> None:
    executor = executor_for(RunOptions(executor="ray"))
    out = executor.map(_where, [(i,) for i in range(6)], threads=1)
    assert [v for v, _ in out] == [0, 1, 4, 9, 16, 25]
    assert os.getpid() not in {pid for _, pid in out}  # worker processes, not this one
    assert executor.workers == 1
    with pytest.raises(ExecutorError, match="asks for --threads 2 CPUs but no node"):
        executor.map(_where, [(1,)], threads=2)  # would wait forever on a 1-CPU cluster
    monkeypatch.setattr(ray, "nodes", lambda: [{"Alive": True, "Resources": {"CPU": 2.0}}])  # a cluster of no GPU
    with pytest.raises(ExecutorError, match="no node of the Ray cluster has a GPU"):
        executor.map(_where, [(1,)], threads=1, gpus=1)
    assert task_groups(16, 8) == [range(0, 8), range(8, 16)] and task_groups(5, None) == [range(0, 5)]
    # the CLI runs after ray.init fork from the server the runs before it did
    assert ENV_BEFORE_RAY and server_key(dict(os.environ)) == server_key(ENV_BEFORE_RAY)


def test_ensemble_groups_are_identical_on_both_executors(cluster: str) -> None:
    from privgate.training.engine import train_ensemble
    from privgate.training.plan import model_seeds, paired_masks
    from privgate.training.trained import TrainSettings

    x, y = synthetic(300, seed=3, label_noise=0.3)
    masks, seeds = paired_masks(len(x), 8, 0), model_seeds(0, 8)
    here = train_ensemble(RECIPE, x, y, masks, seeds, TrainSettings(executor=LocalExecutor(), models_per_task=3))
    there = train_ensemble(
        RECIPE, x, y, masks, seeds, TrainSettings(executor=executor_for(RunOptions(executor="ray")), models_per_task=3)
    )
    assert len(here) == len(there) == 8 and here.kernel == there.kernel == "mlp"
    assert "8 models trained as 3 tasks of at most 3 (ray executor)" in there.notes
    for a, b in zip(here.models, there.models):
        assert a.keys() == b.keys() and all(torch.equal(a[n], b[n]) for n in a)
    assert np.array_equal(here.logits(x), there.logits(x))


def test_a_training_function_runs_one_model_per_ray_task_with_the_local_models(cluster: str, tmp_path: Path) -> None:
    """A user's train(x, y, seed, device) (issue 35): sent by value, one model per task, the same models."""
    from privgate.inputs.entrypoints import load_recipe
    from privgate.training.engine import train_ensemble
    from privgate.training.plan import model_seeds, paired_masks
    from privgate.training.trained import TrainSettings

    (tmp_path / "ray_trainer.py").write_text(
        textwrap.dedent(
            """
            import os
            import torch
            from torch import nn

            def train(x, y, seed, device):
                torch.manual_seed(seed)
                net = nn.Sequential(nn.Linear(20, 16), nn.ReLU(), nn.Linear(16, 4))
                opt = torch.optim.Adam(net.parameters(), lr=1e-2)
                for _ in range(20):
                    opt.zero_grad()
                    nn.functional.cross_entropy(net(torch.as_tensor(x)), torch.as_tensor(y)).backward()
                    opt.step()
                net.register_buffer("pid", torch.tensor(os.getpid()))
                return net
            """
        )
    )
    recipe = load_recipe("ray_trainer:train", [tmp_path])
    x, y = synthetic(200, seed=4, label_noise=0.3)
    masks, seeds = paired_masks(len(x), 4, 0), model_seeds(0, 4)
    here = train_ensemble(recipe, x, y, masks, seeds, TrainSettings(executor=LocalExecutor()))
    there = train_ensemble(recipe, x, y, masks, seeds, TrainSettings(executor=executor_for(RunOptions(executor="ray"))))
    assert here.kernel == there.kernel == "function"
    assert "4 models trained as 4 tasks of at most 1 (ray executor)" in there.notes
    assert {int(s["pid"]) for s in here.models} == {os.getpid()}
    assert os.getpid() not in {int(s["pid"]) for s in there.models}  # trained in Ray's workers
    for a, b in zip(here.models, there.models):
        assert all(torch.equal(a[n], b[n]) for n in a if n != "pid")


def test_check_report_numbers_are_identical_local_and_ray(cluster: str, case: Any, tmp_path: Path) -> None:
    """The CLI's report (in process: tests/inproc.py) on the module's Ray and on the local executor, the same settings.

    The CLI itself joining a cluster through ``--ray-address`` in a process of its own:
    test_a_ray_worker_that_dies_is_one_sentence_and_exit_2; starting its own Ray, with the local numbers:
    test_check_without_an_address_starts_ray_here_and_gives_the_local_numbers.
    """
    (tmp_path / "refs.yaml").write_text(POLICY)
    reports = {}
    for executor in ("local", "ray"):
        report = inproc.check(
            case.leaky_ts, tmp_path / "refs.yaml", case.members, case.nonmembers, recipe=case.recipe_spec,
            search_dirs=(case.dir,), models_per_task=2, executor=executor, ray_address=cluster,
        )  # fmt: skip
        assert report.exit_code == 1, report.summary  # the leaky model fails LiRA
        reports[executor] = json.loads(inproc.render(report, "json")["json"])
    local, remote = reports["local"], reports["ray"]
    assert _stable(local) == _stable(remote)
    assert [(c["value"], c["ci"], c["status"]) for c in local["checks"]] == [
        (c["value"], c["ci"], c["status"]) for c in remote["checks"]
    ]
    assert "4 models trained as 2 tasks of at most 2 (ray executor)" in remote["attacks"][0]["notes"]
    lira = remote["checks"][0]
    assert lira["status"] == "fail" and lira["ci"][0] > 0.6
    print("check values:", [(c["id"], c["value"], c["ci"], c["status"]) for c in remote["checks"]])
    assert remote["environment"]["executor"] == "ray" and local["environment"]["executor"] == "local"


def test_clones_of_a_sklearn_pipeline_train_as_ray_tasks_with_the_local_numbers(cluster: str, tables: Path) -> None:
    """A scikit-learn target's reference models (its clones, issue 34 item 3): one Ray task each, the same models."""
    from privgate import api

    def run(executor: str) -> Any:
        return api.check(
            tables / "rf.skops", tables / "clones.yaml", tables / "m.parquet", tables / "n.parquet",
            population=tables / "p.parquet", cache_dir=None, executor=executor, ray_address=cluster,
        )  # fmt: skip

    here, there = run("local"), run("ray")
    lira = {a.name: a for a in there.attacks}["lira"]
    assert lira.status == "ran" and "trained 4 reference model(s) as 4 Ray tasks" in lira.notes[0]
    engines = {a.name: a.extras.get("engine") for a in there.attacks}
    assert engines == {"loss": None, "lira": "as 4 Ray tasks", "rmia": "shared"}
    where = VOLATILE | {"engine"}  # where the models trained: the only difference
    assert stable(json.loads(here.to_json()), where) == stable(json.loads(there.to_json()), where)
    assert [(c.value, c.ci) for c in here.checks] == [(c.value, c.ci) for c in there.checks]


def test_check_without_an_address_starts_ray_here_and_gives_the_local_numbers(case: Any, tmp_path: Path) -> None:
    """The user's path: ``privgate check --executor ray`` with no address starts Ray on this machine (issue 24).

    Ray's processes die with the thread that started them; started from a helper
    thread that ended, the GCS was gone before the first task and the run hung
    until Ray ended the process with exit code 1 ("leaks"). The CLI runs in a
    subprocess with no ``--ray-address`` and no ``$RAY_ADDRESS``, so it starts
    its own Ray (not the module's), trains LiRA's reference models as Ray tasks
    and must give the local executor's numbers and exit code (the local run in process: the CLI's report,
    tests/test_front_door.py).
    """
    (tmp_path / "refs.yaml").write_text(POLICY)
    args = (
        "check", str(case.safe_ts), "--policy", str(tmp_path / "refs.yaml"), "--members", str(case.members),
        "--nonmembers", str(case.nonmembers), "--recipe", case.recipe_spec, "--cache-dir", "off",
        "--models-per-task", "2", "--quiet",
    )  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "PRIVGATE_DEBUG")}
    # nothing leaves this machine: Ray's usage statistics are on by default (examples/flower/app.py sets the same)
    env.update(COLUMNS="200", OMP_NUM_THREADS="1", RAY_USAGE_STATS_ENABLED="0")
    from privgate_cli import PRIVGATE

    out = tmp_path / "ray.json"
    ray_run = subprocess.run(
        [*PRIVGATE, *args, "--executor", "ray", "--json", str(out)],
        cwd=case.dir, env=env, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    here = inproc.check(
        case.safe_ts, tmp_path / "refs.yaml", case.members, case.nonmembers, recipe=case.recipe_spec,
        search_dirs=(case.dir,), models_per_task=2, executor="local",
    )  # fmt: skip
    # the regularised model: inconclusive (3) on 150 rows, never 1, the code Ray's own fatal exit gives
    assert here.exit_code == 3, here.summary
    assert ray_run.returncode == 3, ray_run.stdout + ray_run.stderr
    assert "GCS" not in ray_run.stderr and "Traceback" not in ray_run.stderr, ray_run.stderr
    local, there = json.loads(inproc.render(here, "json")["json"]), json.loads(out.read_text())
    assert _stable(local) == _stable(there)
    assert "4 models trained as 2 tasks of at most 2 (ray executor)" in there["attacks"][0]["notes"]
    assert there["environment"]["executor"] == "ray" and there["verdict"] == "inconclusive"


#: A recipe whose training kills the process it runs in: in a Ray worker, Ray reports the worker as crashed.
CRASHING_RECIPE = textwrap.dedent(
    """
    import os
    import signal

    from torch import nn
    from privgate.recipe import Recipe

    class Crashing(Recipe):
        def train(self, x, y, seed=0, model=None):
            os.kill(os.getpid(), signal.SIGKILL)

    RECIPE = Crashing(model_factory=lambda: nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 4)))
    """
)


def test_a_ray_worker_that_dies_is_one_sentence_and_exit_2(cluster: str, case: Any, tmp_path: Path) -> None:
    """A failure of Ray itself (here a worker killed under a task) is bad input's exit 2, never 1 ("leaks")."""
    (tmp_path / "refs.yaml").write_text(POLICY)
    (tmp_path / "crashing.py").write_text(CRASHING_RECIPE)
    out = tmp_path / "report.json"
    r = run_cli(
        "check", str(case.leaky_ts), "--policy", "refs.yaml", "--members", str(case.members),
        "--nonmembers", str(case.nonmembers), "--recipe", "crashing:RECIPE", "--cache-dir", "off",
        "--ray-address", cluster, "--json", str(out), cwd=tmp_path,
    )  # fmt: skip
    assert r.returncode == 2, r.stdout + r.stderr
    err = " ".join(r.stderr.split())
    assert err.startswith("error: Ray failed while running privgate's tasks (") and "Traceback" not in r.stderr, err
    assert not out.exists()


def test_fl_simulate_is_identical_local_and_ray(cluster: str) -> None:
    from test_federated import RECIPE as FL_RECIPE
    from test_federated import _digits

    from privgate.audits.federated.run import Settings, simulate

    reports = {}
    for name in ("local", "ray"):
        out = simulate(
            FL_RECIPE, _digits(), ["none", "ring"], nodes=4, rounds=2, local_epochs=1,
            settings=Settings(attacks=("loss", "correctness")), run=RunOptions(executor=name),
        )  # fmt: skip
        reports[name] = json.loads(out.report.to_json())
    assert [t["topology"]["name"] for t in reports["ray"]["topologies"]] == ["none", "ring"]
    assert reports["ray"]["environment"]["executor"] == "ray"
    assert _stable(reports["local"]) == _stable(reports["ray"])
    values = np.asarray(reports["ray"]["topologies"][0]["mia"]["values"], dtype=float)
    assert values.shape == (2, 4, 4) and np.isfinite(values[-1].diagonal()).all()
    print("fl none, final round, node 0 self-AUC:", values[-1, 0, 0])


def test_ldp_cells_are_identical_local_and_ray(cluster: str) -> None:
    from privgate import Dataset
    from privgate.audits.ldp import LdpSettings, audit_ldp

    x, y = synthetic(200, seed=7, label_noise=0.0)
    settings = LdpSettings(epsilons=(1.0, 4.0), trials=300, adversaries=("benign", "gradient_flip"))
    reports = {
        name: json.loads(audit_ldp(settings, recipe=RECIPE, data=Dataset(x, y), executor=executor).model_dump_json())
        for name, executor in (("local", LocalExecutor()), ("ray", executor_for(RunOptions(executor="ray"))))
    }
    assert _stable(reports["local"]) == _stable(reports["ray"])
    results = reports["ray"]["results"]
    assert len(results) == 2 * 2 * 2  # ε × adversaries × distinguishers, each 300 trials
    print("ldp lower bounds:", [(r["claimed_epsilon"], r["adversary"], r["epsilon_lb"]) for r in results])


def test_clip_search_runs_side_by_side_with_the_same_rows(cluster: str) -> None:
    from privgate.dp.clip import search_clip_norm
    from privgate.dpsgd.records import DPSettings

    x, y = synthetic(120, seed=5, label_noise=0.0)
    settings = DPSettings(epochs=1, batch_size=40, max_grad_norm=1.0, delta=1e-4)
    args = (RECIPE, x, y, 0, settings)
    here = search_clip_norm(*args, exponents=(1, -5))
    there = search_clip_norm(*args, exponents=(1, -5), executor=executor_for(RunOptions(executor="ray")))
    assert here == there
    assert len(here[1]) == 2 and here[0] in (10.0, 1e-5)
    print("clip search:", here)


def test_bad_address_is_one_sentence_exit_2_within_seconds(case: Any) -> None:
    r = run_cli(
        "check", str(case.leaky_ts), "--policy", "internal", "--members", str(case.members),
        "--nonmembers", str(case.nonmembers), "--executor", "ray", "--ray-address", "127.0.0.1:1", cwd=case.dir,
    )  # fmt: skip
    assert r.returncode == 2, r.stdout + r.stderr
    assert "no Ray cluster answers at --ray-address 127.0.0.1:1" in r.stderr and "Traceback" not in r.stderr
    assert len([line for line in r.stderr.splitlines() if line.strip()]) == 1
    from privgate.executors.ray import parse_address, probe

    with socket.socket() as server:  # a port that answers, but not as Ray (a web server, say)
        server.bind(("127.0.0.1", 0))
        server.listen()

        def answer() -> None:
            conn, _ = server.accept()
            with conn:
                conn.sendall(b"HTTP/1.0 400 Bad Request\r\n\r\n")

        threading.Thread(target=answer, daemon=True).start()
        address = f"127.0.0.1:{server.getsockname()[1]}"
        with pytest.raises(ExecutorError, match="answers, but not as a Ray cluster"):
            probe(address)

    assert parse_address("ray://head:10001") == ("head", 10001) and parse_address("auto") is None
    with pytest.raises(ExecutorError, match="is not host:port or ray://host:port"):
        parse_address("not an address")


def test_without_ray_the_cli_says_how_to_install_it(case: Any, tmp_path: Path) -> None:
    shadow = tmp_path / "noray" / "ray"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError(\"No module named 'ray'\")\n")
    r = run_cli(
        "check", str(case.leaky_ts), "--policy", "internal", "--members", str(case.members),
        "--nonmembers", str(case.nonmembers), "--executor", "ray", cwd=case.dir,
        env={"PYTHONPATH": str(tmp_path / "noray")},
    )  # fmt: skip
    assert r.returncode == 2, r.stdout + r.stderr
    assert "pip install 'privgate[ray]'" in r.stderr and "Traceback" not in r.stderr
    assert len([line for line in r.stderr.splitlines() if line.strip()]) == 1


def test_missing_extra_in_process(monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins

    real = builtins.__import__

    def no_ray(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "ray" or name.startswith("ray."):
            raise ImportError("No module named 'ray'")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_ray)
    with pytest.raises(ExecutorError, match=r"pip install 'privgate\[ray\]'") as err:
        executor_for(RunOptions(executor="ray"))
    assert isinstance(err.value, PrivgateError) and err.value.exit_code == 2


def test_config_keys_and_options() -> None:
    from privgate.inputs.config import KEYS

    assert {"executor", "ray_address", "models_per_task"} <= set(KEYS)
    assert RunOptions(executor="ray", ray_address="10.0.0.5:6379", models_per_task=4).models_per_task == 4
    with pytest.raises(ValueError, match="models_per_task"):
        RunOptions(models_per_task=0)
    with pytest.raises(ValueError, match="executor"):
        RunOptions(executor="dask")
