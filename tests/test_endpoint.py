"""Live Open Inference Protocol v2 endpoints, against a real MLServer (scikit-learn runtime) on 127.0.0.1.

MLServer runs from .venv-serve (``make install`` builds it: its fastapi pin conflicts with flwr's). The
verdict and numbers on the endpoint equal those on the same model file; the bearer token reaches no report or
log; the query budget, a missing model, a dead or silent server, a wrong row shape and a server lost mid-run
are each one sentence and exit 2, with no report written. The endpoint audits run the CLI in a subprocess; the
model file they are compared with is audited in process (``tests/inproc.py``: the CLI's report, see
``test_front_door.py``).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import inproc
import numpy as np
import pytest
from cases import run_cli
from servers.mlserver import SERVE_BIN, free_port, mlserver

pytest.importorskip("httpx")
if not SERVE_BIN.exists():
    if os.environ.get("CI"):
        raise RuntimeError(f"{SERVE_BIN} is missing: `make install` builds .venv-serve with MLServer")
    pytest.skip("MLServer's venv (.venv-serve) is not built: run `make install`", allow_module_level=True)

TOKEN = "s3cret-token-that-must-not-leak"
POLICY = textwrap.dedent(
    """
    name: served
    sensitivity: internal
    release: api
    confidence: 0.95
    attacks:
      loss: {}
      confidence: {}
      modified_entropy: {class_dependent: true}
      correctness: {}
    checks:
      - id: mia-accuracy
        attack: best
        metric: accuracy
        max: 0.6
    """
)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A random forest on digits (it memorises its 300 members), saved with joblib and served by MLServer."""
    import joblib
    from sklearn.datasets import load_digits
    from sklearn.ensemble import RandomForestClassifier

    d = tmp_path_factory.mktemp("endpoint")
    x, y = load_digits(return_X_y=True)
    x = x / 16
    p = np.random.default_rng(0).permutation(len(x))
    m, n = p[:300], p[300:600]
    np.savez(d / "members.npz", x=x[m], y=y[m])
    np.savez(d / "nonmembers.npz", x=x[n], y=y[n])
    np.savez(d / "wide.npz", x=np.pad(x[m], ((0, 0), (0, 2))), y=y[m])
    np.savez(d / "wide_n.npz", x=np.pad(x[n], ((0, 0), (0, 2))), y=y[n])
    joblib.dump(RandomForestClassifier(30, random_state=0).fit(x[m], y[m]), d / "forest.joblib")
    (d / "policy.yaml").write_text(POLICY)
    declared = {
        "inputs": [{"name": "pixels", "datatype": "FP64", "shape": [-1, 64]}],
        "outputs": [
            {"name": "predict", "datatype": "INT64", "shape": [-1, 1]},
            {"name": "predict_proba", "datatype": "FP64", "shape": [-1, 10]},
        ],
    }
    models = {"digits": d / "forest.joblib", "declared": d / "forest.joblib"}
    with mlserver(d / "repo", models, metadata={"declared": declared}) as base:
        yield d, base


def _check(d: Path, *args: str, out: str = "r.json"):
    res = run_cli(
        "check", *args, "--policy", "policy.yaml", "--members", "members.npz", "--nonmembers", "nonmembers.npz",
        "--json", out, "-q", cwd=d,
    )  # fmt: skip
    return res, (json.loads((d / out).read_text()) if (d / out).exists() else None)


