"""GitHub-flavoured Markdown: the verdict, the checks table, the attacks table, the remediation table.

Written for ``$GITHUB_STEP_SUMMARY`` and pull-request comments: tables only use
GFM syntax, reasons go in a collapsed ``<details>`` block so the summary stays
short. Every string from the report goes through :mod:`privgate.report.safe`
(``md_text``, ``md_code``, ``md_cell``): a file name with a backtick, an HTML
tag, an image or a ``|`` shows as typed and cannot break a row.
"""

from __future__ import annotations

from typing import Any

from privgate.report.exposed import view as exposed_view
from privgate.report.jobs.markdown_sections import job_section
from privgate.report.labels import (
    attack_label,
    check_fpr_label,
    interval,
    metric_label,
    origin_label,
    plain,
    rate_label,
    target_notes,
    verdict_badge,
)
from privgate.report.model import BaseReport, Report
from privgate.report.numbers import num
from privgate.report.remediation import view as remediation_view
from privgate.report.safe import md_cell, md_code, md_text

_STATUS = {"pass": "✅ pass", "fail": "❌ fail", "inconclusive": "⚠️ inconclusive"}


class Md(str):
    """Markdown privgate wrote itself (a code span made by :func:`md_code`, a number): put into a cell as it is."""


def cell(value: Any) -> str:
    """Text safe inside a GFM table cell: :func:`privgate.report.safe.md_cell`, unless it is already :class:`Md`."""
    return value if isinstance(value, Md) else md_cell(value)


def code(value: Any) -> Md:
    """A table cell showing ``value`` as a code span."""
    return Md(md_code(value, in_table=True))


