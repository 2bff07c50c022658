"""A real MLServer (scikit-learn runtime) on 127.0.0.1, started from the project's .venv-serve (``make install``)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SERVE_BIN = ROOT / ".venv-serve" / "bin" / "mlserver"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _ready(url: str) -> bool:
    import httpx

    try:
        return httpx.get(url, timeout=1.0).status_code == 200
    except httpx.HTTPError:
        return False


@contextmanager
def mlserver(repo: Path, models: dict[str, Path], startup: float = 120.0, metadata: dict[str, dict] | None = None):
    """Serve each ``name -> model.joblib`` with ``mlserver_sklearn.SKLearnModel``; yields the base URL.

    ``metadata`` gives a model's declared ``inputs`` / ``outputs`` (what ``GET /v2/models/NAME`` then lists).
    """
    for name, model in models.items():
        d = repo / name
        d.mkdir(parents=True)
        (d / "model.joblib").write_bytes(model.read_bytes())
        settings = {
            "name": name,
            "implementation": "mlserver_sklearn.SKLearnModel",
            "parameters": {"uri": "./model.joblib"},
            **(metadata or {}).get(name, {}),
        }
        (d / "model-settings.json").write_text(json.dumps(settings))
    http, grpc = free_port(), free_port()
    (repo / "settings.json").write_text(
        json.dumps(
            {
                "host": "127.0.0.1",
                "http_port": http,
                "grpc_port": grpc,
                "metrics_endpoint": None,
                "parallel_workers": 0,
                "debug": False,
            }
        )
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "PYTHON"))}
    log = (repo / "mlserver.log").open("w")
    proc = subprocess.Popen([str(SERVE_BIN), "start", str(repo)], cwd=repo, env=env, stdout=log, stderr=log)
    base = f"http://127.0.0.1:{http}"
    try:
        deadline = time.monotonic() + startup
        while not _ready(f"{base}/v2/health/ready"):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"MLServer did not start: {(repo / 'mlserver.log').read_text()[-2000:]}")
            time.sleep(0.3)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
