"""Report formats: a registry of writers, one file per format.

A writer is ``fn(report: Report) -> str``; adding a format is adding a module
and one ``register_format`` line, never editing the CLI.
"""

from __future__ import annotations

from collections.abc import Callable

from privgate.report.model import AttackSummary, CheckResult, Report

Writer = Callable[[Report], str]
_FORMATS: dict[str, Writer] = {}


def register_format(name: str, writer: Writer) -> None:
    _FORMATS[name] = writer


def get_format(name: str) -> Writer:
    return _FORMATS[name]


def available_formats() -> list[str]:
    return sorted(_FORMATS)


def render(report: Report, fmt: str) -> str:
    return _FORMATS[fmt](report)


register_format("json", lambda r: r.to_json() + "\n")

from privgate.report.html import render_html  # noqa: E402
from privgate.report.junit import render_junit  # noqa: E402
from privgate.report.markdown import render_markdown  # noqa: E402
from privgate.report.sarif import render_sarif  # noqa: E402

register_format("junit", render_junit)
register_format("sarif", render_sarif)
register_format("markdown", render_markdown)
register_format("html", render_html)

__all__ = ["AttackSummary", "CheckResult", "Report", "available_formats", "get_format", "register_format", "render"]
