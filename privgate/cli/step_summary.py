"""The GitHub Actions job summary: a report's Markdown appended to ``$GITHUB_STEP_SUMMARY`` when it is set."""

from __future__ import annotations

from typing import Any

from privgate.cli.guard import process_environment
from privgate.errors import PrivgateError


def append_step_summary(report: Any) -> None:
    """Append the report's Markdown summary to the GitHub Actions job summary (``$GITHUB_STEP_SUMMARY``) when set."""
    from privgate.report import render

    append_markdown_summary(render(report, "markdown"))


def append_markdown_summary(markdown: str) -> None:
    """Append ``markdown`` to ``$GITHUB_STEP_SUMMARY`` when it is set (read once by the group)."""
    target = process_environment().step_summary
    if not target:
        return
    try:
        with open(target, "a", encoding="utf-8") as f:
            f.write(markdown)
    except OSError as exc:
        raise PrivgateError(
            f"{target}: cannot append to $GITHUB_STEP_SUMMARY ({exc.strerror or exc.__class__.__name__})."
        ) from None


__all__ = ["append_markdown_summary", "append_step_summary"]
