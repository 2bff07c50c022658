"""A ``privgate`` on ``PATH`` for scripts the tests run (the GitHub action's steps), forked from a pre-imported server.

The executable (:func:`privgate_bin`) is a stdlib-only Python script: it hands its argument vector, working folder,
environment and standard streams (the descriptors themselves, over a Unix socket) to the server started with its
environment (:func:`serve`, the same :func:`cli_fork.server_key` rule), which forks one child per run into
``privgate.cli.main``, as :mod:`cli_fork` does for :func:`cases.run_cli`; its exit code is the child's. Where no server
was started with its environment, or ``$PRIVGATE_TEST_FRESH_CLI=1``, it execs ``python -m privgate.cli`` instead.
Bash's own variables (:data:`SHELL_VARS`, set by the script's shell) do not key a server.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from cli_fork import CHILD, server_key

#: What bash sets for the commands it runs (its folder, nesting depth, the command's path); of the server's imports only
#: tqdm's scan of the whole environment for ``TQDM_*`` reads them (Python-level reads, docs/contributing.md).
SHELL_VARS = frozenset({"PWD", "OLDPWD", "SHLVL", "_"})
#: Servers a test process keeps (each holds the imports, ~0.5 GB); the oldest ends beyond this.
MAX_SERVERS = 2

#: The server: imports (not transformers: one action run reads a language model), listens on the socket named by
#: argv[1], one run at a time; ends when its stdin does.
SERVER = (
    r"""
import json, os, select, signal, socket, sys, traceback
import numpy, scipy.stats, sklearn.linear_model, sklearn.ensemble, torch, pydantic, yaml, click, rich  # noqa
import privgate.cli, privgate.api, privgate.gate  # noqa
if "mlflow" in sys.modules:
    sys.exit("the CLI socket server imported mlflow: MLFLOW_* would be read at import (tests/cli_fork.py)")
from privgate.cli import main
"""
    + CHILD
    + r"""
def place(fds, *sockets):
    for sock in sockets:
        sock.close()
    for fd, to in zip(fds, (0, 1, 2)):
        os.dup2(fd, to)
        os.close(fd)

listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
listener.bind(sys.argv[1])
listener.listen(4)
print("ready", flush=True)
while True:
    if sys.stdin in select.select([listener, sys.stdin], [], [])[0]:
        break  # the test process closed the pipe or ended
    conn, _ = listener.accept()
    with conn:
        _, fds, _, _ = socket.recv_fds(conn, 1, 3)
        data = b""
        while chunk := conn.recv(1 << 16):
            data += chunk
        req = json.loads(data)
        pid = os.fork()
        if pid == 0:
            run_child(lambda: place(fds, listener, conn), req["args"], req["cwd"], req["env"])
        for fd in fds:
            os.close(fd)
        _, status = os.waitpid(pid, 0)
        conn.sendall(str(os.waitstatus_to_exitcode(status)).encode())
"""
)

#: The ``privgate`` executable: stdlib only (``-S``), so it starts in tens of milliseconds.
CLIENT = r"""#!{python} -S
import json, os, socket, sys
sys.path.insert(0, {tests!r})
from cli_on_path import socket_path
path = socket_path({sockets!r}, dict(os.environ))
sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
try:
    if os.environ.get("PRIVGATE_TEST_FRESH_CLI") == "1":
        raise OSError
    sock.connect(path)
except OSError:
    os.execv({python!r}, [{python!r}, "-m", "privgate.cli", *sys.argv[1:]])
socket.send_fds(sock, [b"r"], [0, 1, 2])
sock.sendall(json.dumps({{"args": sys.argv[1:], "cwd": os.getcwd(), "env": dict(os.environ)}}).encode())
sock.shutdown(socket.SHUT_WR)
reply = b""
while chunk := sock.recv(64):
    reply += chunk
code = int(reply)
if code < 0:  # the run ended on a signal: this process ends on it too
    os.kill(os.getpid(), -code)
sys.exit(code)
"""


def socket_path(folder: str, env: dict[str, str]) -> str:
    """The socket of the server for ``env``: named by its :func:`cli_fork.server_key`, bash's variables left out."""
    key = server_key({k: v for k, v in env.items() if k not in SHELL_VARS})
    return os.path.join(folder, hashlib.sha256(json.dumps(key).encode()).hexdigest()[:16] + ".sock")


_folder: list[Path] = []
_servers: dict[str, subprocess.Popen] = {}


def privgate_bin() -> Path:
    """A folder with the ``privgate`` executable (module docstring) and the servers' sockets, made once."""
    if not _folder:
        folder = Path(tempfile.mkdtemp(prefix="privgate-bin-"))
        (folder / "s").mkdir()
        exe = folder / "privgate"
        tests = str(Path(__file__).parent)
        exe.write_text(CLIENT.format(python=sys.executable, tests=tests, sockets=str(folder / "s")))
        exe.chmod(0o755)
        _folder.append(folder)
        atexit.register(_close_all)
    return _folder[0]


def serve(env: dict[str, str]) -> None:
    """Start the server for ``env`` unless it runs already (the executable then forks its runs from it)."""
    if os.environ.get("PRIVGATE_TEST_FRESH_CLI") == "1" or env.get("PRIVGATE_TEST_FRESH_CLI") == "1":
        return
    path = socket_path(str(privgate_bin() / "s"), env)
    if path in _servers and _servers[path].poll() is None:
        return
    while len(_servers) >= MAX_SERVERS:
        _close(next(iter(_servers)))
    proc = subprocess.Popen(
        [sys.executable, "-c", SERVER, path], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True
    )
    _servers[path] = proc
    assert proc.stdout is not None
    if proc.stdout.readline().strip() != "ready":  # it ended: the executable finds no socket and runs a fresh one
        _close(path)


def _close(path: str) -> None:
    proc = _servers.pop(path)
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.close()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    proc.stdout.close()
    if os.path.exists(path):
        os.unlink(path)


def _close_all() -> None:
    for path in list(_servers):
        _close(path)
    shutil.rmtree(_folder[0], ignore_errors=True)


__all__ = ["privgate_bin", "serve", "socket_path"]
