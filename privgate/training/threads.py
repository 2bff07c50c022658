"""How many threads privgate's numerical work may use, and holding every thread pool to it.

The setting is a parameter (``--threads`` → :func:`privgate.api.check` →
:func:`privgate.gate.check_model` → :attr:`AttackContext.threads <privgate.attacks.base.AttackContext>`),
never read from the environment below the CLI.

Why the default is one thread: training small models and fitting small
classifiers is a long chain of short parallel regions. On a machine whose cores
are shared (CI runners, pytest-xdist workers, other jobs) every region waits for
a descheduled thread, so more threads can be several times *slower* than one,
and scikit-learn's histogram gradient boosting, which by default starts an
OpenMP thread per core, can stall for minutes on a busy runner. One thread per
process is the robust default; give ``--threads`` the core count on a machine
that does nothing else.

Three pools are held to the setting: torch's intra-op threads
(:func:`torch_threads`), and every BLAS and OpenMP library
loaded in the process — numpy/scipy's OpenBLAS and scikit-learn's OpenMP —
through ``threadpoolctl.threadpool_limits``. scikit-learn's ``n_jobs`` (worker
processes or threads of joblib) stays 1 in privgate's fits: jobs on top of
``threads`` threads each would multiply the two.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

#: Threads used when none are asked for.
DEFAULT_THREADS = 1

#: ``n_jobs`` for every scikit-learn call that takes one (see the module docstring).
SKLEARN_JOBS = 1


_THREADS_LOCK = threading.Lock()
_THREADS_DEPTH = 0
_THREADS_SAVED = 0


@contextmanager
def torch_threads(n: int | None) -> Iterator[None]:
    """Run the block with ``torch.set_num_threads(n)`` and restore the caller's setting after.

    Nested and concurrent blocks share one setting: the outermost sets it, the
    last to leave restores it.
    """
    import torch

    global _THREADS_DEPTH, _THREADS_SAVED
    if not n:
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
    """``threads``, or :data:`DEFAULT_THREADS` when it is None; at least 1."""
    return DEFAULT_THREADS if threads is None else max(1, int(threads))


@contextmanager
def native_threads(threads: int | None) -> Iterator[int]:
    """Hold every BLAS and OpenMP pool loaded in the process to ``threads`` (restored after).

    Enter it after the library that brings the pool is imported (e.g. after
    building a scikit-learn estimator): threadpoolctl limits the libraries
    loaded when the block starts.
    """
    from threadpoolctl import threadpool_limits

    n = resolve_threads(threads)
    with threadpool_limits(limits=n):
        yield n


@contextmanager
def limit_threads(threads: int | None) -> Iterator[int]:
    """Hold torch's intra-op threads and every BLAS/OpenMP pool to ``threads`` for the block."""
    n = resolve_threads(threads)
    with torch_threads(n), native_threads(n):
        yield n


__all__ = ["DEFAULT_THREADS", "SKLEARN_JOBS", "limit_threads", "native_threads", "resolve_threads", "torch_threads"]
