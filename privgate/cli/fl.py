"""``privgate fl``: federated-learning audits — ``fl simulate`` (simulated) and ``fl audit`` (real checkpoints)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from privgate.cli.executor import connect, executor_options, executor_settings, models_option
from privgate.cli.guard import cap_threads, guard, out_console
from privgate.report.safe import clean

_ATTACKS_HELP = (
    "Comma-separated attacks: correctness, loss, confidence, entropy, modified_entropy (seed 004's metric attacks, "
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
                help="Most threads used at once (default 1; $PRIVGATE_THREADS).",
            ),
            click.option(
                "--cache-dir",
                envvar="PRIVGATE_CACHE_DIR",
                help="Reference-model cache (default .privgate-cache; 'off' for none).",
            ),
            click.option("--json", "json_path", type=click.Path(dir_okay=False), help="Write the JSON report here."),
            click.option("--html", "html_path", type=click.Path(dir_okay=False), help="Write the HTML report here."),
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
    """Federated learning: who in a federation can infer whose training data (seed 004's audit)."""


def _print(report: Any, quiet: bool) -> None:
    from rich.table import Table

    from privgate.report.safe import console as e
    from privgate.report.text import num

    out = out_console()
    if quiet:
        out.print(clean(report.summary), markup=False)
        return
    table = Table(title=f"final round, AUC of the strongest attack ({e(', '.join(report.attacks))})")
    for col in ("topology", "nodes × rounds", "distribution", "self", "1 hop", "others", "accuracy", "training"):
        table.add_column(col)
    for t in report.topologies:
        s = t.summary
        how = f"{t.training.get('engine', '')} {t.training.get('kernel', '')}".strip()
        seconds = t.seconds.get("training")
        table.add_row(
            e(t.topology.get("name")), f"{t.nodes} × {t.rounds}", e(t.distribution), num(s.get("self")),
            num(s.get("by_hop", {}).get("1")), num(s.get("others")), num(s.get("mean_accuracy_final")),
            e(f"{how} {seconds:.2f} s" if seconds is not None else how),
        )  # fmt: skip
    out.print(table)
    for c in report.checks:
        out.print(clean(f"{c.status.upper():>12}  {c.id}: {c.reason}"), markup=False, highlight=False)
    out.print(clean(report.summary), markup=False)


def _gate_report(report: Any, policy: Any) -> Any:
    """The federated audit as privgate's model-report type, for the JUnit and SARIF writers."""
    from privgate.report.model import Report

    return Report(
        privgate_version=report.privgate_version,
        verdict=report.verdict or "pass",
        summary=report.summary,
        policy=report.policy or {},
        target={"path": report.source.get("manifest"), "format": "federation"},
        data={},
        checks=report.checks,
        attacks=[],
        warnings=report.warnings,
        environment=report.environment,
        started=report.started,
        duration_s=report.duration_s,
    )


def _write(files: dict[Path, tuple[str, str | bytes]]) -> None:
    from privgate.io.staging import commit

    if files:
        commit(files)


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
@click.option("--distribution", default="iid", show_default=True, help="iid or dirichlet:ALPHA (seed 004: 0.1).")
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
@guard
def simulate_cmd(
    recipe: str, data: str, nodes: int, rounds: int, topologies: tuple[str, ...], distribution: str,
    local_epochs: int, holdout: float, population: float | None, reference_models: int, engine: str,
    label_column: str, save_dir: str | None, attacks: str | None, fpr: float, confidence: float, seed: int,
    threads: int | None, cache_dir: str | None, json_path: str | None, html_path: str | None, attacker: int,
    quiet: bool, executor: str | None = None, ray_address: str | None = None, models_per_task: int | None = None,
) -> int:  # fmt: skip
    """Simulate a decentralised federation and measure who can infer whose data, round by round."""
    from privgate.io.guards import Named, audit_inputs, check_outputs

    base = Path.cwd()
    inputs = audit_inputs(model=None, policy=None, recipe=recipe, config=None, base=base, data={"training": data})
    planned = [Named(Path(p), f"the {w} (--{w.split()[0].lower()})") for p, w in ((json_path, "JSON report"),
               (html_path, "HTML report")) if p]  # fmt: skip
    if save_dir:
        planned.append(Named(Path(save_dir), "the saved federation (--save)", folder=True))
    check_outputs(planned, inputs)
    from privgate.audits.federated.html import render_fl_html
    from privgate.audits.federated.run import DEFAULT_ATTACKS, Settings, simulate
    from privgate.inputs.data import load_dataset
    from privgate.inputs.entrypoints import load_recipe
    from privgate.options import RunOptions

    settings = Settings(
        attacks=_attacks(attacks) or DEFAULT_ATTACKS, fpr=fpr, confidence=confidence, reference_models=reference_models
    )
    rec = load_recipe(recipe, [base])
    ds = load_dataset(data, "training data", label_column, base)
    run = RunOptions(
        seed=seed, threads=threads, cache_dir=cache_dir, engine=engine,
        **executor_settings(executor, ray_address, models_per_task),
    )  # fmt: skip
    connect(run)
    outcome = simulate(
        rec, ds, list(topologies) or ["fully"], nodes=nodes, rounds=rounds, distribution=distribution,
        local_epochs=local_epochs, holdout_fraction=holdout, population_fraction=population, settings=settings,
        run=run, source={"recipe": recipe, "data": data, "nodes": nodes, "rounds": rounds},
    )  # fmt: skip
    report = outcome.report
    files: dict[Path, tuple[str, str | bytes]] = {}
    if json_path:
        files[Path(json_path)] = ("JSON report", report.to_json() + "\n")
    if html_path:
        files[Path(html_path)] = ("HTML report", render_fl_html(report, attacker))
    if save_dir:
        files.update(_saved(outcome, Path(save_dir), recipe))
    _write(files)
    _print(report, quiet)
    if save_dir and not quiet:
        out_console().print(clean(f"saved federation(s): {save_dir}/<topology>/federation.yaml"), markup=False)
    return 0


def _slug(name: str) -> str:
    keep = "".join(c if c.isalnum() or c in "-_." else "-" for c in Path(name).name)
    return keep.strip("-") or "topology"


def _saved(outcome: Any, folder: Path, recipe: str) -> dict[Path, tuple[str, str | bytes]]:
    """Every topology's federation in the manifest layout, under ``folder/<topology>/``."""
    from privgate.audits.federated.manifest import manifest_files

    split, ds = outcome.split, outcome.data
    out: dict[Path, tuple[str, str | bytes]] = {}
    for fed in outcome.federations:
        topo = fed.topology
        files = manifest_files(
            folder / _slug(topo.name), name=f"simulation-{_slug(topo.name)}", recipe=recipe,
            topology=topo.name if topo.kind != "file" else "edges", edges=topo.edges, node_names=list(topo.labels),
            node_data=[(ds.x[s], ds.y[s]) for s in split.shards], nonmembers=(ds.x[split.holdout], ds.y[split.holdout]),
            states=fed.trajectory.states,
            population=(ds.x[split.population], ds.y[split.population]) if len(split.population) else None,
        )  # fmt: skip
        out.update({p: ("saved federation file", data) for p, data in files.items()})
    return out


@fl.command("audit")
@click.argument("manifest", type=click.Path(dir_okay=False))
@click.option("--policy", "-p", "policy_spec", help="A policy with federated checks (built-in name or YAML file).")
@click.option("--junit", "junit_path", type=click.Path(dir_okay=False), help="Write a JUnit XML report.")
@click.option("--sarif", "sarif_path", type=click.Path(dir_okay=False), help="Write a SARIF 2.1.0 log.")
@_common
@guard
def audit_cmd(
    manifest: str, policy_spec: str | None, junit_path: str | None, sarif_path: str | None, attacks: str | None,
    fpr: float, confidence: float, seed: int, threads: int | None, cache_dir: str | None, json_path: str | None,
    html_path: str | None, attacker: int, quiet: bool, executor: str | None = None, ray_address: str | None = None,
    models_per_task: int | None = None,
) -> int:  # fmt: skip
    """Audit a real federation's checkpoints (federation.yaml) and, with --policy, gate it."""
    from privgate.audits.federated.manifest import load_manifest
    from privgate.errors import PolicyError
    from privgate.io.guards import Named, check_outputs

    m = load_manifest(manifest)
    policy = None
    if policy_spec:
        from privgate.audits.federated.decide import has_federated_checks
        from privgate.policy import load_policy

        policy = load_policy(policy_spec)
        if not has_federated_checks(policy):
            raise PolicyError(
                f"{policy_spec}: policy '{policy.name}' has no federated check; `privgate fl audit` decides checks "
                "with a 'federated:' block (docs/policies.md)."
            )
    inputs = [Named(m.path, "the federation manifest"), *[Named(p, "a node's data") for p in m.data]]
    inputs += [Named(p, "a checkpoint") for cps in m.checkpoints for p in cps] + [
        Named(m.nonmembers, "the non-members")
    ]
    if policy is not None and policy.source and Path(policy.source).suffix:
        inputs.append(Named(Path(policy.source), "the policy"))
    outputs = {"json": json_path, "html": html_path, "junit": junit_path, "sarif": sarif_path}
    check_outputs([Named(Path(p), f"the {k} report (--{k})") for k, p in outputs.items() if p], inputs)
    from privgate.audits.federated.audit import audit
    from privgate.audits.federated.html import render_fl_html
    from privgate.audits.federated.run import DEFAULT_ATTACKS, Settings
    from privgate.options import RunOptions

    names = list(_attacks(attacks) or DEFAULT_ATTACKS)
    if policy is not None:
        from privgate.audits.federated.decide import attacks_named

        names += [a for a in attacks_named(policy) if a not in names]
    settings = Settings(attacks=tuple(names), fpr=fpr, confidence=confidence)
    run = RunOptions(
        seed=seed, threads=threads, cache_dir=cache_dir, **executor_settings(executor, ray_address, models_per_task)
    )
    connect(run)
    outcome = audit(m, settings, run)
    report = outcome.report
    if policy is not None:
        from privgate.audits.federated.decide import decide_federation
        from privgate.decision import verdict_of
        from privgate.gate import _policy_facts

        report.checks = decide_federation(policy, outcome.federations[0])
        report.verdict = verdict_of(report.checks)  # type: ignore[assignment]
        report.policy = _policy_facts(policy)
        counts = {s: sum(c.status == s for c in report.checks) for s in ("fail", "inconclusive", "pass")}
        report.summary = (
            f"{report.verdict.upper()}: {len(report.checks)} checks ({counts['fail']} fail, {counts['inconclusive']} "
            f"inconclusive, {counts['pass']} pass) · " + report.summary
        )
    from privgate.report import render

    files: dict[Path, tuple[str, str | bytes]] = {}
    if json_path:
        files[Path(json_path)] = ("JSON report", report.to_json() + "\n")
    if html_path:
        files[Path(html_path)] = ("HTML report", render_fl_html(report, attacker))
    for fmt, p in (("junit", junit_path), ("sarif", sarif_path)):
        if p:
            files[Path(p)] = (f"{fmt} report", render(_gate_report(report, policy), fmt))
    _write(files)
    _print(report, quiet)
    return report.exit_code


__all__ = ["fl"]
