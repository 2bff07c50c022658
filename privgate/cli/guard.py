"""What every ``privgate`` command shares: its consoles and its exit-code discipline.

Exit codes: 0 pass, 1 policy violated, 2 usage or bad input, 3 inconclusive,
4 internal error, 130 / 143 stopped by SIGINT / SIGTERM. Bad input prints one
sentence naming the file or field, with no traceback (set ``PRIVGATE_DEBUG=1``
to see one for internal errors).
"""

from __future__ import annotations

import contextlib
import os
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import click
from rich.console import Console
from rich.markup import escape

from privgate.errors import PrivgateError, out_of_memory

EXIT_PASS, EXIT_FAIL, EXIT_USAGE, EXIT_INCONCLUSIVE, EXIT_INTERNAL = 0, 1, 2, 3, 4


@dataclass(frozen=True)
class Environment:
    """What the ``privgate`` group read from the process environment, once, through click's ``envvar``
    declarations (:mod:`privgate.cli`); commands ask :func:`process_environment` instead of reading it themselves.

    Attributes:
        ci: ``$CI`` is set: no progress spinners in the log.
        columns: ``$COLUMNS`` is set: rich sizes the console from it (else a log gets 160 columns).
        step_summary: ``$GITHUB_STEP_SUMMARY``, the file GitHub Actions shows as the job summary.
        debug: ``$PRIVGATE_DEBUG`` is set: an internal error prints its traceback.
        omp_wait_policy: ``$OMP_WAIT_POLICY`` as the user set it (``None``: not set; see :func:`passive_openmp`).
        omp_num_threads: ``$OMP_NUM_THREADS`` as the user set it: the default thread count when no flag, no
            ``$PRIVGATE_THREADS`` and no config says one (:mod:`privgate.cli.threads`).
        cache_key: ``$PRIVGATE_CACHE_KEY``, the secret key of the reference-model cache (never shown:
            :mod:`privgate.cli.cache_settings`).
        xdg_cache_home: ``$XDG_CACHE_HOME``, where the user's cache folder is (:mod:`privgate.cli.cache_settings`).
        xdg_config_home: ``$XDG_CONFIG_HOME``, where the user's cache key file is.
    """

    ci: bool = False
    columns: bool = False
    step_summary: str | None = None
    debug: bool = False
    omp_wait_policy: str | None = None
    omp_num_threads: str | None = None
    cache_key: str | None = field(default=None, repr=False)
    xdg_cache_home: str | None = None
    xdg_config_home: str | None = None


def process_environment() -> Environment:
    """The :class:`Environment` of the running ``privgate`` command (defaults outside one)."""
    ctx = click.get_current_context(silent=True)
    found = ctx.find_root().obj if ctx is not None else None
    return found if isinstance(found, Environment) else Environment()


def out_console() -> Console:
    """Stdout console; CI logs (no terminal) get a wide fixed width so tables do not wrap."""
    probe = Console()
    if probe.is_terminal or process_environment().columns:
        return Console(highlight=False, soft_wrap=True, emoji=False)
    return Console(highlight=False, soft_wrap=True, width=160, emoji=False)


def progress_wanted(quiet: bool, console: Console) -> bool:
    """Whether a command shows a progress spinner: on a terminal, not in CI, not with ``--quiet``."""
    return not quiet and console.is_terminal and not process_environment().ci


def cap_threads(ctx: click.Context, param: click.Parameter, value: int | None) -> int | None:
    """click callback of every ``--threads``: at most :func:`privgate.threads.max_threads` (exit 2).

    The command turns it into the run's setting with :func:`privgate.cli.threads.threads_setting`.
    """
    from privgate.threads import threads_problem

    if value is not None:
        problem = threads_problem(value)
        if problem:
            raise click.BadParameter(problem + ".", ctx=ctx, param=param)
    return value


def passive_openmp(chosen: str | None) -> None:
    """Let OpenMP's idle threads sleep instead of spinning, unless the user chose (``chosen``: their
    ``$OMP_WAIT_POLICY``, read by the ``privgate`` group like every variable it honours).

    With more than one thread (the default on a machine with more than one core), torch's OpenMP
    threads spin between the many short parallel regions of training; on cores that other processes
    also use, a spinning thread holds a core its partner needs, and training a reference-model ensemble
    with 2 threads on a busy 2-core machine took 10-50x longer than with 1 (``benchmarks/peers/cold_start.py``).
    Sleeping threads cost a wake-up per region instead.
    OpenMP reads the process's C environment when it loads, so this only acts before torch is imported
    (the CLI imports it after parsing); it sets the variable for OpenMP (and child processes), not a setting
    any privgate code reads.
    """
    if chosen is None and "torch" not in sys.modules:
        os.putenv("OMP_WAIT_POLICY", "PASSIVE")


