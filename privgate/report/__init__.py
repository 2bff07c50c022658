"""Report formats: a registry of writers, one file per format.

:func:`register_format` registers a format once — its name (also the CLI flag ``--NAME PATH``) and a writer
``fn(report, **options) -> str`` over :class:`~privgate.report.model.BaseReport`, so it serves every job;
:func:`register_job_writer` adds a job's own writer, which :func:`render` picks. The CLI builds its output
flags from this registry (:func:`formats_for`). Writers named ``"module:function"`` are imported on first
use, so a run refused on its inputs never loads them; the report types re-exported here load lazily.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from privgate.lazy import load

if TYPE_CHECKING:
    from privgate.report.model import AttackSummary, BaseReport, CheckResult, Report

Writer = Callable[..., str]

#: Every job, as reports name it (:data:`privgate.report.model.Job`).
ALL_JOBS = frozenset({"check", "harden", "audit-ldp", "audit-dpsgd", "fl-audit", "fl-simulate"})
#: Jobs that decide a policy or a claim: the formats made of decided checks (JUnit, SARIF, Markdown) serve them.
DECIDING_JOBS = ALL_JOBS - {"fl-simulate"}


@dataclass(frozen=True)
class Format:
    """One output format.

    Attributes:
        name: the format's name and CLI flag (``--junit``).
        title: what its file is called in messages ("JUnit report").
        help: the CLI flag's help text.
        writer: ``fn(report, **options) -> str`` for any report of the family, or ``"module:function"`` naming it.
        jobs: the jobs it serves.
        by_job: writers of their own for some jobs (:func:`register_job_writer`).
    """

    name: str
    title: str
    help: str
    writer: Writer | str
    jobs: frozenset[str] = ALL_JOBS
    by_job: dict[str, Writer | str] = field(default_factory=dict)


_FORMATS: dict[str, Format] = {}


def register_format(name: str, writer: Writer | str, *, title: str, help: str, jobs: Iterable[str] = ALL_JOBS) -> None:  # noqa: A002
    """Register ``writer`` (a function or ``"module:function"``) as format ``name`` (and the CLI flag ``--name``)
    for ``jobs``."""
    _FORMATS[name] = Format(name, title, help, writer, frozenset(jobs))


def register_job_writer(name: str, job: str, writer: Writer | str) -> None:
    """Let ``job``'s reports be written by ``writer`` in format ``name`` (instead of the format's own writer).

    ``writer`` may be a ``"module:function"`` string, imported on first use (a job's
    page may need libraries the other jobs never load).
    """
    _FORMATS[name].by_job[job] = writer


def get_format(name: str) -> Format:
    return _FORMATS[name]


def available_formats() -> list[str]:
    return sorted(_FORMATS)


def formats_for(job: str) -> list[Format]:
    """The formats that serve ``job``, in registration order (JSON first)."""
    return [f for f in _FORMATS.values() if job in f.jobs]


def title_of(name: str) -> str:
    """How a format's file is called in messages: ``JSON report``, ``SARIF log`` …"""
    f = _FORMATS.get(name)
    return f.title if f is not None else f"{name} report"


def render(report: BaseReport, fmt: str, **options: Any) -> str:
    """``report`` in format ``fmt``; ``options`` go to writers that take them (the federation's ``attacker``)."""
    f = _FORMATS[fmt]
    writer = f.by_job.get(report.job, f.writer)
    if isinstance(writer, str):
        writer = load(writer)
    params = inspect.signature(writer).parameters
    takes_all = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    given = options if takes_all else {k: v for k, v in options.items() if k in params}
    return writer(report, **given)


def _json(report: BaseReport) -> str:
    return report.to_json() + "\n"


register_format(
    "json",
    _json,
    title="JSON report",
    help="Write the JSON report here (the versioned contract every other format can be rendered from).",
)

register_format(
    "junit",
    "privgate.report.junit:render_junit",
    title="JUnit report",
    help="Write a JUnit XML report (one testcase per check: failure = fail, error = inconclusive).",
    jobs=DECIDING_JOBS,
)
register_format(
    "sarif",
    "privgate.report.sarif:render_sarif",
    title="SARIF log",
    help="Write a SARIF 2.1.0 log (a result per failed or inconclusive check), for code scanning.",
    jobs=DECIDING_JOBS,
)
register_format(
    "markdown",
    "privgate.report.markdown:render_markdown",
    title="Markdown summary",
    help="Write a GitHub-flavoured Markdown summary (the job summary of the action).",
    jobs=DECIDING_JOBS,
)
register_format(
    "html",
    "privgate.report.html:render_html",
    title="HTML report",
    help="Write a self-contained HTML report (charts, no network).",
)


# the HTML pages of the claim audits and federations: their own figures
register_job_writer("html", "audit-ldp", "privgate.report.jobs.claims_html:render_ldp_html")
register_job_writer("html", "audit-dpsgd", "privgate.report.jobs.claims_html:render_dpsgd_html")
register_job_writer("html", "fl-audit", "privgate.report.jobs.federation_html:render_fl_html")
register_job_writer("html", "fl-simulate", "privgate.report.jobs.federation_html:render_fl_html")

_LAZY = {"AttackSummary", "BaseReport", "CheckResult", "Report"}


def __getattr__(name: str) -> Any:
    """The report types, imported from :mod:`privgate.report.model` on first access."""
    if name in _LAZY:
        from privgate.report import model

        return getattr(model, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "ALL_JOBS",
    "AttackSummary",
    "BaseReport",
    "CheckResult",
    "DECIDING_JOBS",
    "Format",
    "Report",
    "available_formats",
    "formats_for",
    "get_format",
    "register_format",
    "register_job_writer",
    "render",
    "title_of",
]
