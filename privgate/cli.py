"""The ``privgate`` command line (click + rich).

Exit codes: 0 pass, 1 policy violated, 2 usage or bad input, 3 inconclusive,
4 internal error. Bad input prints one sentence naming the file or field, with
no traceback (set ``PRIVGATE_DEBUG=1`` to see one for internal errors).
"""

from __future__ import annotations

import os
import sys
import traceback
from pathlib import Path
from typing import Any, Callable

import click
from rich.console import Console

from privgate import __version__
from privgate.errors import PrivgateError

EXIT_PASS, EXIT_FAIL, EXIT_USAGE, EXIT_INCONCLUSIVE, EXIT_INTERNAL = 0, 1, 2, 3, 4


def _err_console() -> Console:
    return Console(stderr=True, highlight=False, soft_wrap=True)


def _guard(fn: Callable[..., int | None]) -> Callable[..., None]:
    """Turn PrivgateErrors into one line + exit 2 and anything unexpected into exit 4."""

    def wrapper(*args: Any, **kwargs: Any) -> None:
        try:
            code = fn(*args, **kwargs)
        except PrivgateError as exc:
            _err_console().print(f"[bold red]error:[/] {exc}", markup=True, highlight=False)
            sys.exit(exc.exit_code)
        except (click.exceptions.Exit, click.ClickException, SystemExit, KeyboardInterrupt):
            raise
        except Exception as exc:  # noqa: BLE001 — the last line of defence
            if os.environ.get("PRIVGATE_DEBUG"):
                traceback.print_exc()
            _err_console().print(f"[bold red]internal error:[/] {exc.__class__.__name__}: {exc} (set PRIVGATE_DEBUG=1 for a traceback)")
            sys.exit(EXIT_INTERNAL)
        sys.exit(code or 0)

    wrapper.__name__ = fn.__name__
    wrapper.__doc__ = fn.__doc__
    return wrapper


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="privgate")
def cli() -> None:
    """privgate: a privacy gate for trained models.

    Runs membership-inference attacks against a model on known members and
    non-members, measures their success with confidence intervals and decides a
    policy: pass (0), fail (1), bad input (2), inconclusive (3), internal error (4).
    """


# --------------------------------------------------------------------------- check


def _resolve(value: str | None, from_cli: bool, base: Path) -> str | None:
    """CLI values are relative to the working directory, config values to the config's folder."""
    if value is None or from_cli:
        return value
    if ":" in value and not Path(value).suffix:
        return value  # module:function
    p = Path(value)
    return str(p if p.is_absolute() else base / p)


