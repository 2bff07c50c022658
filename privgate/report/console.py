"""Console report (rich): the checks table, the attacks table, the verdict line."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from privgate.report.model import Report

_STYLE = {"pass": "green", "fail": "bold red", "inconclusive": "yellow"}


def _num(v: float | None) -> str:
    return "—" if v is None else f"{v:.3f}"


def _ci(ci: list[float | None] | None) -> str:
    if not ci or ci[0] is None or ci[1] is None:
        return ""
    return f" [{ci[0]:.3f}, {ci[1]:.3f}]"


def print_report(report: Report, console: Console, verbose: bool = False) -> None:
    """Print the checks, the per-attack summary and the verdict."""
    pol = report.policy
    console.print(
        f"[bold]privgate[/] {report.privgate_version} · policy [bold]{pol['name']}[/] "
        f"({pol['sensitivity']}, release: {pol['release']}, {pol['confidence']:.0%} confidence, decision: {pol['decision']})"
    )
    console.print(f"target {report.target.get('path')} ({report.target.get('format')}) · "
                  f"{report.data['members']['n']} members, {report.data['nonmembers']['n']} non-members")
    for w in report.warnings:
        console.print(f"[yellow]warning:[/] {w}")
    if report.checks:
        t = Table(title="Checks", show_lines=False)
        for col in ("check", "attack", "metric", "value [CI]", "max", "status"):
            t.add_column(col)
        for c in report.checks:
            attack = c.attack + (f" → {c.chosen_attack}" if c.chosen_attack else "")
            metric = c.metric + (f"@{c.fpr:g}" if c.fpr else "")
            t.add_row(c.id, attack, metric, _num(c.value) + _ci(c.ci), f"{c.threshold:g}", f"[{_STYLE[c.status]}]{c.status}[/]")
        console.print(t)
        for c in report.checks:
            if c.status != "pass" or verbose:
                console.print(f"  [{_STYLE[c.status]}]{c.id}[/]: {c.reason}")
    if report.attacks:
        t = Table(title="Attacks (evaluation split)")
        for col in ("attack", "access", "AUC [CI]", "TPR@0.1% FPR", "TPR@1% FPR", "n in/out", "s"):
            t.add_column(col)
        for a in report.attacks:
            if a.status != "ran":
                t.add_row(a.name, a.threat_model, f"[yellow]{a.status}[/]: {a.reason}", "", "", "", "")
                continue
            rates = []
            for p in a.tpr_at_fpr:
                rates.append(_num(p.tpr) + _ci(p.ci) if p.resolvable else "[dim]too few non-members[/]")
            t.add_row(a.name, a.threat_model, _num(a.auc) + _ci(a.auc_ci), *rates, f"{a.n_members}/{a.n_nonmembers}", f"{a.seconds:.2f}")
        console.print(t)
    style = _STYLE[report.verdict]
    console.print(f"[{style}]{report.summary}[/]")