def _table(header: list[str], rows: list[list[Any]]) -> list[str]:
    out = ["| " + " | ".join(cell(h) for h in header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return out


def _facts(report: BaseReport) -> list[str]:
    """The line under the headline: what was audited, on what, and the run's provenance."""
    if not isinstance(report, Report):
        tgt = report.target
        return [
            f"{md_text(report.job)}: {md_code(tgt.get('path'))} ({md_text(tgt.get('format'))})",
            f"seed {md_text(report.environment.get('seed'))}",
            f"privgate {md_text(report.privgate_version)}",
            f"{report.duration_s:.1f} s",
        ]
    pol = report.policy
    tgt = report.target
    data = report.data or {}
    sha = tgt.get("sha256")
    conf = pol.get("confidence", 0.95)
    conf = f"{conf:.1%}".replace(".0%", "%") if isinstance(conf, (int, float)) else md_text(conf)
    return [
        f"target {md_code(tgt.get('path'))} ({md_text(tgt.get('format'))}"
        f"{', sha256 ' + md_code(str(sha)[:12] + '…') if sha else ''})",
        md_text(
            f"{data.get('members', {}).get('n', '?')} members / {data.get('nonmembers', {}).get('n', '?')} non-members"
        ),
        f"{md_text(pol.get('sensitivity'))}, release: {md_text(pol.get('release'))}, {conf} "
        f"confidence, decision: {md_text(pol.get('decision'))}"
        + (
            " (extends " + " → ".join(md_code(p.get("name")) for p in pol["extends"]) + ")"
            if pol.get("extends")
            else ""
        ),
        f"seed {md_text(report.environment.get('seed'))}",
        f"privgate {md_text(report.privgate_version)}",
        f"{report.duration_s:.1f} s",
    ]


def _checks(report: BaseReport) -> list[str]:
    """The checks' table, then their reasons folded under ``<details>``."""
    if not report.checks:
        return ["The policy requires no checks.", ""]
    lines = ["### Checks", ""]
    rows = []
    for c in report.checks:
        ci = interval(c.ci)
        value = f"{num(c.value)} {ci} {check_fpr_label(c)}".strip()
        rows.append(
            [
                _STATUS[c.status],
                code(c.id),
                attack_label(c),
                metric_label(c),
                value,
                Md(f"≤ {c.threshold:g}"),
                Md(f"{c.n_members}/{c.n_nonmembers}"),
            ]
        )
    lines += _table(["status", "check", "attack", "metric", "value [CI]", "max", "n in/out"], rows)
    lines += ["", "<details><summary>Reasons</summary>", ""]
    lines += [  # Markdown text only, never raw HTML, inside <details> (privgate.report.safe)
        f"- **{md_text(c.id)}** "
        f"({c.status}{', ' + md_text(origin_label(c, report)) if origin_label(c, report) else ''}): "
        f"{md_text(c.reason)}"
        for c in report.checks
    ]
    return [*lines, "", "</details>", ""]


def _attacks(report: Report) -> list[str]:
    """The attacks' numbers on the evaluation split (or why one did not run)."""
    if not report.attacks:
        return []
    rows = []
    for a in report.attacks:
        if a.status != "ran":
            rows.append([a.name, a.threat_model, f"{a.status}: {a.reason or ''}", "", "", "", "", ""])
            continue
        rates = {round(p.fpr, 6): rate_label(p) for p in a.tpr_at_fpr}
        rows.append(
            [
                a.name,
                a.threat_model,
                f"{num(a.auc)} {interval(a.auc_ci)}".strip(),
                f"{num(a.accuracy)} {interval(a.accuracy_ci)}".strip(),
                rates.get(0.001, ""),
                rates.get(0.01, ""),
                f"{a.n_members}/{a.n_nonmembers}",
                f"{a.seconds:.2f}",
            ]
        )
    header = ["attack", "access", "AUC [CI]", "accuracy [CI]", "TPR @ 0.1% FPR", "TPR @ 1% FPR", "n in/out", "s"]
    return ["### Attacks (evaluation split)", "", *_table(header, rows), ""]


def _exposed(report: BaseReport) -> list[str]:
    exposed = exposed_view(report)
    if exposed is None:
        return []
    lines = [f"### Most exposed members (by {md_code(exposed.attack)})", "", md_text(exposed.intro), ""]
    return [*lines, *_table(exposed.header, exposed.rows), ""]


def _remediation(report: Report) -> list[str]:
    """The ε search: the chosen ε, its steps, and the hardened model's DP statement."""
    rem = remediation_view(report)
    if rem is None:
        return []
    lines = [f"### {md_text(rem.title)}", ""]
    head = (
        f"Chosen ε: **{rem.chosen_epsilon:g}**"
        if rem.chosen_epsilon is not None
        else md_text(rem.head or "No ε was chosen.")
    )
    extra = [f"{md_text(k)}: {md_text(plain(v))}" for k, v in rem.facts.items()]
    lines += [" · ".join([head, *extra]), ""]
    lines += [f"**{md_text(rem.epsilon_line)}**", ""] if rem.epsilon_line else []
    lines += [f"*{md_text(k.replace('_', ' '))}*: {md_text(v)}\n" for k, v in rem.notes.items()]
    if rem.rows:
        cols = rem.columns
        lines += _table(
            ["ε" if k == rem.epsilon_key else k for k in cols], [[plain(r.get(k)) for k in cols] for r in rem.rows]
        )
        lines.append("")
    if rem.statement:  # Ponomareva et al. 2023, arXiv 2303.00654, §5.5
        lines += (
            [f"#### {md_text(rem.statement_title)}", ""] + _table(["", ""], [list(r) for r in rem.statement]) + [""]
        )
        if rem.hyperparameters:
            lines += _table(["hyper-parameter", "value", "source"], [list(h) for h in rem.hyperparameters]) + [""]
        lines += [f"- {md_text(c)}" for c in rem.caveats] + [""]
    return lines


def render_markdown(report: BaseReport) -> str:
    """The report as a GitHub-flavoured Markdown summary (any job: its own section after the checks)."""
    what = "policy" if isinstance(report, Report) else "claim" if report.job.startswith("audit-") else "policy"
    lines = [
        f"## privgate {verdict_badge(report.verdict)} · {what} {md_code(report.policy.get('name'))}",
        "",
        f"**{md_text(report.summary)}**",
        "",
    ]
    lines += [" · ".join(_facts(report)), ""]
    lines += [line for note in target_notes(report) for line in (md_text(note), "")]
    lines += _checks(report)
    lines += _attacks(report) if isinstance(report, Report) else job_section(report, _table)
    lines += _exposed(report)
    lines += _remediation(report) if isinstance(report, Report) else []
    if report.warnings:
        lines += ["### Warnings", ""] + [f"- {md_text(w)}" for w in report.warnings] + [""]
    return "\n".join(lines) + "\n"


__all__ = ["Md", "cell", "code", "render_markdown"]
