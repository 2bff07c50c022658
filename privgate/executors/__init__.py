"""Where independent pieces of a run execute: in this process (``local``) or as Ray tasks (``ray``).

privgate hands an executor a list of *tasks* — one function and one argument
tuple per task, every random choice fixed by a seed inside the arguments — and
gets the results back in submission order. Because the decomposition into
tasks, the seeds and the thread count inside each task are the same whatever
the executor, a run gives the same numbers on either (on machines with the same
CPU instruction set: float rounding of a BLAS kernel can differ across CPUs as
it would locally).

What is submitted as tasks:

* groups of reference models (:func:`privgate.training.engine.train_ensemble`:
  at most :attr:`~privgate.options.RunOptions.models_per_task` models per task,
  each group vectorised inside its task; the cache stays on the driver);
* the DP-SGD clip-norm search runs of a remediation
  (:func:`privgate.dp.clip.search_clip_norm`); the ε candidates themselves stay
  one after another because each step of the ladder or the bisection depends on
  the last, and each candidate's reference models are groups as above;
* the topologies of a federated simulation (:func:`privgate.audits.federated.run.simulate`);
* the (adversary, ε) cells of an LDP audit (:func:`privgate.audits.ldp.audit_ldp`),
  each with its own seeded generator.

The CLI chooses the executor (``--executor``, ``--ray-address``); code below it
receives it through :class:`~privgate.options.RunOptions` and calls
:func:`executor_for`.
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
