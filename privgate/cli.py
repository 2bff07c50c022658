"""The ``privgate`` command line (click + rich).

Exit codes: 0 pass, 1 policy violated, 2 usage or bad input, 3 inconclusive,
4 internal error, 130 / 143 stopped by SIGINT / SIGTERM. Bad input prints one
sentence naming the file or field, with no traceback (set ``PRIVGATE_DEBUG=1``
to see one for internal errors). No output may be an input or another output
(:mod:`privgate.guards`), and a run's outputs are written together at its end
(:mod:`privgate.staging`).
"""

from __future__ import annotations

import os
import sys
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import click
from rich.console import Console
from rich.markup import escape

from privgate import __version__
from privgate.errors import PrivgateError

if TYPE_CHECKING:
    from privgate.guards import Named

EXIT_PASS, EXIT_FAIL, EXIT_USAGE, EXIT_INCONCLUSIVE, EXIT_INTERNAL = 0, 1, 2, 3, 4


def _out_console() -> Console:
    """Stdout console; CI logs (no terminal) get a wide fixed width so tables do not wrap."""
    probe = Console()
    if probe.is_terminal or os.environ.get("COLUMNS"):
        return Console(highlight=False, soft_wrap=True)
    return Console(highlight=False, soft_wrap=True, width=160)


def _err_console() -> Console:
    return Console(stderr=True, highlight=False, soft_wrap=True)


