"""Where independent pieces of a run execute: in this process (``local``) or as Ray tasks (``ray``).

An executor gets a list of tasks — a function and an argument tuple each, every random choice fixed by a seed in the
arguments — and returns the results in submission order. The tasks, seeds and per-task threads do not depend on the
executor, so a run gives the same numbers on either (up to a CPU's BLAS rounding). The CLI chooses it (``--executor``,
``--ray-address``); code below receives it through :class:`~privgate.options.RunOptions` and calls
:func:`executor_for`. What runs as tasks: ``docs/ray.md``; several GPUs of this machine, one worker thread each:
:class:`DevicePool` (``docs/compute.md``).
"""

from __future__ import annotations

from typing import Any

from privgate.executors.base import EXECUTORS, INSTALL_RAY, Executor, ExecutorError, task_groups
from privgate.executors.devices import DevicePool
from privgate.executors.local import LocalExecutor


def executor_for(run: Any) -> Executor:
    """The executor a :class:`~privgate.options.RunOptions` names (a Ray connection is made once per process).

    Raises:
        ExecutorError: ``ray`` without Ray installed, or no cluster at ``run.ray_address``.
    """
    if run.executor == "local":
        return LocalExecutor()
    if run.executor == "ray":
        from privgate.executors.ray import connect

        return connect(run.ray_address)
    raise ExecutorError(f"unknown executor {run.executor!r} (use {', '.join(EXECUTORS)}).")


__all__ = [
    "EXECUTORS",
    "INSTALL_RAY",
    "DevicePool",
    "Executor",
    "ExecutorError",
    "LocalExecutor",
    "executor_for",
    "task_groups",
]
