"""Small, fast audit cases written to disk the way a user would have them."""

from __future__ import annotations

import contextlib
import os
import subprocess
import textwrap
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

RECIPE_SOURCE = textwrap.dedent(
    """
    from torch import nn
    from privgate.recipe import Recipe

    def make_model():
        return nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 4))

    RECIPE = Recipe(model_factory=make_model, epochs=300, batch_size=1000, lr=3e-3, name="tiny-mlp")
    """
)


def make_model() -> nn.Module:
    return nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 4))


def synthetic(n: int, seed: int, label_noise: float) -> tuple[np.ndarray, np.ndarray]:
    """4 Gaussian classes in 20-D; a fraction of labels is random (memorising them leaks)."""
    rng = np.random.default_rng(seed)
    centres = np.random.default_rng(1234).normal(0, 1.0, size=(4, 20))
    y = rng.integers(0, 4, size=n)
    x = centres[y] + rng.normal(0, 1.5, size=(n, 20))
    flip = rng.random(n) < label_noise
    y = np.where(flip, rng.integers(0, 4, size=n), y)
    return x.astype(np.float32), y.astype(np.int64)


def train(x: np.ndarray, y: np.ndarray, epochs: int, weight_decay: float = 0.0, seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    model = make_model()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3, weight_decay=weight_decay)
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    for _ in range(epochs):
        opt.zero_grad()
        nn.functional.cross_entropy(model(xt), yt).backward()
        opt.step()
    return model.eval()


@dataclass
class Case:
    dir: Path
    leaky_ts: Path
    leaky_state: Path
    safe_ts: Path
    members: Path
    nonmembers: Path
    recipe_spec: str = "tiny_recipe:RECIPE"


def build_case(d: Path) -> Case:
    d.mkdir(parents=True, exist_ok=True)
    # 80 % random labels: the leaky model memorises them, so its leak is provable on 150/150 evaluation rows
    xm, ym = synthetic(300, seed=1, label_noise=0.8)
    xn, yn = synthetic(300, seed=2, label_noise=0.8)
    leaky = train(xm, ym, epochs=400)
    safe = train(xm, ym, epochs=15, weight_decay=1e-2)
    (d / "tiny_recipe.py").write_text(RECIPE_SOURCE)
    torch.jit.save(torch.jit.script(leaky), str(d / "leaky.ts.pt"))
    torch.save(leaky.state_dict(), d / "leaky_state.pt")
    torch.jit.save(torch.jit.script(safe), str(d / "safe.ts.pt"))
    np.savez(d / "members.npz", x=xm, y=ym)
    np.savez(d / "nonmembers.npz", x=xn, y=yn)
    return Case(d, d / "leaky.ts.pt", d / "leaky_state.pt", d / "safe.ts.pt", d / "members.npz", d / "nonmembers.npz")


def stable(value: Any, volatile: set[str]) -> Any:
    """A parsed report without the keys in ``volatile`` at any depth (wall times, dates, hosts)."""
    if isinstance(value, dict):
        return {k: stable(v, volatile) for k, v in value.items() if k not in volatile}
    if isinstance(value, list):
        return [stable(v, volatile) for v in value]
    return value


def run_cli(
    *args: str,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    fresh: bool = False,
    memory: int | None = None,
    timeout: float = 300,
    stdin: str | None = "",
    started: Callable[[int], object] | None = None,
    file_size: int | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run ``privgate`` in its own process, as a user would: forked from a pre-imported server
    (:mod:`cli_fork`), or ``python -m privgate.cli`` in a fresh interpreter (:data:`privgate_cli.PRIVGATE`) when
    ``fresh`` or ``$PRIVGATE_TEST_FRESH_CLI=1`` (what a run imports, or reads from the environment at import).
    ``memory``: the bytes the run may map beyond privgate's imports (an address-space limit; in a fresh
    interpreter, beyond what this test process maps). ``stdin``: what standard input holds (``""``: nothing, end of
    file at once), ``None``: it is closed. ``started``: called with the run's pid once it runs (to signal it, say).
    ``file_size``: the largest file the run may write (RLIMIT_FSIZE; stdout and stderr are files in a forked run).
    The result's ``peak_mb``: the run's peak resident memory (MiB; a forked
    run's counts the server's imports it started with)."""
    from privgate_cli import PRIVGATE

    base = {**os.environ, "COLUMNS": "200", "OMP_NUM_THREADS": "1"}
    base.pop("PRIVGATE_DEBUG", None)
    full_env = {**base, **(env or {})}
    full_env.pop("PRIVGATE_DEBUG", None)
    # what the interpreter reads when it starts (PYTHONPATH, …) cannot reach a forked child: a fresh one then
    fresh = fresh or any(k.startswith("PYTHON") for k in (env or {}))
    if not fresh and os.environ.get("PRIVGATE_TEST_FRESH_CLI") != "1":
        from cli_fork import run_forked

        return run_forked(list(args), None if cwd is None else str(cwd), full_env, timeout, memory, stdin, started,
                           file_size)  # fmt: skip
    vm = None
    if memory:
        with open("/proc/self/statm") as f:
            vm = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE") + memory

    def start() -> None:
        import resource

        if vm is not None:
            resource.setrlimit(resource.RLIMIT_AS, (vm, vm))
        if file_size is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (file_size, file_size))
        if stdin is None:
            os.close(0)

    cmd = PRIVGATE + list(args)
    given = subprocess.PIPE if stdin else subprocess.DEVNULL
    pipe = subprocess.PIPE  # stdout and stderr pipes, as subprocess.run's capture_output gives
    proc = subprocess.Popen(cmd, cwd=cwd, env=full_env, stdin=given, stdout=pipe, stderr=pipe, preexec_fn=start)
    read: dict[int, bytes] = {}
    drains = [threading.Thread(target=lambda i, f: read.update({i: f.read()}), args=(i, f)) for i, f in
              enumerate((proc.stdout, proc.stderr))]  # fmt: skip
    for t in drains:
        t.start()
    if stdin:
        with contextlib.suppress(BrokenPipeError), proc.stdin:
            proc.stdin.write(stdin.encode())
    killed = threading.Event()
    timer = threading.Timer(timeout, lambda: (killed.set(), proc.kill()))
    timer.start()
    try:
        if started is not None:
            started(proc.pid)
    except BaseException:
        proc.kill()
        raise
    finally:
        _, status, usage = os.wait4(proc.pid, 0)  # the run's own peak memory (ru_maxrss, KiB)
        timer.cancel()
        proc.returncode = os.waitstatus_to_exitcode(status)
        for t in drains:
            t.join()
        proc.stdout.close()
        proc.stderr.close()
    if killed.is_set():
        raise subprocess.TimeoutExpired(cmd, timeout)
    stdout, stderr = (read[i].decode(errors="replace") for i in (0, 1))
    result = subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr)
    result.peak_mb = usage.ru_maxrss / 1024
    return result


#: One cheap attack and a check it always passes (AUC ≤ 0.99), for tests about something else than the audit (threads,
#: devices, bounded reads).
LOSS_ONLY = """\
name: loss-only
sensitivity: internal
release: api
attacks: {loss: {}}
checks:
  - {id: auc, attack: loss, metric: auc, max: 0.99}
"""

#: A loss + confidence AUC check (max 0.55), for tests that gate a small memorising model end to end.
AUC_POLICY = textwrap.dedent(
    """
    name: thresholds
    sensitivity: internal
    release: api
    confidence: 0.95
    attacks:
      loss: {}
      confidence: {}
    checks:
      - id: mia-auc
        attack: best
        metric: auc
        max: 0.55
    """
)
