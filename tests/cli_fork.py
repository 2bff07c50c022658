"""The suite's CLI runs as forked processes of a pre-imported ``privgate`` (fork servers in each pytest worker).

Every ``run_cli`` is a user's ``privgate`` run: its own process, its own argument vector, environment, working
folder, standard streams (stdin ``/dev/null``, given text or closed; stdout and stderr captured) and exit code, through
``privgate.cli.main`` exactly as ``python -m privgate.cli`` calls it. What it skips is the interpreter's start
and the imports (torch, numpy, scipy, scikit-learn, pydantic, transformers and privgate itself: 2-5 CPU-seconds a
run, most of the suite's cost): a server process imports them once, then forks one child per run. A server is
started with the run's environment and serves only runs whose environment matches it in every variable but the
per-run ones (:func:`server_key`: what the imports read, ``OMP_NUM_THREADS`` and the like, is the server's), at
most :data:`MAX_SERVERS` a worker. Module state is the server's freshly imported state in every child.

What a fork cannot show runs in a fresh interpreter instead: ``run_cli(..., fresh=True)`` (what a run imports, a
``PYTHON*`` variable, a process's default threads), and every run when ``$PRIVGATE_TEST_FRESH_CLI=1``.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import OrderedDict
from collections.abc import Callable

#: The forked child's run, shared by this server and :mod:`cli_on_path`'s: ``setup()`` puts the standard streams on
#: descriptors 0-2 (0 closed: ``sys.stdin`` None, as ``<&-`` leaves it), then ``privgate ARGS`` runs in ``cwd`` with
#: ``env`` and Python's SIGINT handler, as in a fresh interpreter; the process ends with its exit code (4 when the
#: set-up itself fails).
CHILD = r"""
def run_child(setup, args, cwd, env):
    code = 4
    try:
        setup()
        os.chdir(cwd)
        os.environ.clear()
        os.environ.update(env)
        try:
            sys.stdin = open(0, closefd=False)
        except OSError:  # descriptor 0 closed
            sys.stdin = sys.__stdin__ = None
        sys.stdout = open(1, "w", closefd=False)
        sys.stderr = open(2, "w", closefd=False)
        signal.signal(signal.SIGINT, signal.default_int_handler)  # as a fresh interpreter installs it
        sys.argv = ["privgate", *args]
        try:
            main()
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except BaseException:
            traceback.print_exc()
            code = 1
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)
"""

#: The server: imports, then one JSON request a line on stdin → fork → the child's pid, then its exit status and peak
#: resident memory (KiB).
SERVER = (
    r"""
import json, os, signal, sys, traceback
import numpy, scipy.stats, sklearn.linear_model, sklearn.ensemble, torch, pydantic, yaml, click, rich  # noqa
try:
    import transformers, peft  # noqa
except Exception:
    pass
import privgate.cli, privgate.api, privgate.gate  # noqa
if "mlflow" in sys.modules:  # MLFLOW_* is per run (PER_RUN_PREFIXES) only while a run imports mlflow
    sys.exit("the CLI fork server imported mlflow: take MLFLOW_ out of PER_RUN_PREFIXES (tests/cli_fork.py)")
from privgate.cli import main
"""
    + CHILD
    + r"""
