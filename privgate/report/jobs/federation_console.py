"""Console output of a federation's report (rich): per topology the headline AUCs, then the checks and summary."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from privgate.report.jobs.federation import FederationReport
from privgate.report.numbers import num
from privgate.report.safe import clean
from privgate.report.safe import console as e


def print_federation(report: FederationReport, console: Console) -> None:
    """The final round's AUC of the strongest attack by hop distance, per topology; each check; the summary line."""
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
    console.print(table)
    for c in report.checks:
        console.print(clean(f"{c.status.upper():>12}  {c.id}: {c.reason}"), markup=False, highlight=False)
    console.print(clean(report.summary), markup=False)


__all__ = ["print_federation"]
