"""The Markdown section of each job that is not a model check: the claim audits and federations.

:func:`privgate.report.markdown.render_markdown` writes the part every report
shares (verdict, facts, checks, warnings); this adds what only one job has —
the LDP audit's claims, the one-run DP-SGD audit's guesses, a federation's
topologies — from the report's typed sections. Text from the report goes through
:mod:`privgate.report.safe` (the table cells through the shared table writer).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from privgate.report.model import BaseReport
from privgate.report.numbers import num
from privgate.report.safe import md_code, md_text

Table = Callable[[list[str], list[list[Any]]], list[str]]


def _eps(v: float | None) -> str:
    return "∞" if v is None else f"{v:.3f}"


def _ldp(report: Any, table: Table) -> list[str]:
    lines = [
        "### Claims (Matsumoto et al. 2022, arXiv 2206.09122)",
        "",
        f"K = {report.trials:,} trials per cell · {report.cells} cells at {report.confidence:.0%} jointly · "
        f"clip L = {report.clip:g} · mechanism {md_code(report.mechanism.get('name'))}",
        "",
    ]
    rows = [
        [f"{c.claimed_epsilon:g}", _eps(c.max_epsilon_lb), c.strongest or "", _eps(c.max_provable_epsilon), c.status]
        for c in report.claims
    ]
    return [*lines, *table(["claimed ε", "ε lower bound", "strongest", "most provable", "status"], rows), ""]


def _dpsgd(report: Any, table: Table) -> list[str]:
    rows = [[a.guesses, a.correct, _eps(a.epsilon_lb)] for a in report.attempts]
    return [
        "### One-run audit (Steinke, Nasr & Jagielski 2023, arXiv 2305.08846)",
        "",
        f"{md_text(report.mode.replace('_', '-'))} · {report.canaries} canaries ({report.included} included) · "
        f"ε ≥ {report.epsilon_lb:.3f} at δ = {report.delta:g} · most provable {report.max_provable_epsilon:.3f} · "
        f"training {report.training_seconds:.1f} s",
        "",
        *table(["guesses", "correct", "ε lower bound"], rows),
        "",
    ]


def _federation(report: Any, table: Table) -> list[str]:
    rows = []
    for t in report.topologies:
        s = t.summary
        rows.append(
            [
                t.topology.get("name"),
                f"{t.nodes} × {t.rounds}",
                t.distribution,
                num(s.get("self")),
                num(s.get("by_hop", {}).get("1")),
                num(s.get("others")),
                num(s.get("mean_accuracy_final")),
            ]
        )
    header = ["topology", "nodes × rounds", "distribution", "self", "1 hop", "others", "accuracy"]
    title = f"### Final round: AUC of the strongest attack ({md_text(', '.join(report.attacks))})"
    return [title, "", *table(header, rows), ""]


_SECTIONS: dict[str, Callable[[Any, Table], list[str]]] = {
    "audit-ldp": _ldp,
    "audit-dpsgd": _dpsgd,
    "fl-audit": _federation,
    "fl-simulate": _federation,
}


def job_section(report: BaseReport, table: Table) -> list[str]:
    """Markdown lines of ``report``'s own section (none for a job without one)."""
    section = _SECTIONS.get(report.job)
    return section(report, table) if section is not None else []


__all__ = ["job_section"]
