"""Reports as ``privgate check`` writes them, produced in this process (no interpreter start, no imports again).

``test_front_door.py`` proves, per job, that the CLI's report equals the Python API's for the same inputs and
seed; tests whose point is the *content* of a report (numbers, fields, every format) build it here, through the
same public door (:func:`privgate.api.check`) and the same format registry (:func:`privgate.report.render`) the
CLI writes with. Tests whose point is the CLI itself (exit codes, stdout, files written) keep
:func:`cases.run_cli`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

FORMATS = ("json", "markdown", "html", "junit", "sarif")


def check(model: Any, policy: Any, members: Any, nonmembers: Any, *, artefacts: Path | None = None, **kw: Any) -> Any:
    """``privgate check MODEL --policy POLICY --members … --nonmembers …`` in process: the decided report.

    ``kw`` are fields of :class:`~privgate.settings.CheckSettings` and of :class:`~privgate.options.RunOptions`
    (``exposed=``, ``seed=``, ``device=`` …); the reference-model cache is off unless ``cache_dir=`` names one.
    With ``artefacts``, attack artefacts are staged and written there as the CLI writes them (``--artefacts``),
    and the report names them there and carries their images for the HTML page.
    """
    from privgate import api
    from privgate.io.staging import Staging, commit
    from privgate.report.html import attach_images

    kw.setdefault("cache_dir", "off")
    if artefacts is None:
        return api.check(str(model), policy, _spec(members), _spec(nonmembers), **kw)
    with Staging(artefacts) as staging:
        staged = api.check(str(model), policy, _spec(members), _spec(nonmembers), artefacts_dir=staging.path, **kw)
        report = staging.relocate(staged)
        files = staging.files()
        commit({path: ("attack artefact", data) for path, data in files.items()})
    return attach_images(report, files)


def audit(job: str, **settings: Any) -> tuple[dict[str, Any], str, Any]:
    """``privgate audit JOB`` (``ldp`` or ``dpsgd``) in process at seed 0: its JSON report (parsed), its console
    view and the report itself; ``settings`` are fields of the job's settings
    (:class:`~privgate.settings.LdpAuditSettings`, :class:`~privgate.settings.DpsgdAuditSettings`)."""
    import json

    from privgate import DpsgdAuditSettings, LdpAuditSettings, RunOptions, api

    run, kind = {"ldp": (api.audit_ldp, LdpAuditSettings), "dpsgd": (api.audit_dpsgd, DpsgdAuditSettings)}[job]
    report = run(kind(**settings), RunOptions(seed=0))
    return json.loads(render(report, "json")["json"]), console(report), report


def render(report: Any, *formats: str) -> dict[str, str]:
    """``{format: text}``: the report in each format (all of :data:`FORMATS` when none is named), as written."""
    from privgate.report import render as write

    return {fmt: write(report, fmt) for fmt in formats or FORMATS}


def console(report: Any, **kw: Any) -> str:
    """The console view ``privgate check`` prints to stdout (:func:`privgate.report.show.show`), at ``COLUMNS=200``
    as :func:`cases.run_cli` runs it; ``kw``: ``quiet=``, ``verbose=``."""
    import io

    from rich.console import Console

    from privgate.report.show import show

    buf = io.StringIO()
    show(report, Console(file=buf, highlight=False, soft_wrap=True, width=200, emoji=False), **kw)
    return buf.getvalue()


def _spec(value: Any) -> Any:
    return str(value) if isinstance(value, Path) else value
