"""``privgate fl``: federated-learning audits — ``fl simulate`` (simulated) and ``fl audit`` (real checkpoints)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from privgate.cli.cache_settings import cache_options, cache_settings
from privgate.cli.executor import connect, executor_options, executor_settings, models_option
from privgate.cli.guard import cap_threads, guard, out_console
from privgate.cli.job_output import output_options, planned, write_and_show
from privgate.cli.threads import threads_setting
from privgate.cli.trust import NO_CONFIG_CODE
from privgate.report.safe import clean

_ATTACKS_HELP = (
    "Comma-separated attacks: correctness, loss, confidence, entropy, modified_entropy (metric attacks of Gao 2024, "
    "the default) and rmia, lira (reference models trained like a node)."
)


def _attacks(value: str | None) -> tuple[str, ...] | None:
    if value is None:
        return None
    names = tuple(a.strip() for a in value.split(",") if a.strip())
    return names or None


def _common(fn: Any) -> Any:
    for deco in reversed(
        [
            click.option("--attacks", "attacks", help=_ATTACKS_HELP),
            click.option("--fpr", type=float, default=0.01, show_default=True, help="FPR of the TPR@FPR metric."),
            click.option(
                "--confidence", type=float, default=0.95, show_default=True, help="Confidence of the intervals."
            ),
            click.option("--seed", type=int, default=0, show_default=True, help="Seed for every random choice."),
            click.option(
                "--threads",
                type=click.IntRange(min=1),
                callback=cap_threads,
                envvar="PRIVGATE_THREADS",
                help="Most threads used at once ($PRIVGATE_THREADS; default $OMP_NUM_THREADS, else the cores this "
                "process may use).",
            ),
            cache_options(),
            click.option(
                "--attacker", type=int, default=0, show_default=True, help="Node of the victim × round heatmap."
            ),
            click.option("--quiet", "-q", is_flag=True, help="Print only the summary line."),
            executor_options,
            models_option,
        ]
    ):
        fn = deco(fn)
    return fn


@click.group("fl")
def fl() -> None:
    """Federated learning: who in a federation can infer whose training data (Gao 2024, University of Zurich)."""


@fl.command("simulate")
@click.option("--recipe", required=True, help="How every node trains: module:attr (a privgate.Recipe).")
@click.option("--data", required=True, help="All rows: .npz, .pt, .csv or module:function returning (x, y).")
@click.option("--nodes", type=click.IntRange(min=2, max=1000), default=10, show_default=True)
@click.option("--rounds", type=click.IntRange(min=1, max=10_000), default=10, show_default=True)
@click.option(
    "--topology",
    "topologies",
    multiple=True,
    help="fully | star | ring | random:P | none | a graph file; repeat to compare side by side (default fully).",
)
@click.option(
    "--distribution",
    default="iid",
    show_default=True,
    help="iid or dirichlet:ALPHA (Gao 2024: 0.1).",
)
@click.option("--local-epochs", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--holdout", type=float, default=0.3, show_default=True, help="Fraction held out as non-members.")
@click.option(
    "--population", type=float, help="Fraction kept as the attacker's population (default 0.2 with rmia/lira)."
)
@click.option("--reference-models", type=int, default=4, show_default=True, help="Reference models for rmia/lira.")
@click.option("--engine", type=click.Choice(["auto", "vectorised", "sequential"]), default="auto", show_default=True)
@click.option("--label-column", default="label", show_default=True, help="Label column of CSV data.")
@click.option(
    "--save", "save_dir", type=click.Path(file_okay=False), help="Save every round's models in the manifest layout."
)
@_common
@output_options("fl-simulate")
@guard
def simulate_cmd(
    recipe: str, data: str, nodes: int, rounds: int, topologies: tuple[str, ...], distribution: str,
    local_epochs: int, holdout: float, population: float | None, reference_models: int, engine: str,
    label_column: str, save_dir: str | None, attacks: str | None, fpr: float, confidence: float, seed: int,
    threads: int | None, cache_dir: str | None, cache_key_file: str | None, attacker: int, quiet: bool,
    outputs: dict[str, str | None],
    executor: str | None = None, ray_address: str | None = None, models_per_task: int | None = None,
) -> int:  # fmt: skip
    """Simulate a decentralised federation and measure who can infer whose data, round by round."""
    from privgate.cli.inputfiles import audit_inputs
    from privgate.io.guards import Named, check_outputs

    base = Path.cwd()
    inputs = audit_inputs(model=None, policy=None, recipe=recipe, config=None, base=base, data={"training": data})
    targets = planned(outputs)
    if save_dir:
        targets.append(Named(Path(save_dir), "the saved federation (--save)", folder=True))
    check_outputs(targets, inputs)
    executor_given = executor_settings(executor, ray_address, models_per_task)
    threads_given = threads_setting(threads, executor=executor_given["executor"])  # before the user's modules
    from privgate.inputs.entrypoints import import_modules
    from privgate.io.guards import is_factory, refuse_imported

    import_modules(recipe, [data] if is_factory(data, base) else [], [base])  # imported, not called
    refuse_imported(targets)  # a module the recipe or the data factory imported is an input too
    from privgate.api import simulate_federation
    from privgate.options import RunOptions
    from privgate.settings import SimulationSettings

    settings = SimulationSettings(
        recipe=recipe, data=data, topologies=topologies or ("fully",), nodes=nodes, rounds=rounds,
        distribution=distribution, local_epochs=local_epochs, holdout=holdout, population=population,
        reference_models=reference_models, attacks=_attacks(attacks), fpr=fpr, confidence=confidence,
        label_column=label_column, save_dir=save_dir, search_dirs=(base,),
    )  # fmt: skip
    run = RunOptions(
        seed=seed, **threads_given, engine=engine, **cache_settings(cache_dir, cache_key_file), **executor_given,
    )  # fmt: skip
    connect(run)
    result = simulate_federation(settings, run)
    out = out_console()
    code = write_and_show(result.report, outputs, out, quiet=quiet, files=result.files, attacker=attacker)
    if save_dir and not quiet:
        out.print(clean(f"saved federation(s): {save_dir}/<topology>/federation.yaml"), markup=False)
    return code


@fl.command("audit")
@click.argument("manifest", type=click.Path(dir_okay=False))
@click.option("--policy", "-p", "policy_spec", help="A policy with federated checks (built-in name or YAML file).")
@_common
@NO_CONFIG_CODE
@output_options("fl-audit")
@guard
def audit_cmd(
    manifest: str, policy_spec: str | None, attacks: str | None, fpr: float, confidence: float, seed: int,
    threads: int | None, cache_dir: str | None, cache_key_file: str | None, attacker: int, quiet: bool,
    outputs: dict[str, str | None],
    executor: str | None = None, ray_address: str | None = None, models_per_task: int | None = None,
    no_config_code: bool = False,
) -> int:  # fmt: skip
    """Audit a real federation's checkpoints (federation.yaml) and, with --policy, gate it."""
    from privgate.audits.federated.manifest import load_manifest
    from privgate.io.guards import Named, check_outputs

    m = load_manifest(manifest, code=not no_config_code)  # read first: the guard needs the files it names
    inputs = [Named(m.path, "the federation manifest"), *[Named(p, "a node's data") for p in m.data]]
    inputs += [Named(p, "a checkpoint") for cps in m.checkpoints for p in cps] + [
        Named(m.nonmembers, "the non-members")
    ]
    if policy_spec and Path(policy_spec).suffix:
        inputs.append(Named(Path(policy_spec), "the policy"))
    check_outputs(planned(outputs), inputs)
    executor_given = executor_settings(executor, ray_address, models_per_task)
    threads_given = threads_setting(threads, executor=executor_given["executor"])
    from privgate.api import audit_federation
    from privgate.options import RunOptions
    from privgate.settings import FederationAuditSettings

    settings = FederationAuditSettings(
        manifest=manifest, policy=policy_spec, attacks=_attacks(attacks), fpr=fpr, confidence=confidence
    )
    run = RunOptions(
        seed=seed, **threads_given, **cache_settings(cache_dir, cache_key_file), **executor_given,
    )  # fmt: skip
    connect(run)
    report = audit_federation(settings, run)
    return write_and_show(report, outputs, out_console(), quiet=quiet, attacker=attacker)


__all__ = ["fl"]
