"""What every ``privgate`` command shares: its consoles and its exit-code discipline.

Exit codes: 0 pass, 1 policy violated, 2 usage or bad input, 3 inconclusive,
4 internal error, 130 / 143 stopped by SIGINT / SIGTERM. Bad input prints one
sentence naming the file or field, with no traceback (set ``PRIVGATE_DEBUG=1``
to see one for internal errors).
"""

from __future__ import annotations

import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import click
from rich.console import Console
from rich.markup import escape

from privgate.errors import PrivgateError

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
    """

    ci: bool = False
    columns: bool = False
    step_summary: str | None = None
    debug: bool = False


def process_environment() -> Environment:
    """The :class:`Environment` of the running ``privgate`` command (defaults outside one)."""
    ctx = click.get_current_context(silent=True)
    found = ctx.find_root().obj if ctx is not None else None
    return found if isinstance(found, Environment) else Environment()


def out_console() -> Console:
    """Stdout console; CI logs (no terminal) get a wide fixed width so tables do not wrap."""
    probe = Console()
    if probe.is_terminal or process_environment().columns:
        return Console(highlight=False, soft_wrap=True)
    return Console(highlight=False, soft_wrap=True, width=160)


def progress_wanted(quiet: bool, console: Console) -> bool:
    """Whether a command shows a progress spinner: on a terminal, not in CI, not with ``--quiet``."""
    return not quiet and console.is_terminal and not process_environment().ci


def err_console() -> Console:
    return Console(stderr=True, highlight=False, soft_wrap=True)


def guard(fn: Callable[..., int | None]) -> Callable[..., None]:
    """Turn PrivgateErrors into one line + exit 2, Ctrl-C / SIGTERM into one line + exit 130 / 143,
    and anything unexpected into exit 4."""

    def wrapper(*args: Any, **kwargs: Any) -> None:
        from privgate.io.interrupt import exit_status, sigterm_raises

        try:
            with sigterm_raises():
                code = fn(*args, **kwargs)
        except PrivgateError as exc:
            err_console().print(f"[bold red]error:[/] {escape(str(exc))}", markup=True, highlight=False)
            sys.exit(exc.exit_code)
        except KeyboardInterrupt as exc:  # SIGINT, or SIGTERM (privgate.io.interrupt.Terminated)
            status, name = exit_status(exc)
            err_console().print(
                f"interrupted ({name}): stopped without writing partial output.", markup=False, highlight=False
            )
            sys.exit(status)
        except (click.exceptions.Exit, click.ClickException, SystemExit):
            raise
        except Exception as exc:  # noqa: BLE001 — the last line of defence
            if process_environment().debug:
                traceback.print_exc()
            err_console().print(
                f"[bold red]internal error:[/] {exc.__class__.__name__}: {escape(str(exc))} (set "
                f"PRIVGATE_DEBUG=1 for a traceback)"
            )
            sys.exit(EXIT_INTERNAL)
        sys.exit(code or 0)

    wrapper.__name__ = fn.__name__
    wrapper.__doc__ = fn.__doc__
    return wrapper
