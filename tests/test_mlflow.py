"""``privgate check --mlflow``: the verdict, every check, the attack table and the reports in an MLflow run.

Against a local file store (``MLFLOW_TRACKING_URI=file:…``; MLflow 3 needs
``MLFLOW_ALLOW_FILE_STORE=true`` for it), read back with MLflow's own client.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cases import run_cli
from pipeline_cases import torch_files

mlflow = pytest.importorskip("mlflow", reason="the MLflow client is part of the test extra (privgate[mlflow])")
from mlflow import MlflowClient  # noqa: E402


@pytest.fixture
def store(tmp_path, monkeypatch) -> dict[str, str]:
    """A fresh local MLflow store, for this process and for the CLI's subprocess."""
    env = {
        "MLFLOW_TRACKING_URI": (tmp_path / "mlruns").as_uri(),
        "MLFLOW_ALLOW_FILE_STORE": "true",
        "MLFLOW_EXPERIMENT_NAME": "privacy",
    }
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    mlflow.set_tracking_uri(env["MLFLOW_TRACKING_URI"])
    mlflow.set_experiment("privacy")
    yield env
    mlflow.set_tracking_uri(None)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return torch_files(tmp_path_factory.mktemp("model"))


def _registered_version(name: str) -> str:
    client = MlflowClient()
    client.create_registered_model(name)
    with mlflow.start_run(run_name="training") as run:
        pass
    return client.create_model_version(name, source=run.info.artifact_uri, run_id=run.info.run_id).version


def test_check_logs_verdict_checks_attacks_and_reports_and_tags_the_model_version(files, store, tmp_path):
    version = _registered_version("scorer")
    out = tmp_path / "report.json"
    r = run_cli(
        "check",
        str(files.model),
        "--policy",
        "internal",
        "--members",
        str(files.members),
        "--nonmembers",
        str(files.nonmembers),
        "--json",
        str(out),
        "--mlflow",
        "--mlflow-model",
        f"scorer:{version}",
        env=store,
    )
    assert r.returncode == 1, r.stdout + r.stderr  # the memorising MLP fails 'internal'
    report = json.loads(out.read_text())
    client = MlflowClient()
    exp = client.get_experiment_by_name("privacy")
    runs = [x for x in client.search_runs([exp.experiment_id]) if x.info.run_name != "training"]
    assert len(runs) == 1
    run = runs[0]
    assert f"MLflow: logged to run {run.info.run_id}" in r.stdout
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
    tags = client.get_model_version("scorer", version).tags
    assert (
        tags["privgate.verdict"] == "fail"
        and tags["privgate.run_id"] == run.info.run_id
        and tags["privgate.policy"] == "internal"
    )


def test_check_logs_into_the_run_named_by_mlflow_run_id(files, store):
    with mlflow.start_run(run_name="training pipeline") as parent:
        pass
    r = run_cli(
        "check",
        str(files.model),
        "--policy",
        "public",
        "--members",
        str(files.members),
        "--nonmembers",
        str(files.nonmembers),
        "--mlflow",
        env={**store, "MLFLOW_RUN_ID": parent.info.run_id},
    )
    assert r.returncode == 0, r.stdout + r.stderr
    run = MlflowClient().get_run(parent.info.run_id)
    assert run.data.tags["privgate.verdict"] == "pass" and run.data.params["privgate.policy"] == "public"


def test_unknown_model_version_stops_before_the_audit(files, store, tmp_path):
    out = tmp_path / "report.json"
    r = run_cli(
        "check",
        str(files.model),
        "--policy",
        "internal",
        "--members",
        str(files.members),
        "--nonmembers",
        str(files.nonmembers),
        "--json",
        str(out),
        "--mlflow-model",
        "nobody:3",
        env=store,
    )
    assert r.returncode == 2 and "--mlflow-model nobody:3: no such registered model version" in r.stderr
    assert not out.exists() and "Traceback" not in r.stderr
    bad = run_cli(
        "check",
        str(files.model),
        "--policy",
        "internal",
        "--members",
        str(files.members),
        "--nonmembers",
        str(files.nonmembers),
        "--mlflow-model",
        "scorer",
        env=store,
    )
    assert bad.returncode == 2 and "expected NAME:VERSION" in bad.stderr


def test_log_report_uses_the_active_run_and_leaves_it_open(store):
    from pipeline_cases import constant_model

    import privgate
    from privgate.report.tracking import log_report

    model, members, nonmembers = constant_model()
    report = privgate.check(model, "internal", members, nonmembers)
    with mlflow.start_run() as run:
        logged = log_report(report)
        assert mlflow.active_run().info.run_id == run.info.run_id == logged.run_id
    got = MlflowClient().get_run(run.info.run_id).data
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
