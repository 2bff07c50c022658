"""What every executor is (:class:`Executor`), the error one that cannot be used raises, and how tasks are grouped."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from privgate.errors import PrivgateError

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


def task_groups(n: int, size: int | None) -> list[range]:
    """Split ``n`` items into consecutive groups of at most ``size`` (all in one group when ``size`` is None).

    The split depends only on ``n`` and ``size``, never on the executor or the
    cluster, so the tasks — and the numbers — are the same wherever they run.
    """
    if n <= 0:
        return []
    step = n if size is None else max(1, int(size))
    return [range(i, min(i + step, n)) for i in range(0, n, step)]


__all__ = ["EXECUTORS", "INSTALL_RAY", "Executor", "ExecutorError", "task_groups"]
