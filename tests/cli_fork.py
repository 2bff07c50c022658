"""The suite's CLI runs as forked processes of a pre-imported ``privgate`` (a fork server per pytest worker).

Every ``run_cli`` is a user's ``privgate`` run: its own process, its own argument vector, environment, working
folder, standard streams (stdin ``/dev/null``, stdout and stderr captured) and exit code, through
``privgate.cli.main`` exactly as ``python -m privgate.cli`` calls it. What it skips is the interpreter's start
and the imports (torch, numpy, scipy, scikit-learn, pydantic, transformers and privgate itself: 2-5 CPU-seconds a
run, most of the suite's cost): a server process imports them once with the worker's environment, then forks one
child per run. Module state is the server's freshly imported state in every child (a fork copies it; nothing ran).

What a fork cannot show runs in a fresh interpreter instead: ``run_cli(..., fresh=True)`` (what a run imports,
environment variables read at import time, a process's default threads), and every run when
``$PRIVGATE_TEST_FRESH_CLI=1``.
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

#: The server: imports, then one JSON request a line on stdin → fork → the child's pid, then its exit status.
SERVER = r"""
import json, os, sys, traceback
import numpy, scipy.stats, sklearn.linear_model, sklearn.ensemble, torch, pydantic, yaml, click, rich  # noqa
try:
    import transformers, peft  # noqa
except Exception:
    pass
import privgate.cli, privgate.api, privgate.gate  # noqa
from privgate.cli import main
requests, replies = sys.stdin, sys.stdout
for line in requests:
    req = json.loads(line)
    pid = os.fork()
    if pid == 0:
        code = 4
        try:
            if req.get("memory"):  # the run may map this many bytes beyond what the imports hold (RLIMIT_AS)
                import resource
                with open("/proc/self/statm") as f:
                    held = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
                resource.setrlimit(resource.RLIMIT_AS, (held + req["memory"], held + req["memory"]))
            os.chdir(req["cwd"])
            os.environ.clear()
            os.environ.update(req["env"])
            null = os.open(os.devnull, os.O_RDONLY)
            out = os.open(req["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            err = os.open(req["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            for fd, to in ((null, 0), (out, 1), (err, 2)):
                os.dup2(fd, to)
            sys.stdin = open(0, closefd=False)
            sys.stdout = open(1, "w", closefd=False)
            sys.stderr = open(2, "w", closefd=False)
            sys.argv = ["privgate", *req["args"]]
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
    replies.write(f"{pid}\n")
    replies.flush()
    _, status = os.waitpid(pid, 0)
    replies.write(f"{os.waitstatus_to_exitcode(status)}\n")
    replies.flush()
"""

_server: subprocess.Popen[str] | None = None
_lock = threading.Lock()


def _start(env: dict[str, str]) -> subprocess.Popen[str]:
    global _server, _pending
    if _server is None or _server.poll() is not None:
        _pending = b""
        _server = subprocess.Popen(
            [sys.executable, "-c", SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True
        )
    return _server


_pending = b""


def _line(proc: subprocess.Popen[str], deadline: float | None) -> str:
    """The server's next reply line, read from its pipe's descriptor (not the buffered file object, whose buffer
    ``select`` cannot see), waiting until ``deadline``."""
    global _pending
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    while b"\n" not in _pending:
        wait = None if deadline is None else max(deadline - time.monotonic(), 0)
        ready, _, _ = select.select([fd], [], [], wait)
        if not ready:
            raise TimeoutError
        chunk = os.read(fd, 4096)
        if not chunk:
            raise RuntimeError("the CLI fork server ended")
        _pending += chunk
    line, _, _pending = _pending.partition(b"\n")
    return line.decode().strip()


def run_forked(
    args: list[str],
    cwd: str | None,
    env: dict[str, str],
    timeout: float,
    server_env: dict[str, str],
    memory: int | None = None,
) -> subprocess.CompletedProcess:
    """One ``privgate`` run, forked from the server (module docstring); ``subprocess.run``'s result and timeout.

    ``memory``: the bytes of address space the run may add to the server's (``RLIMIT_AS``), or no limit.
    """
    with _lock, tempfile.TemporaryDirectory(prefix="privgate-cli-") as d:
        out, err = os.path.join(d, "stdout"), os.path.join(d, "stderr")
        proc = _start(server_env)
        assert proc.stdin is not None
        req = {"args": list(args), "cwd": str(cwd or os.getcwd()), "env": env, "stdout": out, "stderr": err,
               "memory": memory}  # fmt: skip
        proc.stdin.write(json.dumps(req) + "\n")
        proc.stdin.flush()
        deadline = time.monotonic() + timeout
        pid = int(_line(proc, deadline))
        try:
            code = int(_line(proc, deadline))
        except TimeoutError:
            os.kill(pid, signal.SIGKILL)
            _line(proc, None)
            raise subprocess.TimeoutExpired(["privgate", *args], timeout) from None
        with open(out, encoding="utf-8", errors="replace") as f:
            stdout = f.read()
        with open(err, encoding="utf-8", errors="replace") as f:
            stderr = f.read()
    return subprocess.CompletedProcess(["privgate", *args], code, stdout, stderr)


__all__ = ["run_forked"]
