"""How many threads privgate's numerical work may use, and holding every thread pool to it.

The setting is a parameter (``--threads`` → :func:`privgate.api.check` → :attr:`AttackContext.threads
<privgate.attacks.base.AttackContext>`), never read from the environment below the CLI. :func:`usable_cores` is the
affinity mask capped by the cgroup CPU quota, rounded down, less the cores other work holds (:func:`free_cores`);
:func:`library_threads` caps torch's own setting the same way. torch's intra-op pool (:func:`torch_threads`) and
every BLAS/OpenMP pool (``threadpoolctl``) are held to it; scikit-learn's ``n_jobs`` stays 1.
Why, and the measurements: ``docs/compute.md`` ("Threads") and ``docs/internals-training-stats.md``.
"""

from __future__ import annotations

import math
import os
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from privgate.machine_load import Load, machine_load, threads_under_load

if TYPE_CHECKING:
    from threadpoolctl import ThreadpoolController

#: The most threads ever accepted, whatever the machine.
THREADS_CEILING = 256

#: Where cgroup file systems are mounted, and the process's own cgroups (both parameters of :func:`cgroup_cpus`).
CGROUP_ROOT = Path("/sys/fs/cgroup")
PROC_CGROUP = Path("/proc/self/cgroup")


class Threads(NamedTuple):
    """A thread count and why it is that (one phrase, for the report's ``environment.threads_reason``)."""

    n: int
    reason: str


#: The default with the Ray executor: each task asks Ray for ``threads`` CPUs on whichever node runs it, and the
#: cluster runs tasks side by side; this machine's cores say nothing of the nodes'.
RAY_DEFAULT = Threads(1, "one thread per Ray task (the cluster runs the tasks side by side)")


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None


def _quota_v2(folder: Path) -> float | None:
    """CPUs of ``cpu.max`` (``"150000 100000"`` → 1.5; ``"max 100000"`` → None)."""
    text = _read(folder / "cpu.max")
    parts = text.split() if text else []
    if len(parts) != 2 or parts[0] == "max":
        return None
    try:
        quota, period = int(parts[0]), int(parts[1])
    except ValueError:
        return None
    return quota / period if quota > 0 and period > 0 else None


def _quota_v1(folder: Path) -> float | None:
    """CPUs of ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us`` (a quota of -1: none)."""
    quota, period = _read(folder / "cpu.cfs_quota_us"), _read(folder / "cpu.cfs_period_us")
    try:
        q, p = int(quota or ""), int(period or "")
    except ValueError:
        return None
    return q / p if q > 0 and p > 0 else None


def _up(root: Path, relative: str) -> list[Path]:
    """``root/relative`` and every folder above it up to ``root`` (a quota on a parent cgroup binds its children)."""
    parts = [p for p in relative.strip("/").split("/") if p and p != ".."]
    return [root.joinpath(*parts[:i]) for i in range(len(parts), -1, -1)]


def cgroup_cpus(root: Path = CGROUP_ROOT, proc_cgroup: Path = PROC_CGROUP) -> float | None:
    """The CPU quota of this process's cgroup in CPUs (1.5 = 150 ms per 100 ms), or None when there is none.

    Reads ``proc_cgroup`` (``/proc/self/cgroup``) for the process's cgroup in
    each hierarchy, then the quota of that cgroup and of every cgroup above it
    (the smallest binds): ``cpu.max`` under ``root`` (cgroup v2, also at
    ``root/unified`` on hybrid systems) and ``cpu.cfs_quota_us`` /
    ``cpu.cfs_period_us`` under the v1 ``cpu`` controller's mount. Inside a
    container the paths are the container's own (cgroup namespaces), so the
    process's cgroup is the mount's root. Nothing readable: None.
    """
    found: list[float] = []
    for line in (_read(proc_cgroup) or "").splitlines():
        fields = line.split(":", 2)
        if len(fields) != 3:
            continue
        _, controllers, relative = fields
        if controllers == "":  # the v2 hierarchy
            for base in (root, root / "unified"):
                found += [q for f in _up(base, relative) if (q := _quota_v2(f)) is not None]
        elif "cpu" in controllers.split(","):
            for mount in (controllers, "cpu", "cpu,cpuacct", "cpuacct,cpu"):
                base = root / mount
                if base.is_dir():
                    found += [q for f in _up(base, relative) if (q := _quota_v1(f)) is not None]
                    found += [q for q in [_quota_v1(base)] if q is not None]
                    break
    return min(found) if found else None


