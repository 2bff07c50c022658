"""The console view of any report of the family: the job's own printer, or only the verdict line with ``quiet``."""

from __future__ import annotations

import inspect
from typing import Any

from rich.console import Console

from privgate.lazy import load
from privgate.report.model import BaseReport
from privgate.report.safe import clean

#: job -> "module:function" printing its report, ``fn(report, console[, verbose])``; imported on first use.
PRINTERS: dict[str, str] = {
    "check": "privgate.report.console:print_report",
    "harden": "privgate.report.console:print_report",
    "audit-ldp": "privgate.report.jobs.claims_console:print_ldp",
    "audit-dpsgd": "privgate.report.jobs.claims_console:print_dpsgd",
    "fl-audit": "privgate.report.jobs.federation_console:print_federation",
    "fl-simulate": "privgate.report.jobs.federation_console:print_federation",
}


def show(report: BaseReport, console: Console, *, quiet: bool = False, verbose: bool = False, **_: Any) -> None:
    """Print ``report``: its job's printer, or with ``quiet`` its summary line alone."""
    if quiet:
        console.print(clean(report.summary), markup=False, highlight=False)
        return
    printer = load(PRINTERS[report.job])
    if "verbose" in inspect.signature(printer).parameters:
        printer(report, console, verbose=verbose)
    else:
        printer(report, console)


__all__ = ["PRINTERS", "show"]
