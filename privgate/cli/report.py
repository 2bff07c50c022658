"""``privgate report``: render a saved JSON report in other formats, or print its outputs for a CI step."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from privgate.cli.check import append_step_summary
from privgate.cli.guard import guard
from privgate.errors import PrivgateError


@click.group()
def report() -> None:
    """Render saved JSON reports (privgate check --json) in other formats."""


def _load_report(path: str) -> Any:
    from pydantic import ValidationError

    from privgate.report.model import SCHEMA_VERSION, Report

    p = Path(path)
    if not p.is_file():
        raise PrivgateError(f"{path}: report file not found.")
    try:
        text = p.read_text(encoding="utf-8")
        rep = Report.from_json(text)
    except UnicodeDecodeError:
        raise PrivgateError(f"{path}: not a privgate JSON report (not UTF-8 text).") from None
    except OSError as exc:
        raise PrivgateError(f"{path}: cannot read the report ({exc.strerror or exc.__class__.__name__}).") from None
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(x) for x in err["loc"]) or "(top level)"
        raise PrivgateError(f"{path}: not a privgate JSON report ({where}: {err['msg']}).") from None
    if rep.schema_version > SCHEMA_VERSION:
        raise PrivgateError(
            f"{path}: report schema version {rep.schema_version} is newer than this privgate understands "
            f"({SCHEMA_VERSION}); upgrade privgate."
        )
    return rep


@report.command("render")
@click.argument("report_json", metavar="REPORT.json")
@click.option("--html", "html_path", type=click.Path(dir_okay=False), help="Write a self-contained HTML report.")
@click.option(
    "--markdown", "markdown_path", type=click.Path(dir_okay=False), help="Write a GitHub-flavoured Markdown summary."
)
@click.option("--junit", "junit_path", type=click.Path(dir_okay=False), help="Write a JUnit XML report.")
@click.option("--sarif", "sarif_path", type=click.Path(dir_okay=False), help="Write a SARIF 2.1.0 log.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), help="Write the JSON report again (normalised).")
@click.option("--step-summary", is_flag=True, help="Also append the Markdown summary to $GITHUB_STEP_SUMMARY.")
@guard
def report_render(
    report_json: str,
    html_path: str | None,
    markdown_path: str | None,
    junit_path: str | None,
    sarif_path: str | None,
    json_path: str | None,
    step_summary: bool,
) -> int:
    """Turn a saved JSON report into HTML, Markdown, JUnit or SARIF (exit 0; the verdict is in the files)."""
    from privgate.io.guards import Named, check_outputs
    from privgate.io.staging import FORMAT_NAMES, commit, render_reports

    outputs = {
        "html": html_path,
        "markdown": markdown_path,
        "junit": junit_path,
        "sarif": sarif_path,
        "json": json_path,
    }
    if not any(outputs.values()) and not step_summary:
        raise click.UsageError("nothing to render: give at least one of --html, --markdown, --junit, --sarif, --json.")
    rep = _load_report(report_json)
    # a report is data: the paths it names are never opened (its artefacts are listed as text in the HTML);
    # they are only compared with the outputs, so that rendering never overwrites them
    inputs = [Named(Path(report_json), "the report being rendered")]
    inputs += [
        Named(Path(str(p)), f"an artefact of attack '{a.name}'")
        for a in rep.attacks
        for p in (a.extras.get("artefacts") if isinstance(a.extras.get("artefacts"), list) else [])
        if isinstance(p, str) and 0 < len(p) < 4096 and "\0" not in p
    ]
    check_outputs([Named(Path(p), f"the {FORMAT_NAMES[fmt]} (--{fmt})") for fmt, p in outputs.items() if p], inputs)
    try:
        rendered = render_reports(rep, outputs)
    except (TypeError, KeyError, ValueError, AttributeError, IndexError) as exc:  # a hand-made report
        raise PrivgateError(
            f"{report_json}: not a privgate JSON report (a value has the wrong type: {exc.__class__.__name__})."
        ) from None
    commit(rendered)
    for fmt, path in outputs.items():
        if path:
            click.echo(f"{fmt} report: {path}")
    if step_summary:
        append_step_summary(rep)
    return 0


@report.command("outputs")
@click.argument("report_json", metavar="REPORT.json")
@guard
def report_outputs(report_json: str) -> int:
    """Print key=value lines for $GITHUB_OUTPUT: verdict, exit-code, counts, chosen epsilon."""
    from privgate.report.remediation import chosen_epsilon

    rep = _load_report(report_json)
    eps = chosen_epsilon(rep.remediation)
    values = {
        "verdict": rep.verdict,
        "exit-code": rep.exit_code,
        "checks": len(rep.checks),
        "failed": sum(c.status == "fail" for c in rep.checks),
        "inconclusive": sum(c.status == "inconclusive" for c in rep.checks),
        "passed": sum(c.status == "pass" for c in rep.checks),
        "epsilon": "" if eps is None else f"{eps:g}",
    }
    for key, value in values.items():
        click.echo(f"{key}={value}")
    return 0