def _guard(fn: Callable[..., int | None]) -> Callable[..., None]:
    """Turn PrivgateErrors into one line + exit 2, Ctrl-C / SIGTERM into one line + exit 130 / 143,
    and anything unexpected into exit 4."""

    def wrapper(*args: Any, **kwargs: Any) -> None:
        from privgate.interrupt import exit_status, sigterm_raises

        try:
            with sigterm_raises():
                code = fn(*args, **kwargs)
        except PrivgateError as exc:
            _err_console().print(f"[bold red]error:[/] {escape(str(exc))}", markup=True, highlight=False)
            sys.exit(exc.exit_code)
        except KeyboardInterrupt as exc:  # SIGINT, or SIGTERM (privgate.interrupt.Terminated)
            status, name = exit_status(exc)
            _err_console().print(f"interrupted ({name}): stopped without writing partial output.", markup=False, highlight=False)
            sys.exit(status)
        except (click.exceptions.Exit, click.ClickException, SystemExit):
            raise
        except Exception as exc:  # noqa: BLE001 — the last line of defence
            if os.environ.get("PRIVGATE_DEBUG"):
                traceback.print_exc()
            _err_console().print(f"[bold red]internal error:[/] {exc.__class__.__name__}: {escape(str(exc))} (set PRIVGATE_DEBUG=1 for a traceback)")
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
    policy: pass (0), fail (1), bad input (2), inconclusive (3), internal error (4);
    130 / 143 when stopped by Ctrl-C / SIGTERM (nothing half-written is left).
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
@click.option("--junit", "junit_path", type=click.Path(dir_okay=False), help="Write a JUnit XML report (one testcase per check).")
@click.option("--sarif", "sarif_path", type=click.Path(dir_okay=False), help="Write a SARIF 2.1.0 log (a result per failed or inconclusive check).")
@click.option("--markdown", "markdown_path", type=click.Path(dir_okay=False), help="Write a GitHub-flavoured Markdown summary.")
@click.option("--html", "html_path", type=click.Path(dir_okay=False), help="Write a self-contained HTML report (ROC curves, remediation plot).")
@click.option("--step-summary/--no-step-summary", default=True, show_default=True, help="Append the Markdown summary to $GITHUB_STEP_SUMMARY when it is set.")
@click.option("--seed", type=int, help="Seed for every random choice (default 0).")
@click.option("--label-column", help="Label column of CSV data (default 'label').")
@click.option("--cache-dir", type=click.Path(file_okay=False), help="Where trained reference models are cached.")
@click.option("--threads", type=click.IntRange(min=1), envvar="PRIVGATE_THREADS", show_envvar=True, help="Most threads the attacks use at once: torch training, BLAS and scikit-learn's OpenMP. This flag, else $PRIVGATE_THREADS, else the config's 'threads', else 1. Set it to the core count on a runner that does nothing else; never oversubscribe shared cores.")
@click.option("--artefacts", "artefacts_path", type=click.Path(file_okay=False), help="Where attacks save files to look at (inversion reconstructions); default: REPORT.artefacts/ next to --json, none without --json.")
@click.option("--trust-checkpoint", is_flag=True, default=None, help="Allow loading pickled checkpoints (this runs code from the file).")
@click.option("--quiet", "-q", is_flag=True, help="Print only the verdict line.")
@click.option("--verbose", "-v", is_flag=True, help="Print the reason of every check, passing ones too.")
@click.option("--remediate", is_flag=True, help="If the model fails, retrain it with DP-SGD at decreasing ε until the policy passes within its utility floor (the policy must allow it).")
@click.option("--output-model", "output_model", type=click.Path(dir_okay=False), help="With --remediate: where the hardened model goes (TorchScript; the state_dict beside it as NAME.state_dict.pt). Default: MODEL.hardened.pt next to the input.")
@_guard
def check(model: str | None, policy_spec: str | None, members: str | None, nonmembers: str | None, population: str | None,
          recipe: str | None, config_path: str | None, json_path: str | None,
          junit_path: str | None, sarif_path: str | None, markdown_path: str | None, html_path: str | None, step_summary: bool, seed: int | None, label_column: str | None,
          cache_dir: str | None, artefacts_path: str | None, trust_checkpoint: bool | None, quiet: bool, verbose: bool,
          remediate: bool = False, output_model: str | None = None, threads: int | None = None) -> int:
    """Audit MODEL against a policy and exit with the verdict."""
    from privgate.artefacts import default_directory
    from privgate.config import find_config, load_config
    from privgate.guards import audit_inputs, check_outputs
    from privgate.staging import Staging, commit, render_reports
    from privgate.report.console import print_report

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
    outputs = {"json": json_out, "junit": junit_path, "sarif": sarif_path, "markdown": markdown_path, "html": html_path}
    artefacts_dir = artefacts_path or (str(default_directory(json_out)) if json_out else None)
    if output_model and not remediate:
        raise click.UsageError("--output-model only applies with --remediate (or privgate harden).")
    model_out = None
    if remediate:
        from privgate.dp.remediate import default_output

        model_out = Path(output_model) if output_model else default_output(model_path)
    population_spec, recipe_spec = pick("population", population), pick("recipe", recipe)
    inputs = audit_inputs(model=model_path, policy=policy_value, recipe=recipe_spec, config=cfg.path, base=base,
                          data={"members": members_spec, "non-members": nonmembers_spec, "population": population_spec})
    json_from = "--json" if json_path is not None else f"'json' in {cfg.path}"
    check_outputs(_planned(outputs, artefacts_dir, model_out, json_from, artefacts_path is None, output_model is None), inputs)
    from privgate.api import audit_paths  # torch: imported after the cheap checks above

    n_threads = pick("threads", threads)  # validated: click's IntRange for the flag/$PRIVGATE_THREADS, config._validate for the file

    out = _out_console()
    show_progress = not quiet and out.is_terminal and not os.environ.get("CI")
    status = out.status("auditing…") if show_progress else None
    progress = (lambda msg: status.update(escape(msg))) if status else None
    runner: Callable[..., Any] = audit_paths
    if remediate:
        from functools import partial

        from privgate.dp.remediate import harden_paths
        from privgate.report.console import remediation_row

        on_row = None if quiet else (lambda row: out.print(remediation_row(row)))
        runner = partial(harden_paths, output_model=output_model, on_row=on_row)
    with Staging(artefacts_dir) as staging:  # nothing reaches its destination before commit()
        if status:
            status.start()
        try:
            result = runner(
                model_path,
                policy_value,
                members_spec,
                nonmembers_spec,
                population=population_spec,
                recipe=recipe_spec,
                seed=pick("seed", seed) or 0,
                label_column=pick("label_column", label_column) or "label",
                trust_checkpoint=bool(pick("trust_checkpoint", trust_checkpoint)),
                cache_dir=pick("cache_dir", cache_dir),
                search_dirs=[base],
                progress=progress,
                artefacts_dir=staging.path,
                threads=n_threads,
            )
        finally:
            if status:
                status.stop()
        staged, model_files = (result.report, result.files) if remediate else (result, {})
        report = staging.relocate(staged)
        files = render_reports(staged, report, outputs)
        for path, data in model_files.items():
            files[path] = ("hardened model" if path == model_out else "hardened model's state_dict", data)
        files.update({path: ("attack artefact", data) for path, data in staging.files().items()})
        commit(files)
    if step_summary:
        _append_step_summary(report)
    if quiet:
        out.print(report.summary)
    else:
        print_report(report, out, verbose=verbose)
        if json_out:
            out.print(f"JSON report: {json_out}")
        for fmt, path in outputs.items():
            if path and fmt != "json":
                out.print(f"{fmt} report: {path}")
        if artefacts_dir and any(a.extras.get("artefacts") for a in report.attacks):
            out.print(f"artefacts: {artefacts_dir}")
    return report.exit_code


