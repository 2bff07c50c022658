"""Where independent pieces of a run execute: in this process (``local``) or as Ray tasks (``ray``).

An executor gets a list of tasks — a function and an argument tuple each, every random choice fixed by a seed in the
arguments — and returns the results in submission order. The tasks, seeds and per-task threads do not depend on the
executor, so a run gives the same numbers on either (up to a CPU's BLAS rounding). The CLI chooses it (``--executor``,
``--ray-address``); code below receives it through :class:`~privgate.options.RunOptions` and calls
:func:`executor_for`. What runs as tasks: ``docs/ray.md``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from privgate.errors import PrivgateError
from privgate.executors.local import LocalExecutor

#: Executors a run can name (``RunOptions.executor``, ``--executor``).
EXECUTORS: tuple[str, ...] = ("local", "ray")
#: What to tell a user whose environment lacks Ray.
INSTALL_RAY = "pip install 'privgate[ray]'"


class ExecutorError(PrivgateError):
    """An executor that cannot be used: Ray not installed, or no Ray cluster at the address."""


class Executor(Protocol):
    """Runs independent tasks and returns their results in submission order."""

    name: str

    @property
    def workers(self) -> int:
        """How many tasks of one CPU can run at once."""
        ...

    def map(
        self, fn: Callable[..., Any], tasks: Sequence[tuple[Any, ...]], *, threads: int | None = None, gpus: float = 0
    ) -> list[Any]:
        """``[fn(*task) for task in tasks]``, each call holding torch and BLAS to ``threads`` threads."""
        ...


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


def task_groups(n: int, size: int | None) -> list[range]:
    """Split ``n`` items into consecutive groups of at most ``size`` (all in one group when ``size`` is None).

    The split depends only on ``n`` and ``size``, never on the executor or the
    cluster, so the tasks — and the numbers — are the same wherever they run.
    """
    if n <= 0:
        return []
    step = n if size is None else max(1, int(size))
    return [range(i, min(i + step, n)) for i in range(0, n, step)]


__all__ = ["EXECUTORS", "INSTALL_RAY", "Executor", "ExecutorError", "LocalExecutor", "executor_for", "task_groups"]
