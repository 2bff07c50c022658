"""Reading a saved JSON report of any job back into its typed model (``privgate report render``, ``diff``)."""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any

from privgate.errors import PrivgateError
from privgate.report.model import BaseReport

#: job -> "module:class" of its report (imported on first use: the audits' models are not needed to read a check).
REPORT_CLASSES: dict[str, str] = {
    "check": "privgate.report.model:Report",
    "harden": "privgate.report.model:Report",
    "audit-ldp": "privgate.audits.report:LdpAuditReport",
    "audit-dpsgd": "privgate.audits.report:DpsgdAuditReport",
    "fl-audit": "privgate.audits.federated.report:FederationReport",
    "fl-simulate": "privgate.audits.federated.report:FederationReport",
}
#: Reports written before ``job`` existed name their kind instead.
_LEGACY_KINDS = {"ldp": "audit-ldp", "dpsgd": "audit-dpsgd", "audit": "fl-audit", "simulation": "fl-simulate"}


def job_of(data: dict[str, Any]) -> str:
    """The job a parsed report comes from (``check`` when it names none: the oldest reports are check reports)."""
    job = data.get("job")
    if isinstance(job, str):
        return job
    return _LEGACY_KINDS.get(str(data.get("kind")), "check")


def report_class(job: str) -> type[BaseReport]:
    module, name = REPORT_CLASSES.get(job, REPORT_CLASSES["check"]).split(":")
    return getattr(importlib.import_module(module), name)


def parse_report(text: str) -> BaseReport:
    """The typed report of any job from its JSON text.

    Raises:
        json.JSONDecodeError, pydantic.ValidationError: not a privgate report.
    """
    data = json.loads(text)
    if not isinstance(data, dict):
        raise ValueError("the top level is not a JSON object")
    cls = report_class(job_of(data))
    if "job" not in data:
        data = {**data, "job": job_of(data)}
    return cls.model_validate(data)


def read_report(path: str | Path) -> BaseReport:
    """A saved report of any job, typed; a file that is not one is a :class:`PrivgateError` naming it."""
    from pydantic import ValidationError

    from privgate.report.model import SCHEMA_VERSION, Report

    p = Path(path)
    if not p.is_file():
        raise PrivgateError(f"{path}: report file not found.")
    try:
        text = p.read_text(encoding="utf-8")
        rep = parse_report(text)
    except (UnicodeDecodeError, ValueError) as exc:
        if isinstance(exc, ValidationError):
            err = exc.errors()[0]
            where = ".".join(str(x) for x in err["loc"]) or "(top level)"
            raise PrivgateError(f"{path}: not a privgate JSON report ({where}: {err['msg']}).") from None
        if isinstance(exc, UnicodeDecodeError):
            raise PrivgateError(f"{path}: not a privgate JSON report (not UTF-8 text).") from None
        raise PrivgateError(f"{path}: not a privgate JSON report ({exc}).") from None
    except OSError as exc:
        raise PrivgateError(f"{path}: cannot read the report ({exc.strerror or exc.__class__.__name__}).") from None
    if rep.schema_version > SCHEMA_VERSION:
        raise PrivgateError(
            f"{path}: report schema version {rep.schema_version} is newer than this privgate understands "
            f"({SCHEMA_VERSION}); upgrade privgate."
        )
    if isinstance(rep, Report):
        find_artefacts(rep, p.parent)
    return rep


def find_artefacts(rep: Any, report_dir: Path) -> None:
    """Artefact paths are relative to where ``check`` ran; rendering elsewhere, look next to the report too."""
    for attack in rep.attacks:
        paths = attack.extras.get("artefacts")
        if not isinstance(paths, list):
            continue
        found = []
        for item in paths:
            p = Path(str(item))
            candidates = [p, report_dir / p] + [
                report_dir / Path(*p.parts[i:]) for i, part in enumerate(p.parts) if part.endswith(".artefacts")
            ]
            found.append(str(next((c for c in candidates if c.is_file()), p)))
        attack.extras["artefacts"] = found


__all__ = ["REPORT_CLASSES", "find_artefacts", "job_of", "parse_report", "read_report", "report_class"]