def usable_cores(root: Path = CGROUP_ROOT, proc_cgroup: Path = PROC_CGROUP) -> Threads:
    """The cores this process may use: its CPU affinity, capped by its cgroup's CPU quota (rounded down, at least 1).

    ``root`` and ``proc_cgroup`` name the files :func:`cgroup_cpus` reads (the
    system's by default).
    """
    try:
        affinity = len(os.sched_getaffinity(0))
        where = f"CPU affinity {affinity} of {os.cpu_count() or affinity} CPUs"
    except (AttributeError, OSError):  # no sched_getaffinity (macOS, Windows)
        affinity = os.cpu_count() or 1
        where = f"{affinity} CPUs"
    quota = cgroup_cpus(root, proc_cgroup)
    if quota is not None and math.floor(quota) < affinity:
        n = max(1, math.floor(quota))
        return Threads(n, f"the cores this process may use: its cgroup's CPU quota of {quota:g} CPUs ({where})")
    limit = f"a cgroup CPU quota of {quota:g} CPUs" if quota is not None else "no cgroup CPU quota"
    return Threads(max(1, affinity), f"the cores this process may use ({where}; {limit})")


def free_cores(cores: Threads, load: Load | None, machine_cpus: int) -> Threads:
    """``cores`` less what other runnable work holds of them (:func:`~privgate.machine_load.threads_under_load`).

    ``load`` None (nothing readable): ``cores`` as it is.
    """
    if load is None:
        return cores
    n = threads_under_load(cores.n, load.others, machine_cpus)
    return Threads(n, f"{cores.reason}, {n} of them free ({load.others:.1f} other runnable threads: {load.source})")


def _free_now(cores: Threads) -> Threads:
    return free_cores(cores, machine_load(), os.cpu_count() or cores.n)


def omp_threads(value: str | None) -> int | None:
    """The threads ``$OMP_NUM_THREADS`` asks for (its first number: ``"4,2"`` → 4), or None when unset or not one."""
    head = (value or "").split(",")[0].strip()
    return int(head) if head.isdigit() and int(head) > 0 else None


def default_threads(omp_num_threads: str | None = None) -> Threads:
    """The CLI's and the pytest plugin's default: ``$OMP_NUM_THREADS`` when it is a number, else the free usable cores.

    ``omp_num_threads`` is the variable's value as the front door read it (None:
    unset). A value above :func:`max_threads` is capped there.
    """
    asked = omp_threads(omp_num_threads)
    if asked is not None:
        n = min(asked, max_threads())
        capped = f", capped at {n}" if n < asked else ""
        return Threads(n, f"$OMP_NUM_THREADS={asked}{capped}")
    return _free_now(usable_cores())


def library_threads() -> Threads:
    """What ``threads=None`` means below the front doors: torch's own thread setting, capped by the free usable cores.

    ``torch.get_num_threads()`` already follows ``$OMP_NUM_THREADS``, the
    affinity mask and any ``torch.set_num_threads`` of the calling program;
    the cgroup quota it does not see. A process that has not imported torch (a
    scikit-learn audit never does) has no torch setting: the most threads of the
    BLAS and OpenMP pools loaded (``threadpoolctl``), which follow the same.
    """
    torch = sys.modules.get("torch")
    if torch is None:
        mine = max([int(p.get("num_threads") or 1) for p in pools().info()], default=1)
        setting = f"the BLAS and OpenMP pools' thread setting in this process (threadpoolctl: {mine})"
    else:
        mine = torch.get_num_threads()
        setting = f"torch's thread setting in this process (torch.get_num_threads() = {mine})"
    if mine <= 1:
        return Threads(1, setting)
    cores = _free_now(usable_cores())
    if mine <= cores.n:
        return Threads(max(1, mine), setting)
    theirs = "torch's setting" if torch is not None else "the pools' setting"
    return Threads(cores.n, f"{cores.reason}, fewer than {theirs} of {mine}")