def test_endpoint_verdict_equals_model_file_and_token_never_leaks(served):
    d, base = served
    url = f"{base}/v2/models/digits"
    # the endpoint from privgate.toml (model = URL), the token on the command line
    (d / "privgate.toml").write_text(f'model = "{url}"\nmax_queries = 5000\nendpoint_batch = 64\n')
    res, ep = _check(d, "--header", f"Authorization: Bearer {TOKEN}", "--markdown", "r.md", "--html", "r.html")
    assert "endpoint: 60" in (d / "r.md").read_text()  # what the audit cost, in every format (N queries in M requests)
    (d / "privgate.toml").unlink()
    # the same model file, in process (`check forest.joblib --trust-checkpoint …`)
    file_res = inproc.check(d / "forest.joblib", d / "policy.yaml", d / "members.npz", d / "nonmembers.npz",
                            trust_checkpoint=True)  # fmt: skip
    fi = json.loads(inproc.render(file_res, "json")["json"])
    assert res.returncode == file_res.exit_code == 1, res.stderr  # the forest memorises: fails accuracy <= 0.6
    assert ep["verdict"] == fi["verdict"] == "fail"
    for a, b in zip(ep["checks"], fi["checks"]):
        assert (a["id"], a["status"]) == (b["id"], b["status"])
        assert a["value"] == pytest.approx(b["value"], abs=1e-12) and a["ci"] == pytest.approx(b["ci"], abs=1e-12)
    assert {a["name"]: a["auc"] for a in ep["attacks"]} == pytest.approx({a["name"]: a["auc"] for a in fi["attacks"]})

    section = ep["target"]["endpoint"]
    assert ep["target"]["format"] == "endpoint" and ep["target"]["path"] == url
    assert section["output"] == "predict_proba" and "predict_proba" in section["note"]  # MLServer answers labels
    assert 600 <= section["queries"] <= 602  # every audit row once (+ the probes that found the output)
    assert section["requests"] >= 600 / 64 and section["retries"] == 0 and section["seconds"] > 0
    assert section["max_queries"] == 5000 and section["batch"] == 64 and section["headers"] == ["Authorization"]
    for text in (res.stdout, res.stderr, *(p.read_text() for p in d.glob("r.*") if p.is_file())):
        assert TOKEN not in text


def test_query_budget_and_lost_server_leave_no_report(served):
    d, base = served
    res, rep = _check(d, f"{base}/v2/models/digits", "--max-queries", "100", out="budget.json")
    assert res.returncode == 2 and rep is None
    assert "the query budget of 100 rows (--max-queries) would be exceeded" in res.stderr
    assert "Traceback" not in res.stderr

    port = free_port()
    proxy = subprocess.Popen(
        [sys.executable, str(Path(__file__).parent / "servers" / "flaky.py"), base, str(port), "4"]
    )
    try:
        deadline = time.monotonic() + 20
        while True:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert time.monotonic() < deadline, "the proxy did not start"
            time.sleep(0.1)
        res, rep = _check(d, f"http://127.0.0.1:{port}/v2/models/digits", "--endpoint-batch", "50", out="lost.json")
    finally:
        proxy.kill()
        proxy.wait()
    assert res.returncode == 2 and rep is None and not (d / "lost.json").exists()
    assert f"http://127.0.0.1:{port}/v2/models/digits: the endpoint failed 4 times (cannot connect" in res.stderr