def err_console() -> Console:
    return Console(stderr=True, highlight=False, soft_wrap=True, emoji=False)


OUT_OF_MEMORY = (
    "[bold red]error:[/] out of memory: the run needs more memory than this machine gives it (fewer --threads, "
    "smaller data or a larger machine); outputs are written all together or not at all."
)
#: The longest error message printed (a 1 GB message must not reach the log).
MAX_MESSAGE = 2_000


def _say(markup: str, plain: str) -> None:
    """Print one error line on stderr; printing itself can never raise (out of memory, a closed stderr, …)."""
    try:
        err_console().print(markup, markup=True, highlight=False)
    except BaseException:  # noqa: BLE001 — a failing print must not turn into a traceback and exit 1
        try:
            sys.stderr.write(plain + "\n")
            sys.stderr.flush()
        except BaseException:  # noqa: BLE001
            pass


def _message(exc: BaseException) -> str:
    from privgate.report.safe import clean

    try:
        return clean(str(exc), newlines=False, most=MAX_MESSAGE)
    except BaseException:  # noqa: BLE001 — str() of a huge message can itself run out of memory
        return exc.__class__.__name__


#: Set when a command exits with its verdict: only then may the process exit 1 (:func:`privgate.cli.main`).
VERDICT = {"given": False}


def _exit(code: int) -> None:
    sys.exit(code)


def guard(fn: Callable[..., int | None]) -> Callable[..., None]:
    """Turn PrivgateErrors into one line + exit 2, Ctrl-C / SIGTERM into one line + exit 130 / 143,
    running out of memory into one line + exit 4, and anything unexpected into exit 4.

    No failure ends in exit 1 (which means "the policy is violated"): every
    error path, printing included, ends in the code of its error, and a
    :class:`MemoryError` (Python's, or torch's ``std::bad_alloc``) is reported
    as such, never as a problem of the input.
    """

    def wrapper(*args: Any, **kwargs: Any) -> None:
        from privgate.io.interrupt import exit_status, sigterm_raises

        try:
            with sigterm_raises():
                code = fn(*args, **kwargs)
        except PrivgateError as exc:
            cause = exc.__cause__ or exc.__context__  # kept by `raise ... from None`
            if cause is not None and out_of_memory(cause):  # a loader that blamed the input for a full memory
                _say(OUT_OF_MEMORY, "error: out of memory.")
                _exit(EXIT_INTERNAL)
            msg = _message(exc)
            _say(f"[bold red]error:[/] {escape(msg)}", f"error: {msg}")
            _exit(exc.exit_code if exc.exit_code != EXIT_FAIL else EXIT_INTERNAL)
        except KeyboardInterrupt as exc:  # SIGINT, or SIGTERM (privgate.io.interrupt.Terminated)
            status, name = exit_status(exc)
            _say(
                f"interrupted ({name}): stopped without writing partial output.",
                f"interrupted ({name}): stopped without writing partial output.",
            )
            _exit(status)
        except (click.exceptions.Exit, click.ClickException, SystemExit):
            raise
        except MemoryError:
            _say(OUT_OF_MEMORY, "error: out of memory.")
            _exit(EXIT_INTERNAL)
        except BaseException as exc:  # noqa: BLE001 — the last line of defence
            if out_of_memory(exc):
                _say(OUT_OF_MEMORY, "error: out of memory.")
                _exit(EXIT_INTERNAL)
            if process_environment().debug:
                with contextlib.suppress(BaseException):
                    traceback.print_exc()
            msg = _message(exc)
            name = exc.__class__.__name__
            _say(
                f"[bold red]internal error:[/] {name}: {escape(msg)} (set PRIVGATE_DEBUG=1 for a traceback)",
                f"internal error: {name}: {msg}",
            )
            _exit(EXIT_INTERNAL)
        VERDICT["given"] = True
        _exit(code or 0)

    wrapper.__name__ = fn.__name__
    wrapper.__doc__ = fn.__doc__
    return wrapper