def _planned(outputs: dict[str, str | None], artefacts_dir: str | None, model_out: Path | None, json_from: str,
             default_artefacts: bool, default_model: bool) -> list[Named]:
    """Every path ``check`` may write, with what it is and which flag (or config key) named it."""
    from privgate.guards import Named
    from privgate.staging import FORMAT_NAMES

    planned = [Named(Path(p), f"the {FORMAT_NAMES[fmt]} ({json_from if fmt == 'json' else '--' + fmt})") for fmt, p in outputs.items() if p]
    if artefacts_dir:
        planned.append(Named(Path(artefacts_dir), f"the artefacts folder ({'beside the JSON report' if default_artefacts else '--artefacts'})", folder=True))
    if model_out is not None:
        from privgate.dp.remediate import state_dict_path

        how = "the default, beside the model" if default_model else "--output-model"
        planned += [Named(model_out, f"the hardened model ({how})"), Named(state_dict_path(model_out), f"the hardened model's state_dict ({how})")]
    return planned


def _append_step_summary(report: Any) -> None:
    """Append the Markdown summary to the GitHub Actions job summary (``$GITHUB_STEP_SUMMARY``) when set."""
    target = os.environ.get("GITHUB_STEP_SUMMARY")
    if not target:
        return
    from privgate.report import render

    try:
        with open(target, "a", encoding="utf-8") as f:
            f.write(render(report, "markdown"))
    except OSError as exc:
        raise PrivgateError(f"{target}: cannot append to $GITHUB_STEP_SUMMARY ({exc.strerror or exc.__class__.__name__}).") from None


# --------------------------------------------------------------------------- report


@cli.group()
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
        raise PrivgateError(f"{path}: report schema version {rep.schema_version} is newer than this privgate understands ({SCHEMA_VERSION}); upgrade privgate.")
    _find_artefacts(rep, p.parent)
    return rep


def _find_artefacts(rep: Any, report_dir: Path) -> None:
    """Artefact paths in a report are relative to where ``check`` ran; rendering elsewhere, look next to the report too."""
    for attack in rep.attacks:
        paths = attack.extras.get("artefacts")
        if not isinstance(paths, list):
            continue
        found = []
        for item in paths:
            p = Path(str(item))
            candidates = [p, report_dir / p] + [report_dir / Path(*p.parts[i:]) for i, part in enumerate(p.parts) if part.endswith(".artefacts")]
            found.append(str(next((c for c in candidates if c.is_file()), p)))
        attack.extras["artefacts"] = found


