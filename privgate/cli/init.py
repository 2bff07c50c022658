"""``privgate init``: write a starter policy and a GitHub workflow; never overwrites a file."""

from __future__ import annotations

from pathlib import Path

import click

from privgate.cli.guard import guard


@click.command("init")
@click.argument("directory", default=".", type=click.Path(file_okay=False))
@click.option(
    "--from",
    "base",
    default="internal",
    show_default=True,
    help="Built-in policy to start from (public, internal, confidential, strict).",
)
@click.option(
    "--policy-file", default="privacy-policy.yaml", show_default=True, help="Name of the starter policy file."
)
@click.option(
    "--workflow/--no-workflow", default=True, show_default=True, help="Also write .github/workflows/privacy-gate.yml."
)
@click.option("--action-ref", default=None, help="The privgate action the workflow uses (owner/repo@ref).")
@click.option("--model", default="model.pt", show_default=True, help="Model path the workflow audits.")
@click.option("--members", default="data/members.npz", show_default=True, help="Members file the workflow uses.")
@click.option(
    "--nonmembers", default="data/nonmembers.npz", show_default=True, help="Non-members file the workflow uses."
)
@click.option(
    "--gitignore/--no-gitignore",
    default=True,
    show_default=True,
    help="Add .privgate-cache/ to DIRECTORY/.gitignore (a regular file; a link, FIFO or device is refused).",
)
@guard
def init_cmd(
    directory: str,
    base: str,
    policy_file: str,
    workflow: bool,
    action_ref: str | None,
    model: str,
    members: str,
    nonmembers: str,
    gitignore: bool = True,
) -> int:
    """Write a starter policy and a GitHub workflow into DIRECTORY (never overwriting a file).

    Also ignores .privgate-cache/ in its .gitignore (unless --no-gitignore)."""
    from privgate import scaffold as init_mod

    planned = init_mod.plan(
        directory,
        base=base,
        policy_file=policy_file,
        workflow=workflow,
        action_ref=action_ref or init_mod.ACTION_REF,
        model=model,
        members=members,
        nonmembers=nonmembers,
        gitignore=gitignore,
    )
    for path in init_mod.write(planned):
        click.echo(f"added {init_mod.CACHE_IGNORE} to {path}" if path == planned.gitignore else f"wrote {path}")
    click.echo(
        f"next: edit {Path(directory) / policy_file}, then run: privgate policy validate "
        f"{Path(directory) / policy_file}"
    )
    return 0
