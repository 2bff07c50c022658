"""What every ``privgate`` command shares: its consoles and its exit-code discipline.

Exit codes: 0 pass, 1 policy violated, 2 usage or bad input, 3 inconclusive,
4 internal error, 130 / 143 stopped by SIGINT / SIGTERM. Bad input prints one
sentence naming the file or field, with no traceback (set ``PRIVGATE_DEBUG=1``
to see one for internal errors).
"""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Callable
from typing import Any

import click
from rich.console import Console
from rich.markup import escape

from privgate.errors import PrivgateError

EXIT_PASS, EXIT_FAIL, EXIT_USAGE, EXIT_INCONCLUSIVE, EXIT_INTERNAL = 0, 1, 2, 3, 4


def out_console() -> Console:
    """Stdout console; CI logs (no terminal) get a wide fixed width so tables do not wrap."""
    probe = Console()
    if probe.is_terminal or os.environ.get("COLUMNS"):
        return Console(highlight=False, soft_wrap=True)
    return Console(highlight=False, soft_wrap=True, width=160)


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
            if os.environ.get("PRIVGATE_DEBUG"):
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
