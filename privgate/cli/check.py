"""``privgate check`` and ``privgate harden``: audit a model against a policy (and harden it with DP-SGD)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from privgate.cli.cache import cache_options, cache_settings
from privgate.cli.endpoint import endpoint_access, endpoint_options
from privgate.cli.executor import connect, executor_options, executor_settings, models_option
from privgate.cli.guard import cap_threads, err_console, guard, out_console, process_environment, progress_wanted
from privgate.cli.lmoptions import text_options, text_settings
from privgate.cli.outputs import output_options
from privgate.errors import PrivgateError
from privgate.report import title_of
from privgate.report.safe import clean
from privgate.report.safe import console as escape

if TYPE_CHECKING:
    from privgate.io.guards import Named


def _resolve(value: str | None, from_cli: bool, base: Path) -> str | None:
    """CLI values are relative to the working directory, config values to the config's folder."""
    if value is None or from_cli:
        return value
    if value.strip().lower().startswith(("http://", "https://")):
        return value  # an endpoint URL (privgate.inputs.targets.is_endpoint)
    if ":" in value and not Path(value).suffix:
        return value  # module:function
    p = Path(value)
    return str(p if p.is_absolute() else base / p)


@click.command()
@click.argument("model", required=False)
@click.option(
    "--policy",
    "-p",
    "policy_spec",
    help="Built-in policy name (public, internal, confidential, strict) or a policy YAML file.",
)
@click.option("--members", help="Members (the training set): .npz, .pt, .csv, .parquet or module:function.")
@click.option(
    "--nonmembers", help="Non-members from the same distribution: .npz, .pt, .csv, .parquet or module:function."
)
@click.option("--population", help="Optional extra same-distribution data for reference models.")
@click.option(
    "--recipe",
    help="Training recipe as module:attr: a privgate.Recipe, your own train(x, y, seed, device) -> nn.Module, or an "
    "unfitted scikit-learn estimator (needed for state_dict checkpoints and reference models; a scikit-learn model "
    "is its own recipe without one).",
)
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False),
    help="privgate.toml or pyproject.toml (default: searched from the working directory upward).",
)
@click.option(
    "--step-summary/--no-step-summary",
    default=True,
    show_default=True,
    help="Append the Markdown summary to $GITHUB_STEP_SUMMARY when it is set.",
)
@click.option("--seed", type=int, help="Seed for every random choice (default 0).")
@click.option("--label-column", help="Label column of CSV and Parquet tables (default 'label').")
@cache_options(config_key=True)
@click.option(
    "--threads",
    type=click.IntRange(min=1),
    callback=cap_threads,
    envvar="PRIVGATE_THREADS",
    show_envvar=True,
    help="Most threads the attacks use at once: torch training, BLAS and scikit-learn's OpenMP. This flag, "
    "else $PRIVGATE_THREADS, else the config's 'threads', else 1. Set it to the core count on a runner "
    "that does nothing else; never oversubscribe shared cores.",
)
@click.option(
    "--device",
    type=click.Choice(["auto", "cpu", "cuda"]),
    envvar="PRIVGATE_DEVICE",
    show_envvar=True,
    help="Where the model is scored, reference models and DP-SGD train, and white-box attacks run: auto (a CUDA "
    "GPU when torch sees one, else the CPU), cpu, or cuda (exit 2 without one). This flag, else $PRIVGATE_DEVICE, "
    "else the config's 'device', else auto.",
)
@click.option(
    "--engine",
    type=click.Choice(["auto", "vectorised", "sequential"]),
    help="How reference models train: auto (all at once when the engine can stack the model, else one after "
    "another), vectorised (exit 2 when it cannot) or sequential (recipe.train per model). This flag, else the "
    "config's 'engine', else auto.",
)
@executor_options
@models_option
@endpoint_options
@click.option(
    "--artefacts",
    "artefacts_path",
    type=click.Path(file_okay=False),
    help="Where attacks save files to look at (inversion reconstructions); default: REPORT.artefacts/ next to "
    "--json, none without --json.",
)
@click.option(
    "--exposed",
    type=click.IntRange(min=0),
    help="How many of the most exposed members the reports list (their row in the members file, each attack's "
    "score, rank and FPR/TPR there); default 10, 0 for none. This flag, else the config's 'exposed'.",
)
@click.option(
    "--trust-checkpoint",
    is_flag=True,
    default=None,
    help="Allow loading pickled checkpoints (this runs code from the file).",
)
@click.option(
    "--trust-type",
    "trust_types",
    multiple=True,
    metavar="MODULE.NAME",
    help="A type a .skops model may name besides scikit-learn's, numpy's and scipy's (your own transformer, the "
    "function of a FunctionTransformer); repeatable; loading it imports its module. Else the config's 'trust_types'.",
)
@click.option("--quiet", "-q", is_flag=True, help="Print only the verdict line.")
@click.option("--verbose", "-v", is_flag=True, help="Print the reason of every check, passing ones too.")
@click.option(
    "--remediate",
    is_flag=True,
    help="If the model fails, retrain it with DP-SGD at decreasing ε until the policy passes within its "
    "utility floor (the policy must allow it).",
)
@click.option(
    "--output-model",
    "output_model",
    type=click.Path(),
    help="With --remediate: where the hardened model goes (TorchScript; the state_dict beside it as "
    "NAME.state_dict.pt, its model card with the DP statement as NAME.card.md). "
    "Default: MODEL.hardened.pt next to the input. A language model (a model directory) is written as a new "
    "save_pretrained folder, default MODEL_DIR.hardened; an existing one is never overwritten.",
)
@click.option(
    "--mlflow",
    "mlflow_log",
    is_flag=True,
    help="Log the verdict, every check's value and interval, the attack table and the reports to the active MLflow "
    "run (one is started when none is; MLflow reads MLFLOW_TRACKING_URI, MLFLOW_EXPERIMENT_NAME, MLFLOW_RUN_ID). "
    "Needs privgate[mlflow].",
)
@click.option(
    "--mlflow-model",
    "mlflow_model",
    metavar="NAME:VERSION",
    help="Also set the tag privgate.verdict on this registered model version, for a promotion rule (implies --mlflow).",
)
@text_options
@output_options("check")
@guard
def check(
    model: str | None,
    policy_spec: str | None,
    members: str | None,
    nonmembers: str | None,
    population: str | None,
    recipe: str | None,
    config_path: str | None,
    outputs: dict[str, str | None],
    step_summary: bool,
    seed: int | None,
    label_column: str | None,
    cache_dir: str | None,
    cache_key_file: str | None,
    artefacts_path: str | None,
    trust_checkpoint: bool | None,
    quiet: bool,
    verbose: bool,
    remediate: bool = False,
    output_model: str | None = None,
    threads: int | None = None,
    device: str | None = None,
    engine: str | None = None,
    exposed: int | None = None,
    mlflow_log: bool = False,
    mlflow_model: str | None = None,
    executor: str | None = None,
    ray_address: str | None = None,
    models_per_task: int | None = None,
    headers: tuple[str, ...] = (),
    max_queries: int | None = None,
    endpoint_output: str | None = None,
    endpoint_timeout: float | None = None,
    endpoint_batch: int | None = None,
    endpoint_concurrency: int | None = None,
    endpoint_max_bytes: int | None = None,
    text_field: str | None = None,
    text_column: str | None = None,
    reference_model: str | None = None,
    base_model: str | None = None,
    canaries: str | None = None,
    user_field: str | None = None,
    max_records: int | None = None,
    max_text_mib: int | None = None,
    max_canaries: int | None = None,
    trust_types: tuple[str, ...] = (),
) -> int:
    """Audit MODEL against a policy and exit with the verdict.

    MODEL is a checkpoint file, or a Hugging Face model directory (``save_pretrained``; a PEFT adapter on its
    base) audited on text records (.jsonl, .txt, .csv).
    """
    from privgate.cli.outputs import rendered
    from privgate.inputs.config import find_config, load_config
    from privgate.io.artefacts import default_directory
    from privgate.io.guards import audit_inputs, check_outputs, stream_of
    from privgate.io.staging import Staging, commit

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
    json_typed = outputs.get("json")
    json_out = outputs["json"] = pick("json", json_typed)
    # no artefacts folder beside a JSON report sent to stdout (/dev/stdout: privgate.io.guards.stream_of)
    beside = json_out if json_out and stream_of(json_out) is None else None
    artefacts_dir = artefacts_path or (str(default_directory(beside)) if beside else None)
    if output_model and not remediate:
        raise click.UsageError("--output-model only applies with --remediate (or privgate harden).")
    model_out = None
    if remediate and output_model is None and str(model_path).lower().startswith(("http://", "https://")):
        raise click.UsageError(
            "the model is an endpoint: with --remediate, say where the hardened model goes (--output-model)."
        )
    from privgate.lm.loading import is_model_dir

    lm_out = remediate and is_model_dir(model_path)  # a language model: hardened into a new folder (privgate.lm)
    if remediate:
        from privgate.dp.hardened import default_output
        from privgate.lm.hardened import default_output as lm_default

        model_out = Path(output_model) if output_model else (lm_default if lm_out else default_output)(model_path)
    population_spec, recipe_spec = pick("population", population), pick("recipe", recipe)
    module_recipe = None if lm_out else recipe_spec  # a language model's recipe is a YAML file, no module
    inputs = audit_inputs(
        model=model_path,
        policy=policy_value,
        recipe=module_recipe,
        config=cfg.path,
        base=base,
        data={"members": members_spec, "non-members": nonmembers_spec, "population": population_spec},
    )
    json_from = "--json" if json_typed is not None else f"'json' in {cfg.path}"
    planned = _planned(
        outputs, artefacts_dir, None if lm_out else model_out, json_from, artefacts_path is None, output_model is None
    )
    if lm_out and model_out is not None:
        from privgate.lm.hardened import planned_output, recipe_inputs

        planned.append(planned_output(model_out, output_model is None))
        inputs += recipe_inputs(recipe_spec)
    check_outputs(planned, inputs)
    mlflow_plan = _mlflow_plan(mlflow_log, mlflow_model)  # before the audit: a wrong name costs nothing
    _imported_project(planned, module_recipe, [members_spec, nonmembers_spec, population_spec], base)
    from privgate.api import check as run_check  # torch: imported after the cheap checks above
    from privgate.api import harden as run_harden
    from privgate.options import RunOptions
    from privgate.report.html import attach_images
    from privgate.report.show import show
    from privgate.settings import CheckSettings, HardenSettings

    # validated: click's IntRange for the flag and $PRIVGATE_THREADS, config._validate for the file
    n_threads = pick("threads", threads)

    out = out_console()
    status = out.status("auditing…") if progress_wanted(quiet, out) else None
    progress = (lambda msg: status.update(escape(msg))) if status else None
    inputs_given = {
        "model": model_path,
        "policy": policy_value,
        "members": members_spec,
        "nonmembers": nonmembers_spec,
        "population": population_spec,
        "recipe": recipe_spec,
        "label_column": label_column or cfg.get("label_column") or "label",  # a column's name, never a path
        "trust_checkpoint": bool(pick("trust_checkpoint", trust_checkpoint)),
        "trust_types": tuple(trust_types or cfg.get("trust_types") or ()),
        "search_dirs": (base,),
        "access": endpoint_access(
            headers,
            max_queries,
            endpoint_output,
            endpoint_timeout,
            endpoint_batch,
            endpoint_concurrency,
            cfg,
            endpoint_max_bytes,
        ),
        "text": text_settings(
            {
                "text_field": text_field,
                "text_column": text_column,
                "reference_model": reference_model,
                "base_model": base_model,
                "canaries": canaries,
                "user_field": user_field,
                "max_records": max_records,
                "max_text_mib": max_text_mib,
                "max_canaries": max_canaries,
            },
            pick,
        ),
    }
    if remediate:
        from privgate.report.console import remediation_row

        on_row = None if quiet else (lambda row: out.print(remediation_row(row)))
        settings: CheckSettings = HardenSettings(**inputs_given, output_model=output_model, on_row=on_row)
    else:
        settings = CheckSettings(**inputs_given)
    with Staging(artefacts_dir) as staging:  # nothing reaches its destination before commit()
        run = RunOptions(
            seed=pick("seed", seed) or 0,
            threads=n_threads,
            **cache_settings(pick("cache_dir", cache_dir), cache_key_file),
            device=device or cfg.get("device") or "auto",  # validated: click.Choice, config._validate
            engine=engine or cfg.get("engine") or "auto",
            progress=progress,
            artefacts_dir=staging.path,
            exposed=10 if pick("exposed", exposed) is None else pick("exposed", exposed),
            **executor_settings(executor, ray_address, models_per_task, cfg),
        )
        connect(run)  # a missing extra or a wrong address: exit 2 before any work
        if status:
            status.start()
        try:
            result = run_harden(settings, options=run) if remediate else run_check(settings, options=run)
        finally:
            if status:
                status.stop()
        staged, model_files = (result.report, result.files) if remediate else (result, {})
        report = staging.relocate(staged)
        artefacts = staging.files()
        report = attach_images(report, artefacts)  # the HTML embeds what this run wrote; it never reads a path
        files = rendered(report, outputs)
        files.update(model_files)
        files.update({path: ("attack artefact", data) for path, data in artefacts.items()})
        commit(files)
    if step_summary:
        append_step_summary(report)
    logged, mlflow_warning = None, None
    if mlflow_plan is not None:
        from privgate.report.tracking import log_or_warn

        logged, mlflow_warning = log_or_warn(report, mlflow_plan)
    if mlflow_warning:  # MLflow is a side channel: its failure is a warning, the exit code stays the verdict's
        err_console().print(f"warning: {mlflow_warning}", markup=False, highlight=False)
    show(report, out, quiet=quiet, verbose=verbose)
    if not quiet:
        if json_out:
            out.print(f"JSON report: {escape(json_out)}")
        for fmt, path in outputs.items():
            if path and fmt != "json":
                out.print(f"{title_of(fmt)}: {clean(path)}", markup=False)
        images = any(r.get("image") for r in (report.exposed or {}).get("records", []))
        if artefacts_dir and (images or any(a.extras.get("artefacts") for a in report.attacks)):
            out.print(f"artefacts: {escape(artefacts_dir)}")
        if logged is not None:
            mv = logged.model_version
            tagged = f"; model version {mv[0]}:{mv[1]} tagged privgate.verdict={report.verdict}" if mv else ""
            out.print(
                f"MLflow: logged to run {logged.run_id} (experiment {logged.experiment_id}, "
                f"{logged.tracking_uri}){tagged}",
                markup=False,
            )
    return report.exit_code


