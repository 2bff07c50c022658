"""``privgate report``: render a saved JSON report in other formats, or print its outputs for a CI step."""

from __future__ import annotations

from pathlib import Path

import click

from privgate.cli.guard import guard
from privgate.cli.job_output import output_options
from privgate.cli.step_summary import append_step_summary
from privgate.errors import PrivgateError
from privgate.report.safe import clean

#: privgate.report.loading.MAX_REPORT_BYTES in MiB (not imported: starting the CLI loads no report model).
DEFAULT_REPORT_MIB = 64
#: ``--max-report-mib``: the largest saved report read, by ``report render``, ``report outputs`` and ``diff``.
max_report_option = click.option(
    "--max-report-mib",
    "max_report_mib",
    type=click.IntRange(min=1),
    default=DEFAULT_REPORT_MIB,
    show_default=True,
    envvar="PRIVGATE_MAX_REPORT_MIB",
    show_envvar=True,
    help="Largest saved report read, in MiB; a bigger file is refused before it is read.",
)


@click.group()
def report() -> None:
    """Render saved JSON reports (privgate check --json) in other formats."""


@report.command("render")
@click.argument("report_json", metavar="REPORT.json")
@output_options(None)
@click.option("--step-summary", is_flag=True, help="Also append the Markdown summary to $GITHUB_STEP_SUMMARY.")
@max_report_option
@guard
def report_render(report_json: str, outputs: dict[str, str | None], step_summary: bool, max_report_mib: int) -> int:
    """Turn a saved JSON report of any job into HTML, Markdown, JUnit or SARIF (exit 0; the verdict is in the files)."""
    from privgate.cli.job_output import planned, rendered
    from privgate.io.guards import Named, check_outputs, stream_of
    from privgate.io.staging import commit
    from privgate.report import get_format
    from privgate.report.loading import read_report
    from privgate.report.model import Report

    if not any(outputs.values()) and not step_summary:
        raise click.UsageError("nothing to render: give at least one of " + ", ".join(f"--{f}" for f in outputs) + ".")
    rep = read_report(report_json, max_report_mib << 20)
    for fmt, path in outputs.items():
        if path and rep.job not in get_format(fmt).jobs:
            raise PrivgateError(f"--{fmt}: a {rep.job} report has no {fmt} form (it decides no checks).")
    # a report is data: the paths it names are never opened (its artefacts are listed as text in the HTML);
    # they are only compared with the outputs, so that rendering never overwrites them
    inputs = [Named(Path(report_json), "the report being rendered")]
    if isinstance(rep, Report):
        inputs += [
            Named(Path(str(p)), f"an artefact of attack '{a.name}'")
            for a in rep.attacks
            for p in (a.extras.get("artefacts") if isinstance(a.extras.get("artefacts"), list) else [])
            if isinstance(p, str) and 0 < len(p) < 4096 and "\0" not in p
        ]
    check_outputs(planned(outputs), inputs)
    try:
        files = rendered(rep, outputs)
    except (TypeError, KeyError, ValueError, AttributeError, IndexError) as exc:  # a hand-made report
        raise PrivgateError(
            f"{report_json}: not a privgate JSON report (a value has the wrong type: {exc.__class__.__name__})."
        ) from None
    commit(files)
    streams = {fmt: stream_of(path) for fmt, path in outputs.items() if path}
    for fmt, fd in streams.items():  # with a report on stdout (/dev/stdout), the other lines go to stderr
        if fd is None:
            click.echo(clean(f"{fmt} report: {outputs[fmt]}"), err=1 in streams.values())
    if step_summary:
        append_step_summary(rep)
    return 0


@report.command("outputs")
@click.argument("report_json", metavar="REPORT.json")
@max_report_option
@guard
def report_outputs(report_json: str, max_report_mib: int) -> int:
    """Print key=value lines for $GITHUB_OUTPUT: verdict, exit-code, counts, chosen epsilon."""
    from privgate.report.loading import read_report
    from privgate.report.remediation import chosen_epsilon

    rep = read_report(report_json, max_report_mib << 20)
    eps = chosen_epsilon(getattr(rep, "remediation", None))
    values = {
        "verdict": rep.verdict or "",
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
