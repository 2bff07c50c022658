"""How busy the machine's cores are now, and how many threads that leaves a run (the rule under load).

:func:`machine_load` counts the threads ready to run besides the reader
(``procs_running`` of ``/proc/stat``, sampled a few times over a few
milliseconds; where there is no ``/proc``, the 1-minute load average, less
one for this process); :func:`threads_under_load` turns it into threads.
The rule, and the measurements behind it (``benchmarks/compute/assert_under_load.py``),
are in ``docs/compute.md`` ("Threads under load").
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

#: The kernel's counters (a parameter of :func:`machine_load`, so a test can give its own).
PROC_STAT = Path("/proc/stat")
#: The 1-minute load average, where the system has one (where there is no ``/proc/stat``).
LOADAVG: Callable[[], tuple[float, float, float]] | None = getattr(os, "getloadavg", None)
#: How many times ``procs_running`` is read, and the pause between two reads (seconds).
SAMPLES = 8
PAUSE_S = 0.002


class Load(NamedTuple):
    """Threads ready to run on the machine besides this process's reader, and where the number comes from."""

    others: float
    source: str


def procs_running(stat: Path = PROC_STAT) -> int | None:
    """``procs_running`` of ``stat``: threads running or ready to run now, the reader included (None: unreadable)."""
    try:
        text = stat.read_text()
    except (OSError, UnicodeDecodeError):
        return None
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key == "procs_running" and value.strip().isdigit():
            return int(value)
    return None


def machine_load(
    stat: Path = PROC_STAT,
    loadavg: Callable[[], tuple[float, float, float]] | None = LOADAVG,
    samples: int = SAMPLES,
    pause_s: float = PAUSE_S,
) -> Load | None:
    """Other runnable threads on the machine (the mean of ``samples`` reads of ``stat``, less the reader).

    Without ``stat``: the 1-minute load average less one (it lags a minute
    behind, both when work starts and when it stops). None when neither can
    be read.
    """
    seen = []
    for i in range(max(1, samples)):
        n = procs_running(stat)
        if n is None:
            break
        seen.append(n)
        if i + 1 < samples:
            time.sleep(pause_s)
    if seen:
        return Load(max(0.0, sum(seen) / len(seen) - 1), "runnable threads now, from /proc/stat")
    try:
        one_minute = loadavg()[0] if loadavg is not None else None
    except OSError:
        one_minute = None
    if one_minute is None:
        return None
    return Load(max(0.0, one_minute - 1), "the 1-minute load average")


def threads_under_load(cores: int, others: float, machine_cpus: int) -> int:
    """Threads for a run that may use ``cores`` of the machine's ``machine_cpus``, with ``others`` threads runnable.

    The others are taken as spread evenly over the machine's CPUs, so
    ``others × cores / machine_cpus`` of them compete for this run's cores;
    the run gets the cores they leave free, rounded to the nearest whole core,
    at least one and at most ``cores``.
    """
    cores = max(1, int(cores))
    share = max(0.0, float(others)) * cores / max(int(machine_cpus), cores)
    return max(1, min(cores, math.floor(cores - share + 0.5)))


__all__ = ["PROC_STAT", "Load", "machine_load", "procs_running", "threads_under_load"]
