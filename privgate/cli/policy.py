"""``privgate policy``: list, show, validate and describe (JSON Schema) policies."""

from __future__ import annotations

from pathlib import Path

import click
from rich.console import Console

from privgate.cli.guard import guard
from privgate.report.safe import clean
from privgate.report.safe import console as escape


@click.group()
def policy() -> None:
    """List, show, validate built-in and custom policies."""


@policy.command("list")
@guard
def policy_list() -> int:
    """List the built-in policies."""
    from rich.table import Table

    from privgate.policy import builtin_policies, load_policy

    table = Table(box=None, pad_edge=False, header_style="bold")
    for col in ("policy", "sensitivity", "release", "extends", "checks", "confidence", "description"):
        table.add_column(col, no_wrap=col != "description")
    from privgate.policy import Sensitivity

    policies = sorted(
        (load_policy(n) for n in builtin_policies()),
        key=lambda p: (list(Sensitivity).index(p.sensitivity), len(p.chain())),
    )
    for p in policies:
        name = p.name
        checks = sum(len(q.checks) for q in p.chain())
        table.add_row(
            f"[bold]{name}[/]",
            p.sensitivity.value,
            p.release.value,
            p.parent.name if p.parent else "—",
            str(checks),
            f"{p.confidence:g}",
            escape(p.description.splitlines()[0]) if p.description else "",
        )
    Console(highlight=False).print(table)
    return 0


@policy.command("show")
@click.argument("name")
@guard
def policy_show(name: str) -> int:
    """Print a built-in policy (with its reasoning) or a policy file."""
    from privgate.policy import builtin_policies, load_policy

    load_policy(name)  # validates, and gives the one-sentence error for unknown names
    path = builtin_policies().get(name) if not Path(name).suffix else Path(name)
    click.echo(clean(Path(path or name).read_text(encoding="utf-8")), nl=False)  # no terminal control bytes
    return 0


@policy.command("validate")
@click.argument("file")
@guard
def policy_validate(file: str) -> int:
    """Check a policy file; exit 0 when valid, 2 with the line and field at fault."""
    from privgate.policy import load_policy

    p = load_policy(file)
    inherited = sum(len(q.checks) for q in p.chain()[:-1])
    extra = f" and {inherited} inherited from {' → '.join(q.name for q in p.chain()[:-1])}" if inherited else ""
    from privgate.inputs.surface import surface_of

    served = surface_of(p)
    click.echo(
        clean(
            f"{file}: valid policy '{p.name}' ({len(p.checks)} checks{extra}, {len(p.attacks_to_run())} attacks, "
            f"every decision at {p.confidence:g} confidence)."
            + (f" The API serves {served.phrase()}." if served else "")
        )
    )
    return 0


@policy.command("schema")
@guard
def policy_schema() -> int:
    """Print the JSON Schema of the policy format (for editors)."""
    from privgate.policy import policy_json_schema

    click.echo(policy_json_schema())
    return 0
