"""``privgate check --mlflow``: the verdict, every check, the attack table and the reports in an MLflow run.

Against a real tracking server, as teams log: ``mlflow server`` with a SQLite
backend and its own artefact store, started once per test session on
127.0.0.1 (a free port) and stopped after; the CLI runs in a subprocess with
``MLFLOW_TRACKING_URI`` pointing at it, and what it logged is read back with
MLflow's own client. A server that is down or refuses is a warning line: the
report is written and the exit code is the verdict's.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest
from cases import run_cli
from pipeline_cases import torch_files

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("mlflow") is None, reason="the MLflow client is part of the test extra (privgate[mlflow])"
)

#: Seconds the server may take to start (database migrations on a busy 2-core runner take most of it).
START_S = 240


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2):
            return True
    except (urllib.error.URLError, OSError):
        return False


@pytest.fixture(scope="session")
def server(tmp_path_factory) -> str:
    """``mlflow server`` (SQLite backend, artefacts served by the server) on 127.0.0.1; its URL. Once per session."""
    d = tmp_path_factory.mktemp("mlflow-server")
    port = _free_port()
    cmd = [
        sys.executable, "-m", "mlflow", "server", "--backend-store-uri", f"sqlite:///{d / 'mlflow.db'}",
        "--artifacts-destination", str(d / "artifacts"), "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
    ]  # fmt: skip
    log = (d / "server.log").open("wb")
    # no job runner: MLflow 3 starts 7 extra worker processes for its GenAI jobs, which logging never uses
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_S
        while not _answers(f"{url}/health"):
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"mlflow server did not start: {(d / 'server.log').read_text()[-2000:]}")
            time.sleep(0.5)
        yield url
    finally:
        os.killpg(proc.pid, signal.SIGTERM)  # the server and its uvicorn worker: the group this fixture started
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:  # a throwaway server in a temporary folder: no need to wait longer
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()


@pytest.fixture(scope="module")
def mlflow():
    """MLflow's client, imported by the tests that use it: not at collection, which every pytest-xdist worker does
    (mlflow and what it imports are a quarter of a worker's collection CPU)."""
    import mlflow

    return mlflow


@pytest.fixture
def store(server, mlflow, monkeypatch) -> dict[str, str]:
    """The session's server and a fresh experiment, for this process and for the CLI's subprocess."""
    env = {"MLFLOW_TRACKING_URI": server, "MLFLOW_EXPERIMENT_NAME": f"privacy-{uuid.uuid4().hex[:8]}"}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("MLFLOW_RUN_ID", raising=False)
    mlflow.set_tracking_uri(server)
    mlflow.set_experiment(env["MLFLOW_EXPERIMENT_NAME"])
    yield env
    mlflow.set_tracking_uri(None)
    os.environ.pop("MLFLOW_EXPERIMENT_ID", None)  # set_experiment exports it for subprocesses; not for later tests


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return torch_files(tmp_path_factory.mktemp("model"))


def _check(files, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return run_cli(
        "check", str(files.model), "--policy", "internal", "--members", str(files.members), "--nonmembers",
        str(files.nonmembers), *args, env=env,
    )  # fmt: skip


def _registered_version(mlflow, name: str) -> str:
    client = mlflow.MlflowClient()
    client.create_registered_model(name)
    with mlflow.start_run(run_name="training") as run:
        pass
    return client.create_model_version(name, source=run.info.artifact_uri, run_id=run.info.run_id).version


def test_check_logs_verdict_checks_attacks_and_reports_and_tags_the_model_version(files, store, mlflow, tmp_path):
    name = f"scorer-{uuid.uuid4().hex[:8]}"
    version = _registered_version(mlflow, name)
    out = tmp_path / "report.json"
    r = _check(files, "--json", str(out), "--mlflow", "--mlflow-model", f"{name}:{version}", env=store)
    assert r.returncode == 1, r.stdout + r.stderr  # the memorising MLP fails 'internal'
    report = json.loads(out.read_text())
    client = mlflow.MlflowClient()
    exp = client.get_experiment_by_name(store["MLFLOW_EXPERIMENT_NAME"])
    runs = [x for x in client.search_runs([exp.experiment_id]) if x.info.run_name != "training"]
    assert len(runs) == 1
    run = runs[0]
    assert f"MLflow: logged to run {run.info.run_id}" in r.stdout and store["MLFLOW_TRACKING_URI"] in r.stdout
    assert r.stderr == "", r.stderr
    assert run.data.tags["privgate.verdict"] == "fail" and run.data.tags["privgate.policy"] == "internal"
    assert run.data.tags["privgate.check.mia-accuracy"] == "fail"
    assert run.data.tags["privgate.data_sha256"] == report["data"]["sha256"]
    check = report["checks"][0]
    m = run.data.metrics
    assert m["privgate/check/mia-accuracy/value"] == pytest.approx(check["value"])
    assert [m["privgate/check/mia-accuracy/lo"], m["privgate/check/mia-accuracy/hi"]] == pytest.approx(check["ci"])
    assert (
        m["privgate/check/mia-accuracy/threshold"] == 0.8
        and m["privgate/check/mia-accuracy/n_members"] == check["n_members"]
    )
    ran = [a for a in report["attacks"] if a["status"] == "ran"]
    for a in ran:
        assert m[f"privgate/attack/{a['name']}/auc"] == pytest.approx(a["auc"])
        assert m[f"privgate/attack/{a['name']}/auc_lo"] == pytest.approx(a["auc_ci"][0])
    arts = {f.path for f in client.list_artifacts(run.info.run_id, "privgate")}
    assert arts == {
        "privgate/privgate-report.json",
        "privgate/attacks.json",
        "privgate/privgate-summary.md",
        "privgate/privgate-report.html",
    }
    local = Path(client.download_artifacts(run.info.run_id, "privgate", str(tmp_path / "dl")))
    logged = json.loads((local / "privgate-report.json").read_text())
    assert logged["verdict"] == "fail" and logged["checks"] == report["checks"]
    assert [row["attack"] for row in json.loads((local / "attacks.json").read_text())] == [
        a["name"] for a in report["attacks"]
    ]
    assert (local / "privgate-summary.md").read_text().startswith("## privgate ❌ FAIL")
    tags = client.get_model_version(name, version).tags
    assert (
        tags["privgate.verdict"] == "fail"
        and tags["privgate.run_id"] == run.info.run_id
        and tags["privgate.policy"] == "internal"
    )


def test_check_logs_into_the_run_named_by_mlflow_run_id(files, store, mlflow):
    with mlflow.start_run(run_name="training pipeline") as parent:
        pass
    r = run_cli(
        "check", str(files.model), "--policy", "public", "--members", str(files.members), "--nonmembers",
        str(files.nonmembers), "--mlflow", env={**store, "MLFLOW_RUN_ID": parent.info.run_id},
    )  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    run = mlflow.MlflowClient().get_run(parent.info.run_id)
    assert run.data.tags["privgate.verdict"] == "pass" and run.data.params["privgate.policy"] == "public"


def test_unknown_model_version_stops_before_the_audit(files, store, tmp_path):
    out = tmp_path / "report.json"
    r = _check(files, "--json", str(out), "--mlflow-model", "nobody:3", env=store)
    assert r.returncode == 2 and "--mlflow-model nobody:3: no such registered model version" in r.stderr
    assert not out.exists() and "Traceback" not in r.stderr
    bad = _check(files, "--mlflow-model", "scorer", env=store)
    assert bad.returncode == 2 and "expected NAME:VERSION" in bad.stderr


def _warning_only(r: subprocess.CompletedProcess) -> str:
    """The one line the CLI wrote to stderr: a warning, not an error."""
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("warning: MLflow (") and "Traceback" not in r.stderr, r.stderr
    return lines[0]


def test_a_server_that_is_down_is_a_warning_and_the_verdict_stands(files, tmp_path):
    """Nothing listens at the tracking URI: the audit runs, its report is written, the exit code is the verdict's."""
    url = f"http://127.0.0.1:{_free_port()}"
    out = tmp_path / "report.json"
    r = _check(files, "--json", str(out), "--mlflow", "--mlflow-model", "scorer:1", env={"MLFLOW_TRACKING_URI": url})
    assert r.returncode == 1, r.stdout + r.stderr  # the memorising MLP fails 'internal', as without --mlflow
    assert json.loads(out.read_text())["verdict"] == "fail" and "FAIL" in r.stdout
    line = _warning_only(r)
    assert line == (
        f"warning: MLflow ({url}): no tracking server answers (connection refused); nothing was logged, and the "
        "verdict and exit code are the audit's."
    )


def test_a_server_that_refuses_is_a_warning_and_the_verdict_stands(files, server, tmp_path):
    """The server answers, but not MLflow's API at this path (404): the same warning, the report, the verdict."""
    url = f"{server}/not-mlflow"
    out = tmp_path / "report.json"
    r = _check(files, "--json", str(out), "--mlflow", env={"MLFLOW_TRACKING_URI": url})
    assert r.returncode == 1, r.stdout + r.stderr
    assert json.loads(out.read_text())["verdict"] == "fail"
    line = _warning_only(r)
    assert line.startswith(f"warning: MLflow ({url}): could not log the report (") and "404" in line
    assert line.endswith("; the verdict and exit code are the audit's.") and line.count(". ") == 0, line


def test_log_report_uses_the_active_run_and_leaves_it_open(store, mlflow):
    from pipeline_cases import constant_model

    import privgate
    from privgate.report.tracking import log_report

    model, members, nonmembers = constant_model()
    report = privgate.check(model, "internal", members, nonmembers)
    with mlflow.start_run() as run:
        logged = log_report(report)
        assert mlflow.active_run().info.run_id == run.info.run_id == logged.run_id
    got = mlflow.MlflowClient().get_run(run.info.run_id).data
    assert got.tags["privgate.verdict"] == report.verdict and got.metrics[
        "privgate/check/mia-accuracy/value"
    ] == pytest.approx(report.checks[0].value)


def test_mlflow_missing_is_one_sentence(monkeypatch):
    from click.testing import CliRunner

    from privgate.cli import cli
    from privgate.report import tracking

    monkeypatch.setattr(tracking, "available", lambda: False)
    r = CliRunner().invoke(
        cli, ["check", "m.pt", "--policy", "internal", "--members", "a.npz", "--nonmembers", "b.npz", "--mlflow"]
    )
    assert r.exit_code == 2 and "pip install 'privgate[mlflow]'" in r.output
