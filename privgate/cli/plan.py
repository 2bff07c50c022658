"""``privgate plan``: before an audit, how many members and non-members decide each check of a policy."""

from __future__ import annotations

import json
from pathlib import Path

import click

from privgate.cli.guard import guard, out_console
from privgate.report.safe import clean
from privgate.report.safe import console as escape


@click.command("plan")
@click.option(
    "--policy", "-p", "policy_spec", required=True, help="Built-in policy name or a policy YAML file."
)  # fmt: skip
@click.option("--members", required=True, help="Members: .npz, .pt, .csv, .parquet or module:function.")
@click.option("--nonmembers", required=True, help="Non-members: .npz, .pt, .csv, .parquet or module:function.")
@click.option("--label-column", default="label", show_default=True, help="Label column of CSV and Parquet tables.")
@click.option(
    "--assume",
    "share",
    type=click.FloatRange(0.0, 1.0, max_open=True),
    default=0.0,
    show_default=True,
    help="The value each metric is assumed to have, as a share of the way from a model that leaks nothing (0) to "
    "the check's threshold (1): 0 gives the fewest rows any model needs, 0.5 a model halfway to the threshold.",
)
@click.option("--json", "json_path", type=click.Path(dir_okay=False), help="Write the plan as JSON.")
@click.option("--quiet", "-q", is_flag=True, help="Print only the summary line.")
@guard
def plan(
    policy_spec: str, members: str, nonmembers: str, label_column: str, share: float, json_path: str | None,
    quiet: bool,
) -> int:  # fmt: skip
    """Say, per check of the policy, how many members and non-members decide it, and whether this data can.

    No model is needed: each check is sized at its confidence (the policy's, Bonferroni-split over its checks and
    the attacks of a `best` check), for a model that leaks nothing unless --assume says otherwise, so that the
    audit decides it in 80 % of runs. Exit 0 when this data can decide every check privgate sizes, 3 when it
    cannot decide one, 2 on bad input.
    """
    from privgate.api import plan as make_plan
    from privgate.io.guards import Named, check_outputs
    from privgate.io.staging import commit

    inputs = [Named(Path(p), f"the {what} file") for p, what in ((members, "members"), (nonmembers, "non-members"))]
    if Path(policy_spec).suffix:
        inputs.append(Named(Path(policy_spec), "the policy"))
    if json_path:
        check_outputs([Named(Path(json_path), "the plan (--json)")], inputs)
    planned = make_plan(policy_spec, members, nonmembers, share=share, label_column=label_column)
    if json_path:
        commit({Path(json_path): ("plan (JSON)", json.dumps(planned.as_dict(), indent=2) + "\n")})
    out = out_console()
    if not quiet:
        from rich.table import Table

        out.print(f"assuming {escape(planned.assumption)}; decided in 80 % of audits", highlight=False)
        table = Table(box=None, pad_edge=False, header_style="bold")
        for col in ("check", "metric", "max", "confidence", "rows needed (members / non-members)", "can decide"):
            table.add_column(col)
        for r in planned.rows:
            need = r.needed.as_dict()
            rows = f"{need['members']:,} / {need['nonmembers']:,}" if need else "—"
            decide = {True: "[green]yes[/]", False: "[red]no[/]", None: "[yellow]not sized[/]"}[r.can_decide]
            metric = r.metric + (f" at FPR {r.fpr:g}" if r.fpr is not None else "")
            table.add_row(escape(r.id), metric, f"{r.threshold:g}", f"{r.confidence * 100:.4g}%", rows, decide)
        out.print(table)
        for r in planned.rows:
            if r.can_decide is not True:
                out.print(f"  {escape(r.id)}: {escape(r.needed.sentence)}", highlight=False)
    out.print(clean(planned.summary), markup=False, highlight=False)
    return planned.exit_code