@cli.command()
@click.argument("model", required=False)
@click.option("--policy", "-p", "policy_spec", help="Built-in policy name (public, internal, confidential, strict) or a policy YAML file.")
@click.option("--members", help="Members (the training set): .npz, .pt, .csv or module:function.")
@click.option("--nonmembers", help="Non-members from the same distribution: .npz, .pt, .csv or module:function.")
@click.option("--population", help="Optional extra same-distribution data for reference models.")
@click.option("--recipe", help="Training recipe as module:attr (needed for state_dict checkpoints and reference models).")
@click.option("--config", "config_path", type=click.Path(dir_okay=False), help="privgate.toml or pyproject.toml (default: searched from the working directory upward).")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), help="Write the JSON report here (atomically).")
@click.option("--seed", type=int, help="Seed for every random choice (default 0).")
@click.option("--label-column", help="Label column of CSV data (default 'label').")
@click.option("--cache-dir", type=click.Path(file_okay=False), help="Where trained reference models are cached.")
@click.option("--trust-checkpoint", is_flag=True, default=None, help="Allow loading pickled checkpoints (this runs code from the file).")
@click.option("--quiet", "-q", is_flag=True, help="Print only the verdict line.")
@click.option("--verbose", "-v", is_flag=True, help="Print the reason of every check, passing ones too.")
@_guard
def check(model: str | None, policy_spec: str | None, members: str | None, nonmembers: str | None, population: str | None,
          recipe: str | None, config_path: str | None, json_path: str | None, seed: int | None, label_column: str | None,
          cache_dir: str | None, trust_checkpoint: bool | None, quiet: bool, verbose: bool) -> int:
    """Audit MODEL against a policy and exit with the verdict."""
    from privgate.api import audit_paths
    from privgate.config import find_config, load_config
    from privgate.report.console import print_report
    from privgate.report.model import write_atomic

    cfg = load_config(config_path) if config_path else find_config()
    base = cfg.base

    def pick(key: str, cli_value: Any) -> Any:
        if cli_value is not None:
            return _resolve(cli_value, True, base) if isinstance(cli_value, str) else cli_value
        value = cfg.get(key)
        return _resolve(value, False, base) if isinstance(value, str) else value

    model_path = pick("model", model)
    policy_value = policy_spec if policy_spec is not None else cfg.get("policy")
    if policy_value is not None and policy_spec is None and (Path(policy_value).suffix or "/" in policy_value):
        policy_value = _resolve(policy_value, False, base)
    if model_path is None:
        raise click.UsageError("no model given: pass MODEL or set 'model' in privgate.toml / [tool.privgate].")
    if policy_value is None:
        raise click.UsageError("no policy given: pass --policy NAME|FILE or set 'policy' in the config.")
    members_spec, nonmembers_spec = pick("members", members), pick("nonmembers", nonmembers)
    if members_spec is None or nonmembers_spec is None:
        raise click.UsageError("audit data missing: pass --members and --nonmembers (or set them in the config).")
    json_out = pick("json", json_path)
    inputs = [p for p in (model_path, policy_value, members_spec, nonmembers_spec, pick("population", population)) if p]
    if json_out and any(Path(json_out).resolve() == Path(i).resolve() for i in inputs if Path(i).exists()):
        raise PrivgateError(f"{json_out}: the report path is one of the inputs; refusing to overwrite it.")

    out = Console(highlight=False, soft_wrap=True)
    show_progress = not quiet and out.is_terminal and not os.environ.get("CI")
    status = out.status("auditing…") if show_progress else None
    progress = (lambda msg: status.update(f"running attack {msg}")) if status else None
    if status:
        status.start()
    try:
        report = audit_paths(
            model_path,
            policy_value,
            members_spec,
            nonmembers_spec,
            population=pick("population", population),
            recipe=pick("recipe", recipe),
            seed=pick("seed", seed) or 0,
            label_column=pick("label_column", label_column) or "label",
            trust_checkpoint=bool(pick("trust_checkpoint", trust_checkpoint)),
            cache_dir=pick("cache_dir", cache_dir),
            search_dirs=[base],
            progress=progress,
        )
    finally:
        if status:
            status.stop()
    if json_out:
        write_atomic(json_out, report.to_json() + "\n")
    if quiet:
        out.print(report.summary)
    else:
        print_report(report, out, verbose=verbose)
        if json_out:
            out.print(f"JSON report: {json_out}")
    return report.exit_code


# --------------------------------------------------------------------------- policy


@cli.group()
def policy() -> None:
    """List, show, validate built-in and custom policies."""


@policy.command("list")
@_guard
def policy_list() -> int:
    """List the built-in policies."""
    from privgate.policy import builtin_policies, load_policy

    out = Console(highlight=False)
    for name in builtin_policies():
        p = load_policy(name)
        out.print(f"[bold]{name:<13}[/] {p.sensitivity.value:<22} release={p.release.value:<6} {len(p.checks)} checks  {p.description.splitlines()[0] if p.description else ''}")
    return 0


@policy.command("show")
@click.argument("name")
@_guard
def policy_show(name: str) -> int:
    """Print a built-in policy (with its reasoning) or a policy file."""
    from privgate.policy import builtin_policies, load_policy

    load_policy(name)  # validates, and gives the one-sentence error for unknown names
    path = builtin_policies().get(name) if not Path(name).suffix else Path(name)
    click.echo(Path(path or name).read_text(encoding="utf-8"), nl=False)
    return 0


@policy.command("validate")
@click.argument("file")
@_guard
def policy_validate(file: str) -> int:
    """Check a policy file; exit 0 when valid, 2 with the line and field at fault."""
    from privgate.policy import load_policy

    p = load_policy(file)
    click.echo(f"{file}: valid policy '{p.name}' ({len(p.checks)} checks, {len(p.attacks_to_run())} attacks).")
    return 0


@policy.command("schema")
@_guard
def policy_schema() -> int:
    """Print the JSON Schema of the policy format (for editors)."""
    from privgate.policy import policy_json_schema

    click.echo(policy_json_schema())
    return 0


def main() -> None:
    cli(prog_name="privgate")


if __name__ == "__main__":  # pragma: no cover
    main()
