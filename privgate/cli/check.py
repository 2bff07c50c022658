"""``privgate check`` and ``privgate harden``: audit a model against a policy (and harden it with DP-SGD)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from privgate.cli.budget import budget_option, budget_setting
from privgate.cli.cache_settings import cache_options, cache_settings
from privgate.cli.endpoint import endpoint_access, endpoint_options
from privgate.cli.executor import connect, devices_option, executor_options, executor_settings, models_option
from privgate.cli.guard import cap_threads, err_console, guard, out_console, progress_wanted
from privgate.cli.job_output import output_options
from privgate.cli.lmoptions import text_options, text_settings
from privgate.cli.mlflow_flags import mlflow_options
from privgate.cli.records import planned_records, records_option, with_records
from privgate.cli.step_summary import append_step_summary
from privgate.cli.tableoptions import table_options, table_settings
from privgate.cli.threads import threads_setting
from privgate.cli.trust import trust_options, trust_settings
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
@table_options
@cache_options(config_key=True)
@click.option(
    "--threads",
    type=click.IntRange(min=1),
    callback=cap_threads,
    envvar="PRIVGATE_THREADS",
    show_envvar=True,
    help="Most threads the attacks use at once: torch training, BLAS and scikit-learn's OpenMP. This flag, "
    "else $PRIVGATE_THREADS, else the config's 'threads', else $OMP_NUM_THREADS, else the cores this process may "
    "use (its CPU affinity, capped by its cgroup's CPU quota). Set 1 where several jobs share the cores.",
)
@click.option(
    "--device",
    type=click.Choice(["auto", "cpu", "cuda"]),
    envvar="PRIVGATE_DEVICE",
    show_envvar=True,
    help="Where the model is scored, reference models and DP-SGD train, and white-box attacks run: auto (the CPU, "
    "or a CUDA GPU when torch sees one and this run's estimated work is large enough for it to finish sooner; the "
    "report says why), cpu, or cuda (exit 2 without one). This flag, else $PRIVGATE_DEVICE, else the config's "
    "'device', else auto.",
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
@devices_option
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
@records_option
@trust_options
@budget_option
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
    "save_pretrained folder, default MODEL_DIR.hardened; an existing one is never overwritten. A scikit-learn "
    "model without a recipe is written with skops: MODEL.hardened.skops, its card (no DP claim) beside it.",
)
@mlflow_options
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
    drop_duplicates: bool | None,
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
    records_path: str | None = None,
    mlflow_log: bool = False,
    mlflow_model: str | None = None,
    executor: str | None = None,
    ray_address: str | None = None,
    models_per_task: int | None = None,
    devices: str | None = None,
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
    no_config_code: bool = False,
    budget: float | None = None,
) -> int:
    """Audit MODEL against a policy and exit with the verdict.

    MODEL is a checkpoint file, or a Hugging Face model directory (``save_pretrained``; a PEFT adapter on its
    base) audited on text records (.jsonl, .txt, .csv).
    """
    from privgate.inputs.config import find_config, load_config

    flags = dict(locals())
    cfg = load_config(config_path, code=not no_config_code) if config_path else find_config(code=not no_config_code)
    given = _given(flags, cfg)
    request = _planned_request(given, flags, cfg)
    report = _run(request, given, flags, cfg)
    return _show(report, request, flags)


@dataclass
class _Given:
    """The inputs the flags, else the config file, name (paths relative to the config's folder)."""

    pick: Callable[[str, Any], Any]
    model: str
    policy: str
    members: str
    nonmembers: str
    population: str | None
    recipe: str | None
    executor: dict[str, Any]  # RunOptions' executor settings
    threads: dict[str, Any]  # RunOptions' threads and their reason (privgate.cli.threads)
    code_dir: Path  # where module:attr specs are imported from first: the config's folder, with --no-config-code cwd


@dataclass
class _Request:
    """What ``check`` will write, checked before any work: the reports, artefacts folder, hardened model."""

    outputs: dict[str, str | None]
    json_out: str | None
    artefacts_dir: str | None
    mlflow_plan: Any


def _given(flags: dict[str, Any], cfg: Any) -> _Given:
    """The model, policy and data the flags name, else the config's; a missing one is a usage error (exit 2)."""
    base = cfg.base

    def pick(key: str, cli_value: Any) -> Any:
        if cli_value is not None:
            return _resolve(cli_value, True, base) if isinstance(cli_value, str) else cli_value
        value = cfg.get(key)
        return _resolve(value, False, base) if isinstance(value, str) else value

    # before the user's modules import torch: more than one thread lets OpenMP's idle threads sleep
    executor_given = executor_settings(
        flags["executor"], flags["ray_address"], flags["models_per_task"], cfg, flags["devices"]
    )
    # validated: click's IntRange, config._validate
    threads_given = threads_setting(flags["threads"], cfg.get("threads"), cfg.path, executor_given["executor"])
    model_path = pick("model", flags["model"])
    policy_spec = flags["policy_spec"]
    policy_value = policy_spec if policy_spec is not None else cfg.get("policy")
    if policy_value is not None and policy_spec is None and (Path(policy_value).suffix or "/" in policy_value):
        policy_value = _resolve(policy_value, False, base)
    if model_path is None:
        raise click.UsageError("no model given: pass MODEL or set 'model' in privgate.toml / [tool.privgate].")
    if policy_value is None:
        raise click.UsageError("no policy given: pass --policy NAME|FILE or set 'policy' in the config.")
    members, nonmembers = pick("members", flags["members"]), pick("nonmembers", flags["nonmembers"])
    if members is None or nonmembers is None:
        raise click.UsageError("audit data missing: pass --members and --nonmembers (or set them in the config).")
    population, recipe = pick("population", flags["population"]), pick("recipe", flags["recipe"])
    code_dir = Path.cwd() if flags["no_config_code"] else base  # a file's folder never decides what code runs
    return _Given(
        pick, model_path, policy_value, members, nonmembers, population, recipe, executor_given, threads_given, code_dir
    )


def _planned_request(given: _Given, flags: dict[str, Any], cfg: Any) -> _Request:
    """Every path the run may write, refused at once when it names an input or an existing hardened model folder."""
    from privgate.cli.inputfiles import audit_inputs
    from privgate.io.artefacts import default_directory
    from privgate.io.guards import check_outputs, stream_of

    outputs, pick, remediate, output_model = flags["outputs"], given.pick, flags["remediate"], flags["output_model"]
    json_typed = outputs.get("json")
    json_out = outputs["json"] = pick("json", json_typed)
    # no artefacts folder beside a JSON report sent to stdout (/dev/stdout: privgate.io.guards.stream_of)
    beside = json_out if json_out and stream_of(json_out) is None else None
    artefacts_path = flags["artefacts_path"]
    artefacts_dir = artefacts_path or (str(default_directory(beside)) if beside else None)
    if output_model and not remediate:
        raise click.UsageError("--output-model only applies with --remediate (or privgate harden).")
    if remediate and output_model is None and str(given.model).lower().startswith(("http://", "https://")):
        raise click.UsageError(
            "the model is an endpoint: with --remediate, say where the hardened model goes (--output-model)."
        )
    if remediate:
        from privgate.dp.hardened import recipe_is_module

        module_recipe = given.recipe if recipe_is_module(given.model) else None  # a language model's: a YAML file
    else:
        module_recipe = given.recipe
    inputs = audit_inputs(
        model=given.model,
        policy=given.policy,
        recipe=module_recipe,
        config=cfg.path,
        base=given.code_dir,
        data={"members": given.members, "non-members": given.nonmembers, "population": given.population},
    )
    json_from = "--json" if json_typed is not None else f"'json' in {cfg.path}"
    planned = _planned(outputs, artefacts_dir, json_from, artefacts_path is None)
    planned += planned_records(flags["records_path"])
    if remediate:
        from privgate.dp.hardened import hardened_outputs

        hardened = hardened_outputs(given.model, output_model, given.recipe)  # an existing folder: refused here
        planned += hardened.planned
        inputs += hardened.inputs
    check_outputs(planned, inputs)
    # before the audit: a wrong name costs nothing
    mlflow_plan = _mlflow_plan(flags["mlflow_log"], flags["mlflow_model"])
    _imported_project(planned, module_recipe, [given.members, given.nonmembers, given.population], given.code_dir)
    return _Request(outputs, json_out, artefacts_dir, mlflow_plan)


def _settings(given: _Given, flags: dict[str, Any], cfg: Any, out: Any) -> Any:
    """The flags as the job's settings (:class:`~privgate.settings.CheckSettings` or ``HardenSettings``)."""
    from privgate.settings import CheckSettings, HardenSettings

    pick, f = given.pick, flags
    inputs_given = {
        "model": given.model,
        "policy": given.policy,
        "members": given.members,
        "nonmembers": given.nonmembers,
        "population": given.population,
        "recipe": given.recipe,
        **table_settings(f, pick, cfg),
        **trust_settings(f, pick, cfg),
        **budget_setting(f),
        "search_dirs": (given.code_dir,),
        "access": endpoint_access(
            f["headers"],
            f["max_queries"],
            f["endpoint_output"],
            f["endpoint_timeout"],
            f["endpoint_batch"],
            f["endpoint_concurrency"],
            cfg,
            f["endpoint_max_bytes"],
        ),  # fmt: skip
        "text": text_settings(f, pick),
    }
    if not f["remediate"]:
        return CheckSettings(**inputs_given)
    from privgate.report.console import remediation_row

    on_row = None if f["quiet"] else (lambda row: out.print(remediation_row(row)))
    return HardenSettings(**inputs_given, output_model=f["output_model"], on_row=on_row)


def _run(request: _Request, given: _Given, flags: dict[str, Any], cfg: Any) -> Any:
    """Run the job through :mod:`privgate.api` and write its reports, artefacts and model files together."""
    from privgate.api import check as run_check  # torch: imported after the cheap checks above
    from privgate.api import harden as run_harden
    from privgate.cli.job_output import rendered
    from privgate.io.staging import Staging, commit
    from privgate.options import RunOptions
    from privgate.report.html import attach_images

    pick, f = given.pick, flags
    out = out_console()
    status = out.status("auditing…") if progress_wanted(f["quiet"], out) else None
    progress = (lambda msg: status.update(escape(msg))) if status else None
    settings = _settings(given, flags, cfg, out)
    exposed = pick("exposed", f["exposed"])
    with Staging(request.artefacts_dir) as staging:  # nothing reaches its destination before commit()
        run = RunOptions(
            seed=pick("seed", f["seed"]) or 0,
            **given.threads,
            **cache_settings(pick("cache_dir", f["cache_dir"]), f["cache_key_file"]),
            device=f["device"] or cfg.get("device") or "auto",  # validated: click.Choice, config._validate
            engine=f["engine"] or cfg.get("engine") or "auto",
            progress=progress,
            artefacts_dir=staging.path,
            exposed=10 if exposed is None else exposed,
            **given.executor,
        )
        connect(run)  # a missing extra or a wrong address: exit 2 before any work
        if status:
            status.start()
        try:
            result = run_harden(settings, options=run) if f["remediate"] else run_check(settings, options=run)
        finally:
            if status:
                status.stop()
        staged, model_files = (result.report, result.files) if f["remediate"] else (result, {})
        report = staging.relocate(staged)
        artefacts = staging.files()
        report = attach_images(report, artefacts)  # the HTML embeds what this run wrote; it never reads a path
        report, records = with_records(report, f["records_path"])  # the JSON references it: before rendering
        files = rendered(report, request.outputs) | records | model_files
        files.update({path: ("attack artefact", data) for path, data in artefacts.items()})
        commit(files)
    return report


def _show(report: Any, request: _Request, flags: dict[str, Any]) -> int:
    """The step summary, MLflow, the console view and where everything went; the verdict's exit code."""
    from privgate.report.show import show

    if flags["step_summary"]:
        append_step_summary(report)
    logged, mlflow_warning = None, None
    if request.mlflow_plan is not None:
        from privgate.report.tracking import log_or_warn

        logged, mlflow_warning = log_or_warn(report, request.mlflow_plan)
    if mlflow_warning:  # MLflow is a side channel: its failure is a warning, the exit code stays the verdict's
        err_console().print(f"warning: {mlflow_warning}", markup=False, highlight=False)
    out, quiet = out_console(), flags["quiet"]
    show(report, out, quiet=quiet, verbose=flags["verbose"])
    if quiet:
        return report.exit_code
    if request.json_out:
        out.print(f"JSON report: {escape(request.json_out)}")
    named = [(title_of(fmt), path) for fmt, path in request.outputs.items() if fmt != "json"]
    for what, path in [*named, ("records", flags["records_path"])]:
        if path:
            out.print(f"{what}: {clean(path)}", markup=False)
    images = any(r.get("image") for r in (report.exposed or {}).get("records", []))
    if request.artefacts_dir and (images or any(a.extras.get("artefacts") for a in report.attacks)):
        out.print(f"artefacts: {escape(request.artefacts_dir)}")
    if logged is not None:
        mv = logged.model_version
        tagged = f"; model version {mv[0]}:{mv[1]} tagged privgate.verdict={report.verdict}" if mv else ""
        out.print(
            f"MLflow: logged to run {logged.run_id} (experiment {logged.experiment_id}, {logged.tracking_uri}){tagged}",
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
    outputs: dict[str, str | None], artefacts_dir: str | None, json_from: str, default_artefacts: bool
) -> list[Named]:
    """Every report and artefact path ``check`` may write, with what it is and which flag (or config key) named it."""
    from privgate.cli.job_output import planned as planned_reports
    from privgate.io.guards import Named

    planned = planned_reports(outputs, lambda fmt: json_from if fmt == "json" else f"--{fmt}")
    if artefacts_dir:
        how = "beside the JSON report" if default_artefacts else "--artefacts"
        planned.append(Named(Path(artefacts_dir), f"the artefacts folder ({how})", folder=True))
    return planned


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
    "2: bad input (no recipe, a model Opacus cannot make private, remediation not enabled); 3: inconclusive. "
    "A scikit-learn model given without a recipe has no DP-SGD to run: its own capacity settings are searched "
    "instead (larger leaves, a stronger penalty), and its card says it carries no DP guarantee.",
    short_help="Retrain a failing model with DP-SGD until the policy passes.",
)
