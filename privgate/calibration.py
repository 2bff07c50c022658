"""``auto``'s costs measured on this machine: a short timed probe of the CPU and the GPU, cached per machine.

:func:`machine_costs` gives the :class:`privgate.device.Costs` that :func:`privgate.device.choose_device`
charges, only where ``auto`` has a GPU to weigh: GPU start-up, per-launch overhead and FLOP/s on each
device. Cached in ``$XDG_CACHE_HOME/privgate/device-probe.json`` keyed by GPU, driver, torch, CPUs and
threads; a corrupt, foreign or out-of-range cache is ignored and re-probed — the file can only change the
device. What is timed: docs/compute.md.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from privgate.device import Costs

#: The cache file's name, in the user's cache folder (``$XDG_CACHE_HOME/privgate``).
FILE_NAME = "device-probe.json"
#: The most bytes of the cache file read (a few entries of a few hundred bytes each).
MAX_FILE_BYTES = 64 << 10
#: Entries (machines × thread counts) the file keeps, the newest.
MAX_ENTRIES = 16
#: Seconds each throughput and step loop runs for, after its warm-up.
LOOP_SECONDS = 0.06
#: What the file's numbers may be: anything outside is not a measurement of a machine, and the file is ignored.
BOUNDS = {
    "cpu_flops_per_thread": (1e7, 1e13),
    "cpu_op_seconds": (1e-8, 1e-2),
    "gpu_start_seconds": (0.0, 300.0),
    "gpu_flops": (1e8, 1e17),
    "gpu_launch_seconds": (1e-8, 1e-2),
}
_FORMAT = "privgate device probe 1"


@dataclass(frozen=True)
class Probe:
    """The costs measured, and how long the probe took (0 when they came from the cache)."""

    costs: Costs
    seconds: float = 0.0

    def facts(self) -> dict[str, Any]:
        """For the report (``environment.device_estimate.probe``)."""
        return {**{k: float(v) for k, v in asdict(self.costs).items() if k != "source"},
                "source": self.costs.source, "probe_seconds": round(self.seconds, 3)}  # fmt: skip


def _driver() -> str:
    """The NVIDIA driver's version line (Linux), or ``""``: read bounded, never trusted for anything but the key."""
    from privgate.errors import PrivgateError
    from privgate.inputs.textfile import read_regular

    try:
        raw, _ = read_regular("/proc/driver/nvidia/version", "driver version", PrivgateError, 4096)
    except PrivgateError:
        return ""
    return raw.decode("utf-8", "replace").splitlines()[0].strip() if raw else ""


def machine_key(gpu: str, threads: int) -> str:
    """What the measurements depend on: the GPU, its driver, torch (and its CUDA), the CPU count, the threads."""
    import torch

    return " | ".join(
        [gpu, _driver(), f"torch {torch.__version__} cuda {torch.version.cuda}", f"{os.cpu_count()} cpus",
         f"{threads} threads"]
    )  # fmt: skip


def _valid(entry: Any) -> Costs | None:
    if not isinstance(entry, dict):
        return None
    values = {}
    for name, (low, high) in BOUNDS.items():
        v = entry.get(name)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not low <= v <= high:
            return None
        values[name] = float(v)
    return Costs(**values, source="cache")


def read_cache(path: Path | None) -> dict[str, Any]:
    """The file's entries by key; ``{}`` for a file that is absent, unreadable, not a regular file, larger than
    :data:`MAX_FILE_BYTES` or not privgate's probe file."""
    from privgate.errors import PrivgateError
    from privgate.inputs.textfile import read_regular

    if path is None or not os.path.lexists(path) or os.path.islink(path):
        return {}
    try:
        raw, _ = read_regular(path, "device probe cache", PrivgateError, MAX_FILE_BYTES)
        data = json.loads(raw.decode("utf-8"))
    except (PrivgateError, ValueError, RecursionError):
        return {}
    if not isinstance(data, dict) or data.get("format") != _FORMAT or not isinstance(data.get("entries"), dict):
        return {}
    return data["entries"]


def cached(path: Path | None, key: str) -> Costs | None:
    """The costs the cache holds for ``key``, or None (absent, foreign, corrupt or out of :data:`BOUNDS`)."""
    return _valid(read_cache(path).get(key))


def write_cache(path: Path | None, key: str, costs: Costs) -> bool:
    """Add ``costs`` under ``key`` (atomically; the newest :data:`MAX_ENTRIES` kept); False where it cannot be
    written (a read-only home, a link or a folder in its place: left as it is)."""
    from privgate.io.atomic import write_atomic

    if path is None:
        return False
    entries = {k: v for k, v in read_cache(path).items() if k != key and _valid(v) is not None}
    entries[key] = {**{k: v for k, v in asdict(costs).items() if k != "source"}, "measured_at": time.time()}
    kept = dict(list(entries.items())[-MAX_ENTRIES:])
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        write_atomic(path, json.dumps({"format": _FORMAT, "entries": kept}, indent=1) + "\n", 0o600)
    except OSError:
        return False
    return True


# --------------------------------------------------------------------------- the measurements


def _sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


@contextlib.contextmanager
def _threads(n: int) -> Iterator[None]:
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(max(n, 1))
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _timed(device: str, step: Any, seconds: float, calls: int = 3) -> float:
    """Seconds of the fastest call of ``step`` on ``device`` (after one warm-up call), of at least ``calls`` calls and
    as many more as fit in ``seconds``: the fastest, because other work on the machine only slows a call down."""
    step()
    _sync(device)
    best, n, start = math.inf, 0, time.perf_counter()
    while n < calls or time.perf_counter() - start < seconds:
        t0 = time.perf_counter()
        step()
        _sync(device)
        best, n = min(best, time.perf_counter() - t0), n + 1
    return best