def streams(req):
    if req.get("memory"):  # the run may map this many bytes beyond what the imports hold (RLIMIT_AS)
        import resource
        with open("/proc/self/statm") as f:
            held = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        resource.setrlimit(resource.RLIMIT_AS, (held + req["memory"], held + req["memory"]))
    if req.get("file_size") is not None:  # the largest file the run may write (RLIMIT_FSIZE)
        import resource
        resource.setrlimit(resource.RLIMIT_FSIZE, (req["file_size"], req["file_size"]))
    null = os.open(req["stdin"] or os.devnull, os.O_RDONLY)
    out = os.open(req["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    err = os.open(req["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    for fd, to in ((null, 0), (out, 1), (err, 2)):
        os.dup2(fd, to)
    if req["stdin"] is None:  # closed, as `<&-` leaves it
        os.close(0)

requests, replies = sys.stdin, sys.stdout
for line in requests:
    req = json.loads(line)
    pid = os.fork()
    if pid == 0:
        run_child(lambda: streams(req), req["args"], req["cwd"], req["env"])
    replies.write(f"{pid}\n")
    replies.flush()
    _, status, usage = os.wait4(pid, 0)
    replies.write(f"{os.waitstatus_to_exitcode(status)} {usage.ru_maxrss}\n")
    replies.flush()
"""
)

#: What a forked run gets as its own, whatever its server's environment: the variables no module the server imports
#: reads at import (docs/contributing.md has the measurement). ``PRIVGATE_*``: privgate reads its variables per
#: run, through click (no ``os.environ`` in privgate/, :mod:`test_fork_server`); ``XDG_*_HOME``: privgate's cache
#: and key folders, read per run (huggingface_hub derives its hub cache from ``XDG_CACHE_HOME`` at import, and
#: privgate never reaches the hub: ``local_files_only=True``); ``PYTEST_*``: pytest's, per test; ``MLFLOW_*`` and
#: ``_MLFLOW_*``: read by mlflow, which a run imports and the server does not (the server exits if it does; importing
#: mlflow exports ``_MLFLOW_TELEMETRY_SESSION_ID`` and its telemetry unsets it, so a test process's value comes and
#: goes); ``GITHUB_*``, ``COMP_*``: the Actions files and click's shell completion, read per run through click.
PER_RUN_PREFIXES = ("PRIVGATE_", "PYTEST_", "MLFLOW_", "_MLFLOW_", "GITHUB_", "COMP_")
PER_RUN_NAMES = frozenset({"XDG_CACHE_HOME", "XDG_CONFIG_HOME"})
#: Servers a worker keeps (each holds the imports, ~0.5 GB); the least recently used one ends beyond this.
MAX_SERVERS = 3


def server_key(env: dict[str, str]) -> tuple[tuple[str, str], ...]:
    """The part of a run's environment its server must have been started with: every variable but the per-run ones
    (an allow-list: a variable nobody has shown to be read per run keys a server of its own)."""
    return tuple(
        sorted((k, v) for k, v in env.items() if k not in PER_RUN_NAMES and not k.startswith(PER_RUN_PREFIXES))
    )


class _Server:
    """One server process and the reply bytes read from its pipe but not yet consumed."""

    def __init__(self, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True
        )
        self.pending = b""

    def close(self) -> None:
        """End the server: its request loop ends at the end of its stdin."""
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        assert self.proc.stdout is not None
        self.proc.stdout.close()

    def line(self, deadline: float | None) -> str:
        """The server's next reply line, read from its pipe's descriptor (not the buffered file object, whose buffer
        ``select`` cannot see), waiting until ``deadline``."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        while b"\n" not in self.pending:
            wait = None if deadline is None else max(deadline - time.monotonic(), 0)
            ready, _, _ = select.select([fd], [], [], wait)
            if not ready:
                raise TimeoutError
            chunk = os.read(fd, 4096)
            if not chunk:
                raise RuntimeError("the CLI fork server ended")
            self.pending += chunk
        line, _, self.pending = self.pending.partition(b"\n")
        return line.decode().strip()


#: This worker's servers by :func:`server_key`, least recently used first.
_servers: OrderedDict[tuple[tuple[str, str], ...], _Server] = OrderedDict()
_lock = threading.Lock()


def server_for(env: dict[str, str], most: int = MAX_SERVERS) -> _Server:
    """The running server started with ``env``'s :func:`server_key`, started now if there is none (ending the least
    recently used beyond ``most``)."""
    key = server_key(env)
    server = _servers.pop(key, None)
    if server is not None and server.proc.poll() is not None:
        server = None
    if server is None:
        while len(_servers) >= most:
            _servers.popitem(last=False)[1].close()
        server = _Server(env)
    _servers[key] = server
    return server


def close_all() -> None:
    """End every server of this worker and wait for it (the session's end: its runs' CPU time then counts in the
    worker's, as ``/usr/bin/time make test`` reads it; left running, each would end unwaited at its stdin's end)."""
    with _lock:
        while _servers:
            _servers.popitem(last=False)[1].close()


def live_servers() -> list[int]:
    """The pids of this worker's running servers, least recently used first."""
    return [s.proc.pid for s in _servers.values() if s.proc.poll() is None]


def run_forked(
    args: list[str],
    cwd: str | None,
    env: dict[str, str],
    timeout: float,
    memory: int | None = None,
    stdin: str | None = "",
    started: Callable[[int], object] | None = None,
    file_size: int | None = None,
) -> subprocess.CompletedProcess:
    """One ``privgate`` run, forked from the server started with its environment (module docstring, :func:`server_for`);
    ``subprocess.run``'s result and timeout.

    ``memory``: the bytes the run may map beyond what the server's imports hold (its address-space limit).
    ``stdin``: what standard input holds (``""``: ``/dev/null``, end of file at once), ``None``: it is closed.
    ``started``: called with the run's pid once it runs, before its end is awaited (to signal it, say).
    ``file_size``: the largest file the run may write, in bytes (its RLIMIT_FSIZE: writes past it fail, EFBIG).
    """
    with _lock, tempfile.TemporaryDirectory(prefix="privgate-cli-") as d:
        out, err = os.path.join(d, "stdout"), os.path.join(d, "stderr")
        given = stdin and os.path.join(d, "stdin")  # "" stays "" (the server opens /dev/null), None stays None
        if given:
            with open(given, "w", encoding="utf-8") as f:
                f.write(stdin)
        server = server_for(env)
        proc = server.proc
        assert proc.stdin is not None
        req = {"args": list(args), "cwd": str(cwd or os.getcwd()), "env": env, "stdout": out, "stderr": err,
               "memory": memory, "stdin": given, "file_size": file_size}  # fmt: skip
        proc.stdin.write(json.dumps(req) + "\n")
        proc.stdin.flush()
        deadline = time.monotonic() + timeout
        pid = int(server.line(deadline))
        if started is not None:
            try:
                started(pid)
            except BaseException:  # the run ends, and its status is read, before the failure goes on
                os.kill(pid, signal.SIGKILL)
                server.line(None)
                raise
        try:
            code, peak = map(int, server.line(deadline).split())
        except TimeoutError:
            os.kill(pid, signal.SIGKILL)
            server.line(None)
            raise subprocess.TimeoutExpired(["privgate", *args], timeout) from None
        with open(out, encoding="utf-8", errors="replace") as f:
            stdout = f.read()
        with open(err, encoding="utf-8", errors="replace") as f:
            stderr = f.read()
    result = subprocess.CompletedProcess(["privgate", *args], code, stdout, stderr)
    result.peak_mb = peak / 1024  # ru_maxrss (KiB): the run's peak resident memory, the server's imports included
    return result


__all__ = [
    "CHILD",
    "MAX_SERVERS",
    "close_all",
    "live_servers",
    "run_forked",
    "server_for",
    "server_key",
]
