"""How many threads a command's run may use, and why: the one place the CLI decides it.

``--threads``, else ``$PRIVGATE_THREADS``, else the config's ``threads``, else ``$OMP_NUM_THREADS``, else
the cores this process may use (:func:`privgate.threads.default_threads`); one per Ray task with
``--executor ray``. The reason goes into ``environment.threads_reason``. With more than one thread OpenMP's
idle threads are told to sleep before torch loads (:func:`privgate.cli.guard.passive_openmp`), so call this
before importing the user's modules.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
from click.core import ParameterSource

from privgate.cli.guard import passive_openmp, process_environment


def threads_setting(
    value: int | None, config_value: int | None = None, config: Path | None = None, executor: str = "local"
) -> dict[str, Any]:
    """``threads`` and ``threads_reason`` for :class:`~privgate.options.RunOptions` (see the module docstring).

    Args:
        value: ``--threads`` as click parsed it (``$PRIVGATE_THREADS`` when the flag is absent), validated.
        config_value: the config file's ``threads``, validated (:mod:`privgate.inputs.config`).
        config: the config file, named in the reason.
        executor: the run's executor; with ``ray`` the default is one thread per task (the cluster runs the
            tasks side by side, each asking Ray for ``threads`` CPUs; this machine's cores say nothing of its nodes').
    """
    from privgate.threads import RAY_DEFAULT, default_threads

    env = process_environment()
    if value is not None:
        ctx = click.get_current_context(silent=True)
        source = ctx.get_parameter_source("threads") if ctx is not None else None
        given = "$PRIVGATE_THREADS" if source is ParameterSource.ENVIRONMENT else "--threads"
        n, reason = value, f"{given}={value}"
    elif config_value is not None:
        n, reason = int(config_value), f"'threads = {config_value}' in {config.name if config else 'the config'}"
    elif executor == "ray":
        n, reason = RAY_DEFAULT
    else:
        n, reason = default_threads(env.omp_num_threads)
    if n > 1:
        passive_openmp(env.omp_wait_policy)
    return {"threads": n, "threads_reason": reason}


__all__ = ["threads_setting"]