def _tiny_step(device: str) -> tuple[Any, int]:
    """One Adam step of a tiny CNN on ``device`` (pure overhead: a convolution, BatchNorm and an MLP head on 4×4
    images of batch 4) and its launches by the estimate's count (:attr:`privgate.device.Workload.launches_per_step`)."""
    import torch
    from torch import nn

    from privgate.device import LAUNCHES_PER_LAYER, LAUNCHES_PER_STEP

    gen = torch.Generator().manual_seed(0)
    net = nn.Sequential(
        nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(),
        nn.Linear(64, 8), nn.Tanh(), nn.Linear(8, 4),
    ).to(device)  # fmt: skip
    layers = sum(1 for m in net.modules() if not list(m.children()))
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    x = torch.randn(4, 1, 4, 4, generator=gen).to(device)
    y = torch.zeros(4, dtype=torch.long).to(device)

    def step() -> None:
        opt.zero_grad()
        nn.functional.cross_entropy(net(x), y).backward()
        opt.step()

    return step, LAUNCHES_PER_LAYER * layers + LAUNCHES_PER_STEP


def _arithmetic(device: str, scale: int) -> tuple[Any, float]:
    """A stacked matmul and a convolution, forward and backward, sized by ``scale``, and their FLOPs."""
    import torch

    gen = torch.Generator().manual_seed(0)
    k, rows, width = 16, 64 * scale, 128 * min(scale, 4)
    w = (torch.randn(k, width, width, generator=gen) / width).to(device).requires_grad_()
    x = torch.randn(k, rows, width, generator=gen).to(device)
    batch, cin, cout, side = 16 * scale, 16, 32, 16
    f = (torch.randn(cout, cin, 3, 3, generator=gen) / 12).to(device).requires_grad_()
    im = torch.randn(batch, cin, side, side, generator=gen).to(device)

    def step() -> None:
        torch.tanh(torch.bmm(x, w)).sum().backward()
        torch.nn.functional.conv2d(im, f, padding=1).relu().sum().backward()

    flops = 3 * (2.0 * k * rows * width * width + 2.0 * cin * 9 * cout * side * side * batch)
    return step, flops


def measure(
    threads: int,
    gpu: str | None = "cuda",
    loop_seconds: float = LOOP_SECONDS,
    started_for: float = 0.0,
    gpu_scale: int = 8,
) -> Costs:
    """The costs measured now: the CPU on ``threads`` threads, and the ``gpu`` device (its start-up first).

    ``gpu`` None keeps the documented GPU costs (the CPU alone is measured); any torch device name may be given
    (the tests give ``"cpu"``, whose start-up is then the first step's time). ``started_for``: seconds of the
    GPU's start-up already spent (reading its name started CUDA); ``gpu_scale`` sizes the GPU's arithmetic.
    """
    from privgate.device import DOCUMENTED

    with _threads(threads):  # the run's threads, for the host side of the GPU's steps too
        step, flops = _arithmetic("cpu", 1)
        cpu_flops = flops / _timed("cpu", step, loop_seconds) / max(threads, 1)
        tiny, launches = _tiny_step("cpu")
        cpu_op = _timed("cpu", tiny, loop_seconds / 2) / launches
        costs = replace(DOCUMENTED, cpu_flops_per_thread=cpu_flops, cpu_op_seconds=cpu_op, source="measured")
        if gpu is None:
            return costs
        t0 = time.perf_counter()  # the start-up: the context, the first step (cuBLAS), the first convolution (cuDNN)
        tiny, launches = _tiny_step(gpu)
        tiny()
        _sync(gpu)
        step, flops = _arithmetic(gpu, gpu_scale)
        step()
        _sync(gpu)
        first = time.perf_counter() - t0
        per_step = _timed(gpu, step, loop_seconds)
        per_launch = _timed(gpu, tiny, loop_seconds / 2) / launches
        start = max(started_for + first - per_step - per_launch * launches, 0.0)
        return replace(costs, gpu_start_seconds=start, gpu_flops=flops / per_step, gpu_launch_seconds=per_launch)


def machine_costs(threads: int, path: Path | None = None, gpu: str = "cuda", **how: Any) -> Probe:
    """The costs of this machine's ``gpu`` and CPU for ``threads`` threads: from the cache file ``path``, else
    measured (and cached there; where CUDA had already started in this process the start-up cannot be measured, so
    nothing is cached; ``None``: measured every time). ``how``: :func:`measure`'s loop and scale (the tests give
    another ``gpu`` and small ones)."""
    import torch

    t0 = time.perf_counter()
    cuda = gpu.startswith("cuda")
    started = cuda and torch.cuda.is_initialized()
    key = machine_key(torch.cuda.get_device_name() if cuda else gpu, threads)
    named = time.perf_counter() - t0
    hit = cached(path, key)
    if hit is not None:
        return Probe(hit, time.perf_counter() - t0)
    costs = measure(threads, gpu, started_for=named, **how)
    if not started:
        write_cache(path, key, costs)
    return Probe(costs, time.perf_counter() - t0)


def probe_file(cache_dir: str | Path | None) -> Path | None:
    """Where a run keeps the probe: beside its reference-model cache (the CLI's default: ``$XDG_CACHE_HOME/privgate``,
    :func:`privgate.cli.cache_settings.default_cache_dir`); ``None`` (measured every run) when the run has no cache."""
    from privgate.options import CACHE_OFF

    if cache_dir is None or str(cache_dir).strip().lower() in CACHE_OFF:
        return None
    return Path(cache_dir) / FILE_NAME


__all__ = [
    "BOUNDS", "FILE_NAME", "Probe", "cached", "machine_costs", "measure", "probe_file", "write_cache"
]  # fmt: skip