@report.command("render")
@click.argument("report_json", metavar="REPORT.json")
@click.option("--html", "html_path", type=click.Path(dir_okay=False), help="Write a self-contained HTML report.")
@click.option("--markdown", "markdown_path", type=click.Path(dir_okay=False), help="Write a GitHub-flavoured Markdown summary.")
@click.option("--junit", "junit_path", type=click.Path(dir_okay=False), help="Write a JUnit XML report.")
@click.option("--sarif", "sarif_path", type=click.Path(dir_okay=False), help="Write a SARIF 2.1.0 log.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), help="Write the JSON report again (normalised).")
@click.option("--step-summary", is_flag=True, help="Also append the Markdown summary to $GITHUB_STEP_SUMMARY.")
@_guard
def report_render(report_json: str, html_path: str | None, markdown_path: str | None, junit_path: str | None,
                  sarif_path: str | None, json_path: str | None, step_summary: bool) -> int:
    """Turn a saved JSON report into HTML, Markdown, JUnit or SARIF (exit 0; the verdict is in the files)."""
    from privgate.guards import Named, check_outputs
    from privgate.staging import FORMAT_NAMES, commit, render_reports

    outputs = {"html": html_path, "markdown": markdown_path, "junit": junit_path, "sarif": sarif_path, "json": json_path}
    if not any(outputs.values()) and not step_summary:
        raise click.UsageError("nothing to render: give at least one of --html, --markdown, --junit, --sarif, --json.")
    rep = _load_report(report_json)
    inputs = [Named(Path(report_json), "the report being rendered")]
    inputs += [Named(Path(str(p)), f"an artefact of attack '{a.name}'") for a in rep.attacks
               for p in (a.extras.get("artefacts") if isinstance(a.extras.get("artefacts"), list) else [])]
    check_outputs([Named(Path(p), f"the {FORMAT_NAMES[fmt]} (--{fmt})") for fmt, p in outputs.items() if p], inputs)
    commit(render_reports(rep, rep, outputs))
    for fmt, path in outputs.items():
        if path:
            click.echo(f"{fmt} report: {path}")
    if step_summary:
        _append_step_summary(rep)
    return 0


@report.command("outputs")
@click.argument("report_json", metavar="REPORT.json")
@_guard
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


# --------------------------------------------------------------------------- init


@cli.command("init")
@click.argument("directory", default=".", type=click.Path(file_okay=False))
@click.option("--from", "base", default="internal", show_default=True, help="Built-in policy to start from (public, internal, confidential, strict).")
@click.option("--policy-file", default="privacy-policy.yaml", show_default=True, help="Name of the starter policy file.")
@click.option("--workflow/--no-workflow", default=True, show_default=True, help="Also write .github/workflows/privacy-gate.yml.")
@click.option("--action-ref", default=None, help="The privgate action the workflow uses (owner/repo@ref).")
@click.option("--model", default="model.pt", show_default=True, help="Model path the workflow audits.")
@click.option("--members", default="data/members.npz", show_default=True, help="Members file the workflow uses.")
@click.option("--nonmembers", default="data/nonmembers.npz", show_default=True, help="Non-members file the workflow uses.")
@_guard
def init_cmd(directory: str, base: str, policy_file: str, workflow: bool, action_ref: str | None, model: str,
             members: str, nonmembers: str) -> int:
    """Write a starter policy and a GitHub workflow into DIRECTORY (never overwriting a file), and ignore .privgate-cache/ in its .gitignore."""
    from privgate import init as init_mod

    planned = init_mod.plan(directory, base=base, policy_file=policy_file, workflow=workflow,
                            action_ref=action_ref or init_mod.ACTION_REF, model=model, members=members, nonmembers=nonmembers)
    ignore = {planned.gitignore, planned.gitignore.resolve()} if planned.gitignore is not None else set()
    for path in init_mod.write(planned):
        click.echo(f"added {init_mod.CACHE_IGNORE} to {path}" if path in ignore else f"wrote {path}")
    click.echo(f"next: edit {Path(directory) / policy_file}, then run: privgate policy validate {Path(directory) / policy_file}")
    return 0


# --------------------------------------------------------------------------- policy


@cli.group()
def policy() -> None:
    """List, show, validate built-in and custom policies."""


@policy.command("list")
@_guard
def policy_list() -> int:
    """List the built-in policies."""
    from privgate.policy import builtin_policies, load_policy

    from rich.table import Table

    table = Table(box=None, pad_edge=False, header_style="bold")
    for col in ("policy", "sensitivity", "release", "extends", "checks", "confidence", "description"):
        table.add_column(col, no_wrap=col != "description")
    from privgate.policy import Sensitivity

    policies = sorted((load_policy(n) for n in builtin_policies()), key=lambda p: (list(Sensitivity).index(p.sensitivity), len(p.chain())))
    for p in policies:
        name = p.name
        checks = sum(len(q.checks) for q in p.chain())
        table.add_row(f"[bold]{name}[/]", p.sensitivity.value, p.release.value, p.parent.name if p.parent else "—",
                      str(checks), f"{p.confidence:g}", escape(p.description.splitlines()[0]) if p.description else "")
    Console(highlight=False).print(table)
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
    inherited = sum(len(q.checks) for q in p.chain()[:-1])
    extra = f" and {inherited} inherited from {' → '.join(q.name for q in p.chain()[:-1])}" if inherited else ""
    click.echo(f"{file}: valid policy '{p.name}' ({len(p.checks)} checks{extra}, {len(p.attacks_to_run())} attacks, "
               f"every decision at {p.confidence:g} confidence).")
    return 0


@policy.command("schema")
@_guard
def policy_schema() -> int:
    """Print the JSON Schema of the policy format (for editors)."""
    from privgate.policy import policy_json_schema

    click.echo(policy_json_schema())
    return 0


# --------------------------------------------------------------------------- harden


def _harden(**kwargs: Any) -> None:
    check.callback(**kwargs, remediate=True)  # type: ignore[misc]


#: ``privgate harden`` is ``privgate check --remediate``: the same options, the same engine.
harden = click.Command(
    "harden",
    callback=_harden,
    params=[p for p in check.params if p.name != "remediate"],
    context_settings={"help_option_names": ["-h", "--help"]},
    help="Audit MODEL and, if it fails the policy, retrain it with DP-SGD at decreasing ε until every check "
    "passes within the policy's utility floor; write the hardened model (same as check --remediate). "
    "Exit 0: the original or a hardened model passes; 1: no ε in the schedule does both; "
    "2: bad input (no recipe, a model Opacus cannot make private, remediation not enabled); 3: inconclusive.",
    short_help="Retrain a failing model with DP-SGD until the policy passes.",
)
cli.add_command(harden)


def main() -> None:
    cli(prog_name="privgate")


if __name__ == "__main__":  # pragma: no cover
    main()
