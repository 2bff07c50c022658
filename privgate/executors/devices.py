"""Tasks spread over this machine's devices: one worker thread per device, task i on device i mod N, results in order.

Threads, not processes: CUDA cannot run in a forked child, and a spawned one would import torch and copy the audit
rows again. Each worker runs its tasks one after another with its device current for its thread
(:func:`privgate.device.on_device`); torch releases the GIL inside its kernels. The tasks and their split never
depend on N (:func:`~privgate.executors.base.task_groups`), so one device and eight give the same numbers. Why
threads, and what they cost a small model: ``docs/compute.md``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from privgate import device as devices_module
from privgate.threads import limit_threads


class DevicePool:
    """One worker per device; task i runs on ``devices[i % N]`` (:meth:`place`), one after another per worker."""

    name = "local"

    def __init__(self, devices: Sequence[str]) -> None:
        if not devices:
            raise ValueError("a device pool needs at least one device")
        self.devices = tuple(devices)

    @property
    def workers(self) -> int:
        return len(self.devices)

    def place(self, count: int) -> list[str]:
        """The device each of ``count`` tasks runs on, in task order."""
        return [self.devices[i % len(self.devices)] for i in range(count)]

    def map(
        self, fn: Callable[..., Any], tasks: Sequence[tuple[Any, ...]], *, threads: int | None = None, gpus: float = 0
    ) -> list[Any]:
        """``[fn(*task) for task in tasks]``, task i on the worker of device ``place(len(tasks))[i]``, concurrently.

        torch and BLAS are held to ``threads`` for the whole map (a process-wide setting, ``gpus`` is ignored). A
        failing task stops every worker before its next task; the failure of the earliest task is raised.
        """
        n = len(self.devices)
        lanes = [range(w, len(tasks), n) for w in range(n)]
        results: list[Any] = [None] * len(tasks)
        failed: dict[int, BaseException] = {}
        stop = threading.Event()

        def work(w: int) -> None:
            with devices_module.on_device(self.devices[w]):
                for i in lanes[w]:
                    if stop.is_set():
                        return
                    try:
                        results[i] = fn(*tasks[i])
                    except BaseException as exc:  # handed to the caller's thread
                        failed[i] = exc
                        stop.set()
                        return

        with limit_threads(threads), ThreadPoolExecutor(n, thread_name_prefix="privgate-device") as pool:
            try:
                for future in [pool.submit(work, w) for w in range(n) if len(lanes[w])]:
                    future.result()
            except BaseException:  # an interrupt: the workers stop after their current task
                stop.set()
                raise
        if failed:
            raise failed[min(failed)]
        return results


__all__ = ["DevicePool"]
