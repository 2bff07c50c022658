"""The local executor: every task in this process, one after another, in submission order."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from privgate.threads import limit_threads


class LocalExecutor:
    """Runs tasks here, in order; what the Ray executor's results are compared with."""

    name = "local"

    @property
    def workers(self) -> int:
        return 1

    def map(
        self, fn: Callable[..., Any], tasks: Sequence[tuple[Any, ...]], *, threads: int | None = None, gpus: float = 0
    ) -> list[Any]:
        """``[fn(*task) for task in tasks]`` with torch and BLAS held to ``threads`` threads (``gpus`` is ignored)."""
        out = []
        for task in tasks:
            with limit_threads(threads):
                out.append(fn(*task))
        return out


__all__ = ["LocalExecutor"]