def max_threads() -> int:
    """The most threads a run may ask for: four per CPU core, at most :data:`THREADS_CEILING`.

    More threads than that only slow a run down, and each one reserves a
    stack and per-thread buffers: ``--threads 10000`` exhausts memory before
    any work starts.
    """
    return min(THREADS_CEILING, 4 * (os.cpu_count() or 1))


def threads_problem(value: object) -> str | None:
    """Why ``value`` is not a thread count (one sentence), or None."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        return f"threads must be a positive integer, got {value!r}"
    if value > max_threads():
        return (
            f"{value} threads is more than the {max_threads()} this machine can use "
            f"(4 per CPU core, {os.cpu_count() or 1} cores, at most {THREADS_CEILING})"
        )
    return None


#: ``n_jobs`` for every scikit-learn call that takes one (see the module docstring).
SKLEARN_JOBS = 1


_THREADS_LOCK = threading.Lock()
_THREADS_DEPTH = 0
_THREADS_SAVED = 0


@contextmanager
def torch_threads(n: int | None) -> Iterator[None]:
    """Run the block with ``torch.set_num_threads(n)`` and restore the caller's setting after.

    Nested and concurrent blocks share one setting: the outermost sets it, the
    last to leave restores it. Nothing when torch is not imported (a scikit-learn
    audit never imports it): whatever trains on torch imports it first.
    """
    global _THREADS_DEPTH, _THREADS_SAVED
    torch = sys.modules.get("torch")
    if not n or torch is None:
        yield
        return
    with _THREADS_LOCK:
        if _THREADS_DEPTH == 0:
            _THREADS_SAVED = torch.get_num_threads()
            torch.set_num_threads(int(n))
        _THREADS_DEPTH += 1
    try:
        yield
    finally:
        with _THREADS_LOCK:
            _THREADS_DEPTH -= 1
            if _THREADS_DEPTH == 0:
                torch.set_num_threads(_THREADS_SAVED)


def resolve_threads(threads: int | None) -> int:
    """``threads``, or :func:`library_threads` when it is None; at least 1."""
    return library_threads().n if threads is None else max(1, int(threads))


#: threadpoolctl's controller of the pools loaded when it was made, and ``len(sys.modules)`` then (:func:`pools`).
_POOLS: tuple[int, ThreadpoolController] | None = None


def pools() -> ThreadpoolController:
    """threadpoolctl's ``ThreadpoolController`` of the BLAS and OpenMP pools loaded in this process, found again only
    after an import. Finding them walks every shared library loaded (7 ms a time with torch, measured; a check holds
    the pools once an attack); a new pool comes with an import: an extension module, or what it loads."""
    global _POOLS
    from threadpoolctl import ThreadpoolController

    loaded = len(sys.modules)
    found = _POOLS
    if found is None or found[0] != loaded:
        found = _POOLS = (loaded, ThreadpoolController())
    return found[1]


@contextmanager
def native_threads(threads: int | None) -> Iterator[int]:
    """Hold every BLAS and OpenMP pool loaded in the process to ``threads`` (restored after).

    Enter it after the library that brings the pool is imported (e.g. after
    building a scikit-learn estimator): threadpoolctl limits the libraries
    loaded when the block starts.
    """
    n = resolve_threads(threads)
    with pools().limit(limits=n):
        yield n


@contextmanager
def limit_threads(threads: int | None) -> Iterator[int]:
    """Hold torch's intra-op threads and every BLAS/OpenMP pool to ``threads`` for the block."""
    n = resolve_threads(threads)
    with torch_threads(n), native_threads(n):
        yield n


__all__ = [
    "RAY_DEFAULT",
    "SKLEARN_JOBS",
    "Threads",
    "cgroup_cpus",
    "default_threads",
    "free_cores",
    "library_threads",
    "limit_threads",
    "native_threads",
    "pools",
    "omp_threads",
    "resolve_threads",
    "torch_threads",
    "usable_cores",
]
