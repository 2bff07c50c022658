"""Reading a saved JSON report of any job back into its typed model (``privgate report render``, ``diff``).

A saved report may come from anyone (a pull request's artifact, a baseline
restored from a cache), so reading it is bounded before any cost is paid: its
size against :data:`MAX_REPORT_BYTES` (checked before reading, and at most that
many bytes are read, so a FIFO or ``/dev/zero`` cannot make privgate read
forever), and its nesting against :data:`MAX_DEPTH` (a report is a few levels
deep; ten thousand brackets would exhaust Python's recursion in the parser or
in any writer that walks the value). Either is one sentence and exit code 2.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from privgate.errors import PrivgateError
from privgate.lazy import load
from privgate.report.model import BaseReport

#: The largest saved report read by default (64 MiB); ``--max-report-mib`` / ``$PRIVGATE_MAX_REPORT_MIB`` raise it.
MAX_REPORT_BYTES = 64 << 20
#: The deepest nesting of JSON arrays and objects a saved report may have (privgate's own reach about 8).
MAX_DEPTH = 64

#: job -> "module:class" of its report (imported on first use: the audits' models are not needed to read a check).
REPORT_CLASSES: dict[str, str] = {
    "check": "privgate.report.model:Report",
    "harden": "privgate.report.model:Report",
    "audit-ldp": "privgate.report.jobs.claims:LdpAuditReport",
    "audit-dpsgd": "privgate.report.jobs.claims:DpsgdAuditReport",
    "fl-audit": "privgate.report.jobs.federation:FederationReport",
    "fl-simulate": "privgate.report.jobs.federation:FederationReport",
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
    return load(REPORT_CLASSES.get(job, REPORT_CLASSES["check"]))


def depth(value: Any) -> int:
    """How deeply JSON arrays and objects nest in ``value`` (0 for a scalar), counted without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is None:
            continue
        deepest = max(deepest, level)
        if level <= MAX_DEPTH:  # one level past the limit is enough to refuse
            stack.extend((c, level + 1) for c in children if isinstance(c, (dict, list)))
    return deepest


def _size(n: int) -> str:
    return f"{n / (1 << 20):.4g} MiB" if n >= 1 << 20 else f"{n:,} bytes"


def read_text(path: str | Path, limit: int = MAX_REPORT_BYTES) -> str:
    """The UTF-8 text of the saved report at ``path``, refused before reading when it is larger than ``limit``.

    Raises:
        PrivgateError: not a regular file, larger than ``limit`` (naming the limit and how to raise it), unreadable.
    """
    p = Path(path)
    if not p.is_file():
        raise PrivgateError(f"{path}: report file not found.")

    def too_big(size: int | None) -> PrivgateError:
        return PrivgateError(
            f"{path}: the saved report is {'over ' if size is None else ''}{_size(size or limit)}, larger than "
            f"the {_size(limit)} privgate reads; if you trust it, raise the limit with --max-report-mib "
            f"(or $PRIVGATE_MAX_REPORT_MIB)."
        )

    try:
        size = p.stat().st_size
        if size > limit:
            raise too_big(size)
        with p.open("rb") as f:
            data = f.read(limit + 1)  # a file that grew since, or a /proc file that claims size 0
    except OSError as exc:
        raise PrivgateError(f"{path}: cannot read the report ({exc.strerror or exc.__class__.__name__}).") from None
    if len(data) > limit:
        raise too_big(None)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise PrivgateError(f"{path}: not a privgate JSON report (not UTF-8 text).") from None


def parse_report(text: str) -> BaseReport:
    """The typed report of any job from its JSON text.

    Raises:
        json.JSONDecodeError, pydantic.ValidationError: not a privgate report.
    """
    try:
        data = json.loads(text)
    except RecursionError:
        raise ValueError(f"nested more than {MAX_DEPTH} levels deep") from None
    if not isinstance(data, dict):
        raise ValueError("the top level is not a JSON object")
    if depth(data) > MAX_DEPTH:
        raise ValueError(f"nested more than {MAX_DEPTH} levels deep")
    cls = report_class(job_of(data))
    if "job" not in data:
        data = {**data, "job": job_of(data)}
    return cls.model_validate(data)


def read_report(path: str | Path, limit: int = MAX_REPORT_BYTES) -> BaseReport:
    """A saved report of any job, typed; a file that is not one is a :class:`PrivgateError` naming it.

    A report is data: the paths it names (artefacts, the model, the policy) are never opened or looked up here;
    the HTML shows them as text (docs/threat-model.md).

    Args:
        path: the JSON file.
        limit: the largest file accepted, in bytes (checked before reading).
    """
    from pydantic import ValidationError

    from privgate.report.model import SCHEMA_VERSION

    text = read_text(path, limit)
    try:
        rep = parse_report(text)
    except ValueError as exc:
        if isinstance(exc, ValidationError):
            err = exc.errors()[0]
            where = ".".join(str(x) for x in err["loc"]) or "(top level)"
            raise PrivgateError(f"{path}: not a privgate JSON report ({where}: {err['msg']}).") from None
        raise PrivgateError(f"{path}: not a privgate JSON report ({exc}).") from None
    if rep.schema_version > SCHEMA_VERSION:
        raise PrivgateError(
            f"{path}: report schema version {rep.schema_version} is newer than this privgate understands "
            f"({SCHEMA_VERSION}); upgrade privgate."
        )
    return rep


__all__ = [
    "MAX_DEPTH",
    "MAX_REPORT_BYTES",
    "REPORT_CLASSES",
    "depth",
    "job_of",
    "parse_report",
    "read_report",
    "read_text",
    "report_class",
]