def test_unusable_endpoints_are_one_sentence(served):
    import privgate
    from privgate import Target
    from privgate.errors import TargetError
    from privgate.inputs.targets.endpoint import Access

    d, base = served
    with pytest.raises(TargetError, match=r"the server has no model 'nope' \(HTTP 404: Model nope not found\)"):
        Target.load(f"{base}/v2/models/nope")
    with pytest.raises(TargetError, match="expected an Open Inference Protocol v2 model URL"):
        Target.load(f"{base}/models/digits")

    quick = Access(timeout=0.3, retries=1, backoff=0.05)
    dead = f"http://127.0.0.1:{free_port()}/v2/models/digits"
    with pytest.raises(TargetError, match=r"failed 2 times \(cannot connect \(ConnectError\)\)"):
        Target.load(dead, access=quick)
    with socket.socket() as silent:  # accepts connections, never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        t0 = time.monotonic()
        cut = r"failed 2 times \(no complete answer within 0.3 s, the --endpoint-timeout\)"  # the whole exchange
        with pytest.raises(TargetError, match=cut):
            Target.load(f"http://127.0.0.1:{silent.getsockname()[1]}/v2/models/digits", access=quick)
        assert time.monotonic() - t0 < 5  # bounded, never a hang

    # rows of the wrong width: the server's own error, in one sentence
    with pytest.raises(
        TargetError, match=r"failed once \(HTTP 500: Internal Server Error\), sent \d+ row\(s\) of shape \(66,\)"
    ):
        privgate.check(
            Target.load(f"{base}/v2/models/digits", access=Access(retries=0)),
            str(d / "policy.yaml"), str(d / "wide.npz"), str(d / "wide_n.npz"), cache_dir="off",
        )  # fmt: skip
    # a model whose metadata lists its tensors: the input's name and row shape and the probability output are read
    # from it (no probe, no note); rows of another width are refused before any query
    declared = Target.load(f"{base}/v2/models/declared")
    section = declared.describe()["endpoint"]
    assert section["input"] == {"name": "pixels", "datatype": "FP64"} and section["output"] == "predict_proba"
    members = np.load(d / "members.npz")
    forest = Target.load(d / "forest.joblib", trust_checkpoint=True)
    np.testing.assert_allclose(
        declared.predict_proba(members["x"][:40]), forest.predict_proba(members["x"][:40]), atol=1e-290
    )
    after = declared.describe()["endpoint"]
    assert "note" not in after and after["queries"] == 40 and after["requests"] == section["requests"] + 1
    with pytest.raises(TargetError, match=r"input 'pixels' takes rows of shape \(64,\), the audit data has rows of "):
        declared.predict_proba(np.zeros((3, 66)))
    assert declared.describe()["endpoint"]["requests"] == after["requests"]  # refused before any request

    # the pytest plugin's assertions take an endpoint URL like a model file: every attack of its default plan runs
    # against the server, the label-only ones lighter than by default (2 perturbed queries per row, label_only at a
    # fixed noise, boundary at 2 strengths: 23,450 rows sent, most of them boundary's calibration, instead of
    # ≈ 127,000); the verdict comes from a score attack (confidence's accuracy ≈ 0.79 > 0.6)
    from pytest_privgate import assert_mia_below

    lighter = {"label_only": {"queries": 2, "sigma": 0.5}, "boundary": {"queries": 2, "scales": 2}}
    with pytest.raises(AssertionError, match="mia-accuracy") as failed:
        assert_mia_below(
            f"{base}/v2/models/digits", str(d / "members.npz"), str(d / "nonmembers.npz"), accuracy=0.6,
            attack_options=lighter,
        )  # fmt: skip
    ran = {a.name for a in failed.value.report.attacks if a.status == "ran"}
    assert {"label_only", "boundary", "confidence", "loss"} <= ran, ran


def test_action_audits_an_endpoint_with_a_masked_header(served, tmp_path):
    from test_action import run_action

    d, base = served
    run = run_action(
        {
            "model": f"{base}/v2/models/digits",
            "policy": str(d / "policy.yaml"),
            "members": str(d / "members.npz"),
            "nonmembers": str(d / "nonmembers.npz"),
            "endpoint-headers": f"Authorization: Bearer {TOKEN}\nX-Team: privacy\n",
            "reports-dir": "reports",
        },
        tmp_path,
        only=["Run the privacy gate"],
    )
    gate = run.step("Run the privacy gate")
    assert gate.returncode == 0 and run.outputs["verdict"] == "fail", gate.log
    report = json.loads((tmp_path / run.outputs["report"]).read_text())
    assert report["target"]["endpoint"]["headers"] == ["Authorization", "X-Team"]
    # the runner masks what ::add-mask:: names; nothing else in the log or the reports carries the token
    assert f"::add-mask::Bearer {TOKEN}" in gate.log
    assert gate.log.count(TOKEN) == 1
    for path in (p for p in (tmp_path / "reports").rglob("*") if p.is_file()):
        assert TOKEN not in path.read_text(errors="replace"), path