def _imported_project(planned: list[Named], recipe: str | None, data: list[str | None], base: Path) -> None:
    """Import the recipe's and data factories' modules, then refuse an output onto any module they imported."""
    from privgate.inputs.entrypoints import import_modules
    from privgate.io.guards import is_factory, refuse_imported

    lm_recipe = recipe is not None and Path(recipe).suffix in (".yaml", ".yml")  # a file, no module to import
    import_modules(None if lm_recipe else recipe, [s for s in data if s and is_factory(s, base)], [base])
    refuse_imported(planned)


def _mlflow_plan(log: bool, model: str | None) -> Any:
    """With --mlflow or --mlflow-model: MLflow is installed, the version named exists (when the server answers)."""
    if not (log or model):
        return None
    from privgate.report.tracking import prepare

    return prepare(log, model)


def _planned(
    outputs: dict[str, str | None],
    artefacts_dir: str | None,
    model_out: Path | None,
    json_from: str,
    default_artefacts: bool,
    default_model: bool,
) -> list[Named]:
    """Every path ``check`` may write, with what it is and which flag (or config key) named it."""
    from privgate.cli.outputs import planned as planned_reports
    from privgate.io.guards import Named

    planned = planned_reports(outputs, lambda fmt: json_from if fmt == "json" else f"--{fmt}")
    if artefacts_dir:
        planned.append(
            Named(
                Path(artefacts_dir),
                f"the artefacts folder ({'beside the JSON report' if default_artefacts else '--artefacts'})",
                folder=True,
            )
        )
    if model_out is not None:
        from privgate.dp.hardened import files_named

        how = "the default, beside the model" if default_model else "--output-model"
        planned += [Named(path, f"the {what} ({how})") for path, what in files_named(model_out).items()]
    return planned


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
    "Exit 0: the original or a hardened model passes; 1: no ε in the schedule does both, or the released ε "
    "(the search included) would exceed the policy's max_total_epsilon; "
    "2: bad input (no recipe, a model Opacus cannot make private, remediation not enabled); 3: inconclusive.",
    short_help="Retrain a failing model with DP-SGD until the policy passes.",
)
