"""``privgate audit``: check that a privacy *claim* holds — an LDP randomiser's ε, a DP-SGD run's (ε, δ).

Exit codes: 0 no violation found, 1 a lower bound exceeds the claimed ε (the
claim is false at the stated confidence), 2 bad input, 3 inconclusive (the
audit could not have exceeded the claim: too few trials or canaries), 4
internal error, 130 / 143 interrupted. Every report format (``--json``,
``--junit``, ``--sarif``, ``--markdown``, ``--html``) is written together at
the end, never over an input. The commands only turn flags into a settings
object and call :mod:`privgate.api`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from privgate.audits.ldp_names import ADVERSARIES, DISTINGUISHERS
from privgate.cli.executor import executor_options, executor_settings
from privgate.cli.guard import cap_threads, guard, out_console, progress_wanted
from privgate.cli.job_output import output_options, planned, write_and_show
from privgate.cli.threads import threads_setting
from privgate.report.safe import console as escape


class _Positive(click.ParamType):
    """A positive finite number (ε, a clipping norm): anything else is exit 2 before torch loads."""

    name = "number"

    def convert(self, value: Any, param: Any, ctx: Any) -> float:
        try:
            number = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number.", param, ctx)
        if not (math.isfinite(number) and number > 0):
            self.fail(f"must be a positive finite number, got {value}.", param, ctx)
        return number


POSITIVE = _Positive()


class _Epsilon(_Positive):
    """A claimed ε: positive, finite and at most privgate.audits.ldp_limits.MAX_EPSILON."""

    name = "epsilon"

    def convert(self, value: Any, param: Any, ctx: Any) -> float:
        from privgate.audits.ldp_limits import epsilon_problem

        number = super().convert(value, param, ctx)
        problem = epsilon_problem(number)
        if problem:
            self.fail(problem + ".", param, ctx)
        return number


EPSILON = _Epsilon()
#: Confidence levels the bounds may be stated at.
CONFIDENCE = click.FloatRange(0.5, 1, min_open=True, max_open=True)


def _epsilons(_ctx: Any, _param: Any, value: str) -> tuple[float, ...]:
    out = []
    for part in value.split(","):
        try:
            eps = float(part.strip())
        except ValueError:
            raise click.BadParameter(
                f"{part.strip()!r} is not a number; give ε as 4 or a sweep as 0.5,1,2,4."
            ) from None
        from privgate.audits.ldp_limits import epsilon_problem

        problem = epsilon_problem(eps)
        if problem:
            raise click.BadParameter(problem + ".")
        out.append(eps)
    if len(set(out)) != len(out):
        raise click.BadParameter(f"{value!r} names an ε twice.")
    return tuple(out)


def _names(choices: tuple[str, ...], what: str) -> Callable[[Any, Any, str], tuple[str, ...]]:
    from privgate.inputs.suggest import did_you_mean

    def parse(_ctx: Any, _param: Any, value: str) -> tuple[str, ...]:
        if value.strip() == "all":
            return choices
        picked = tuple(dict.fromkeys(p.strip() for p in value.split(",") if p.strip()))
        for name in picked:
            if name not in choices:
                raise click.BadParameter(
                    f"unknown {what} {name!r}{did_you_mean(name, choices)}; choose 'all' or from {', '.join(choices)}."
                )
        if not picked:
            raise click.BadParameter(f"no {what} given; choose 'all' or from {', '.join(choices)}.")
        return picked

    return parse


def _inputs(data: str | None, specs: dict[str, str | None]) -> list[Any]:
    """The files an audit reads (the data or its factory's module; recipe, mechanism, trainer modules)."""
    from privgate.io.guards import Named, spec_file

    dirs = [Path.cwd()]
    found: list[Any] = []
    if data:
        p = Path(data)
        is_factory = ":" in data and not p.exists() and p.suffix.lower() not in (".npz", ".pt", ".csv")
        found.append(spec_file(data, "the data factory", dirs) if is_factory else Named(p, "the data"))
    for role, spec in specs.items():
        if spec:
            found.append(spec_file(spec, role, dirs))
    return [n for n in found if n is not None]


def _imported(
    outputs: dict[str, str | None], data: str | None, recipe: str | None, entries: dict[str, str | None]
) -> None:
    """Import the user's modules (data factory, recipe, mechanism or trainer; nothing is called), then refuse an
    output onto any module they imported (:func:`privgate.io.guards.refuse_imported`)."""
    from privgate.audits.entry import MechanismError, TrainerError
    from privgate.inputs.entrypoints import import_entry, import_modules
    from privgate.io.guards import is_factory, refuse_imported

    dirs = [Path.cwd()]
    import_modules(recipe, [data] if data and is_factory(data, dirs[0]) else [], dirs)
    errors = {"mechanism": MechanismError, "trainer": TrainerError}
    for kind, spec in entries.items():
        if spec:
            import_entry(spec, dirs, kind, errors[kind])
    refuse_imported(planned(outputs))


def _shared_options(confidence_help: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """The options both audits take: --label-column, --confidence, --seed, --threads."""
    options = [
        click.option("--label-column", default="label", show_default=True, help="Label column of CSV data."),
        click.option("--confidence", type=CONFIDENCE, default=0.95, show_default=True, help=confidence_help),
        click.option("--seed", type=int, default=0, show_default=True, help="Seed for every random choice."),
        click.option(
            "--threads",
            type=click.IntRange(min=1),
            callback=cap_threads,
            envvar="PRIVGATE_THREADS",
            show_envvar=True,
            help="Most threads torch and BLAS may use (default $OMP_NUM_THREADS, else the cores this process may "
            "use; 1 where several jobs share the cores).",
        ),
        click.option("--quiet", "-q", is_flag=True, help="Print only the verdict line."),
    ]

    def apply(fn: Callable[..., Any]) -> Callable[..., Any]:
        for option in reversed(options):
            fn = option(fn)
        return fn

    return apply


@click.group("audit")
def audit() -> None:
    """Audit a privacy claim: an LDP randomiser's ε (ldp) or a DP-SGD run's (ε, δ) (dpsgd).

    Exit 0: no violation found; 1: a lower bound, valid at the stated confidence,
    exceeds the claimed ε; 2: bad input; 3: inconclusive (the audit could not
    have exceeded the claim); 4: internal error.
    """


@audit.command("ldp")
@click.option(
    "--epsilon",
    "epsilons",
    required=True,
    callback=_epsilons,
    help="The claimed ε, or a sweep: 0.5,1,2,4 (each a claim, all in one verdict).",
)
@click.option(
    "--clip", type=POSITIVE, default=1.0, show_default=True, help="L, the clipping norm of LDP-SGD (Algorithm 1)."
)
@click.option(
    "--trials",
    type=click.IntRange(min=2),
    default=10_000,
    show_default=True,
    help="K, trials per adversary × distinguisher cell.",
)
@click.option(
    "--adversary",
    "adversaries",
    default="all",
    show_default=True,
    callback=_names(ADVERSARIES, "adversary"),
    help=f"all, or a comma list of: {', '.join(ADVERSARIES)}.",
)
@click.option(
    "--distinguisher",
    "distinguishers",
    default="all",
    show_default=True,
    callback=_names(DISTINGUISHERS, "distinguisher"),
    help="all, black_box or white_box.",
)
@click.option(
    "--mechanism",
    help="Your randomiser as module:function, randomise(grads [K, d], epsilon, clip, generator) -> [K, d] (default: "
    "LDP-SGD).",
)
@click.option(
    "--recipe",
    help="module:attr of a privgate.Recipe: θ_t is the recipe trained on --data (default: a small MLP on digits).",
)
@click.option("--data", help="The examples the crafters use (.npz, .pt, .csv or module:function); goes with --recipe.")
@_shared_options("Probability that every lower bound in the report holds at once.")
@output_options("audit-ldp")
@executor_options
@guard
def audit_ldp_cmd(
    epsilons: tuple[float, ...],
    clip: float,
    trials: int,
    adversaries: tuple[str, ...],
    distinguishers: tuple[str, ...],
    mechanism: str | None,
    recipe: str | None,
    data: str | None,
    label_column: str,
    confidence: float,
    seed: int,
    threads: int | None,
    quiet: bool,
    outputs: dict[str, str | None],
    executor: str | None = None,
    ray_address: str | None = None,
) -> int:
    """Play the adversaries of Matsumoto et al. 2022 (arXiv 2206.09122) against an LDP randomiser; bound its ε."""
    from dataclasses import replace

    from privgate.io.guards import check_outputs

    if (recipe is None) != (data is None):
        raise click.UsageError(
            "--recipe and --data go together: θ_t is the recipe trained on the data (without both, the bundled "
            "digits model)."
        )
    check_outputs(planned(outputs), _inputs(data, {"the recipe": recipe, "the mechanism": mechanism}))
    executor_given = executor_settings(executor, ray_address)
    threads_given = threads_setting(threads, executor=executor_given["executor"])  # before the user's modules
    _imported(outputs, data, recipe, {"mechanism": mechanism})
    from privgate.api import audit_ldp
    from privgate.options import RunOptions
    from privgate.settings import LdpAuditSettings

    settings = LdpAuditSettings(
        epsilons=epsilons, clip=clip, trials=trials, adversaries=adversaries, distinguishers=distinguishers,
        confidence=confidence, mechanism=mechanism, recipe=recipe, data=data, label_column=label_column,
        search_dirs=(Path.cwd(),),
    )  # fmt: skip
    run = RunOptions(seed=seed, **threads_given, **executor_given)
    out = out_console()
    if not progress_wanted(quiet, out):
        return write_and_show(audit_ldp(settings, run), outputs, out, quiet=quiet)
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
    with Progress(*columns, console=out, transient=True) as bar:
        task = bar.add_task("preparing gradients", total=None)

        def tick(done: int, total: int, what: str) -> None:
            bar.update(task, completed=done, total=total, description=escape(what))

        report = audit_ldp(replace(settings, on_trials=tick), run)
    return write_and_show(report, outputs, out, quiet=quiet)


@audit.command("dpsgd")
@click.option("--epsilon", type=EPSILON, required=True, help="The claimed ε of the training run.")
@click.option(
    "--delta",
    type=click.FloatRange(0, 1, min_open=True, max_open=True),
    default=1e-5,
    show_default=True,
    help="The claimed δ (the bound needs 2·canaries·δ ≤ 1).",
)
@click.option("--data", help="Training data (.npz, .pt, .csv or module:function); default: digits.")
@click.option(
    "--recipe",
    help="module:attr of a privgate.Recipe trained with privgate's DP-SGD (white-box gradient canaries), or a "
    "language-model recipe .yaml (DP fine-tuning, text canaries; --data is then the training text); goes with --data.",
)
@click.option(
    "--train",
    "train_spec",
    help="Your trainer as module:function, train(x, y, epsilon, delta, seed) -> torch.nn.Module (black-box input "
    "canaries).",
)
@click.option(
    "--canaries",
    type=click.IntRange(min=2),
    default=1000,
    show_default=True,
    help="m canaries, each included with probability 1/2.",
)
@click.option("--clip", type=POSITIVE, default=1.0, show_default=True, help="White-box: the DP-SGD clipping norm C.")
@_shared_options("Probability that the reported lower bound holds.")
@output_options("audit-dpsgd")
@guard
def audit_dpsgd_cmd(
    epsilon: float,
    delta: float,
    data: str | None,
    recipe: str | None,
    train_spec: str | None,
    canaries: int,
    clip: float,
    label_column: str,
    confidence: float,
    seed: int,
    threads: int | None,
    quiet: bool,
    outputs: dict[str, str | None],
) -> int:
    """Train once with m canaries and bound the run's ε from below (Steinke, Nasr & Jagielski 2023)."""
    from privgate.io.guards import check_outputs

    if recipe and train_spec:
        raise click.UsageError(
            "give --recipe (privgate's DP-SGD, white-box) or --train (your trainer, black-box), not both."
        )
    if recipe and not data:
        raise click.UsageError("--recipe needs --data: the recipe's model must fit the data it trains on.")
    from privgate.inputs.coerce import recipe_source
    from privgate.io.guards import Named

    threads_given = threads_setting(threads)  # before the user's modules import torch
    recipe_file, recipe_module = recipe_source(recipe)  # a YAML recipe is a file to protect, a module one to import
    files = [Named(recipe_file, "the recipe")] if recipe_file else []
    check_outputs(planned(outputs), files + _inputs(data, {"the recipe": recipe_module, "the trainer": train_spec}))
    _imported(outputs, data, recipe_module, {"trainer": train_spec})
    from privgate.api import audit_dpsgd
    from privgate.options import RunOptions
    from privgate.settings import DpsgdAuditSettings

    settings = DpsgdAuditSettings(
        epsilon=epsilon, delta=delta, canaries=canaries, confidence=confidence, clip=clip, data=data, recipe=recipe,
        train=train_spec, label_column=label_column, search_dirs=(Path.cwd(),),
    )  # fmt: skip
    out = out_console()
    status = out.status("auditing…") if progress_wanted(quiet, out) else None
    run = RunOptions(seed=seed, **threads_given, progress=(lambda msg: status.update(escape(msg))) if status else None)
    if status:
        status.start()
    try:
        report = audit_dpsgd(settings, run)
    finally:
        if status:
            status.stop()
    return write_and_show(report, outputs, out, quiet=quiet)


__all__ = ["audit"]
