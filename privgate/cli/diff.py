"""``privgate diff BASE.json NEW.json``: did the new model leak significantly more than the base?

Exit 1 when a check or an attack got worse by more than its tolerance, beyond
the noise of both measurements; 0 otherwise; 2 when the reports cannot be
compared (different schema, policy or audit data) or an input is bad. The
comparison itself is :mod:`privgate.report.diff`; its views :mod:`privgate.report.diffview`.
"""

from __future__ import annotations

import math
from pathlib import Path

import click

from privgate.cli.guard import guard, out_console
from privgate.cli.report import DEFAULT_REPORT_MIB, max_report_option
from privgate.cli.step_summary import append_markdown_summary
from privgate.errors import PrivgateError
from privgate.report.safe import clean


def parse_tolerances(values: tuple[str, ...]) -> dict[str, float]:
    """``--tolerance X`` (every metric) and ``--tolerance METRIC=X`` (one metric) → ``{"*": x, metric: x}``."""
    from privgate.report.diff import METRICS

    out: dict[str, float] = {}
    for raw in values:
        key, sep, text = raw.rpartition("=")
        key = key.strip() if sep else "*"
        if sep and key not in METRICS:
            raise PrivgateError(f"--tolerance {raw}: unknown metric {key!r} (one of: {', '.join(METRICS)}).")
        try:
            value = float(text)
        except ValueError:
            raise PrivgateError(f"--tolerance {raw}: {text!r} is not a number.") from None
        if not (math.isfinite(value) and value >= 0):
            raise PrivgateError(f"--tolerance {raw}: a tolerance must be a number >= 0 (in the metric's units).")
        out[key] = value
    return out


@click.command("diff")
@click.argument("base_json", metavar="BASE.json")
@click.argument("new_json", metavar="NEW.json")
@click.option(
    "--tolerance",
    "tolerances",
    multiple=True,
    metavar="X|METRIC=X",
    help="How much worse a metric may get (absolute, in its units) before it counts: X for every metric, "
    "METRIC=X for one (repeatable). Default: the policy's 'regression:' section "
    "(0.02; advantage 0.04; epsilon_lb 0.5).",
)
@click.option("--json", "json_path", type=click.Path(dir_okay=False), help="Write the comparison as JSON.")
@click.option(
    "--markdown",
    "markdown_path",
    type=click.Path(dir_okay=False),
    help="Write the comparison as GitHub Markdown (a PR comment).",
)
@click.option(
    "--step-summary/--no-step-summary",
    default=True,
    show_default=True,
    help="Append the Markdown to $GITHUB_STEP_SUMMARY when it is set.",
)
@click.option("--quiet", "-q", is_flag=True, help="Print only the result line.")
@click.option("--verbose", "-v", is_flag=True, help="Print the reason of every comparison.")
@max_report_option
@guard
def diff(
    base_json: str,
    new_json: str,
    tolerances: tuple[str, ...],
    json_path: str | None,
    markdown_path: str | None,
    step_summary: bool,
    quiet: bool,
    verbose: bool,
    max_report_mib: int = DEFAULT_REPORT_MIB,
) -> int:
    """Compare NEW.json with BASE.json (privgate check --json) check by check and attack by attack.

    Exit 1 when a metric got worse by more than its tolerance beyond the noise of both reports (the lower end
    of its change interval is above the tolerance, one-sided at α/m: the policy's error budget shared by the
    m comparisons), 0 otherwise, 2 when they cannot be compared (different schema, policy or audit data).
    """
    from privgate.io.guards import Named, check_outputs
    from privgate.io.staging import commit
    from privgate.report.diff import diff_reports
    from privgate.report.diffview import print_diff, render_diff_json, render_diff_markdown
    from privgate.report.loading import read_report

    overrides = parse_tolerances(tolerances)
    outputs = {"json": json_path, "markdown": markdown_path}
    inputs = [Named(Path(base_json), "the base report (BASE.json)"), Named(Path(new_json), "the new report (NEW.json)")]
    check_outputs([Named(Path(p), f"the comparison's {fmt} (--{fmt})") for fmt, p in outputs.items() if p], inputs)
    base, new = read_report(base_json, max_report_mib << 20), read_report(new_json, max_report_mib << 20)
    for name, rep in ((base_json, base), (new_json, new)):
        if rep.job not in ("check", "harden"):
            raise PrivgateError(f"{name}: a {rep.job} report; privgate diff compares reports of privgate check.")
    result = diff_reports(base, new, overrides, base_name=base_json, new_name=new_json)
    files = {}
    if json_path:
        files[Path(json_path)] = ("comparison (JSON)", render_diff_json(result))
    if markdown_path:
        files[Path(markdown_path)] = ("comparison (Markdown)", render_diff_markdown(result))
    commit(files)
    if step_summary:
        append_markdown_summary(render_diff_markdown(result))
    out = out_console()
    if quiet:
        out.print(clean(result.summary), markup=False, highlight=False)
    else:
        print_diff(result, out, verbose=verbose)
    return result.exit_code
