"""The output flags of every command, built from the format registry, and writing what a job returned.

:func:`output_options` gives a command one ``--FORMAT PATH`` flag per format
that serves its job (:func:`privgate.report.formats_for`) and hands the command
one ``outputs`` mapping; :func:`planned` names those paths for the output guard
(:mod:`privgate.io.guards`); :func:`write_and_show` renders every format, writes
them together with the job's own files (:mod:`privgate.io.staging`: all or
none), prints the report and returns its exit code. Adding a format adds its
flag to every command that can write it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from privgate.report import available_formats, formats_for, get_format, render, title_of
from privgate.report.safe import clean

if TYPE_CHECKING:
    from rich.console import Console

    from privgate.io.guards import Named
    from privgate.report.model import BaseReport


def output_options(job: str | None) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator: a ``--NAME PATH`` option per format serving ``job`` (every format for ``None``); the command
    receives ``outputs={name: path}``."""
    formats = formats_for(job) if job is not None else [get_format(n) for n in available_formats()]

    def apply(fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            outputs = {f.name: kwargs.pop(f"{f.name}_path", None) for f in formats}
            return fn(*args, outputs=outputs, **kwargs)

        for f in reversed(formats):
            wrapper = click.option(f"--{f.name}", f"{f.name}_path", type=click.Path(dir_okay=False), help=f.help)(
                wrapper
            )
        return wrapper

    return apply


def planned(outputs: Mapping[str, str | None], flag: Callable[[str], str] | None = None) -> list[Named]:
    """The output paths as the guard names them: ``the JUnit report (--junit)``."""
    from privgate.io.guards import Named

    def named(fmt: str) -> str:
        return flag(fmt) if flag is not None else f"--{fmt}"

    return [Named(Path(p), f"the {title_of(fmt)} ({named(fmt)})") for fmt, p in outputs.items() if p]


def rendered(report: BaseReport, outputs: Mapping[str, str | None], **options: Any) -> dict[Path, tuple[str, str]]:
    """``{path: (what, text)}`` for each format with a path.

    The HTML report embeds only the images attached to ``report`` (:func:`privgate.report.html.attach_images`:
    the bytes this run wrote); no writer reads a file a report names.
    """
    return {Path(p): (title_of(fmt), render(report, fmt, **options)) for fmt, p in outputs.items() if p}


def write_and_show(
    report: BaseReport,
    outputs: Mapping[str, str | None],
    out: Console,
    *,
    quiet: bool = False,
    verbose: bool = False,
    files: Mapping[Path, tuple[str, str | bytes]] | None = None,
    **options: Any,
) -> int:
    """Write the report in every format asked for, with the job's own ``files``, all or none; print it; its exit code.

    ``options`` go to the writers and the console view that take them (the federation's ``attacker``).
    """
    from privgate.io.staging import commit
    from privgate.report.show import show

    everything: dict[Path, tuple[str, str | bytes]] = dict(rendered(report, outputs, **options))
    everything.update(files or {})
    if everything:
        commit(everything)
    show(report, out, quiet=quiet, verbose=verbose, **options)
    if not quiet:
        for fmt, path in outputs.items():
            if path:
                out.print(clean(f"{title_of(fmt)}: {path}"), markup=False, highlight=False)
    return report.exit_code


__all__ = ["output_options", "planned", "rendered", "write_and_show"]
