"""How a :class:`~privgate.report.diff.Diff` is shown: GitHub Markdown (PR comment, job summary), JSON, console.

Every row names the metric, both values with their intervals, the change with
its interval (each end a one-sided 1 − α/m bound), the p-value of "worse by
more than the tolerance", the tolerance and the result, so a reviewer can judge
a regression without opening either report.
"""

from __future__ import annotations

import json
from typing import Any

from rich.console import Console
from rich.table import Table

from privgate.report.diff import (
    IMPROVED,
    NOT_COMPARED,
    NOT_SIGNIFICANT,
    REGRESSED,
    WITHIN,
    Diff,
    Row,
    Side,
    p_text,
    signed,
)
from privgate.report.labels import verdict_badge
from privgate.report.markdown import Md, cell, code
from privgate.report.model import Report
from privgate.report.numbers import finite_or_none, num
from privgate.report.safe import console as escape
from privgate.report.safe import md_code, md_text

#: JSON output: ``format`` and ``version`` change only when a field is removed or changes meaning.
DIFF_FORMAT, DIFF_VERSION = "privgate-diff", 1

_ICON = {
    REGRESSED: "❌ regressed",
    IMPROVED: "✅ improved",
    WITHIN: "within tolerance",
    NOT_SIGNIFICANT: "not significant",
    NOT_COMPARED: "not compared",
}
_STYLE = {REGRESSED: "bold red", IMPROVED: "green", WITHIN: "", NOT_SIGNIFICANT: "yellow", NOT_COMPARED: "dim"}


def side_text(s: Side | None) -> str:
    """``0.547 [0.493, 0.600]``; for ε ``ε̂ 2.310 (≥ 1.027)``; ``n/a`` when the report has no number."""
    if s is None:
        return "absent"
    if s.value is None:
        return "n/a"
    if s.lower_bound is not None:
        return f"ε̂ {num(s.value)} (≥ {num(s.lower_bound)})"
    ci = f" [{num(s.ci[0])}, {num(s.ci[1])}]" if s.ci and s.ci[0] is not None and s.ci[1] is not None else ""
    return f"{num(s.value)}{ci}"


def change_text(r: Row) -> str:
    """``+0.367 [+0.278, +0.443]``, or empty for a row that was not compared."""
    if r.change is None or r.change_ci is None:
        return ""
    return f"{signed(r.change)} [{signed(r.change_ci[0])}, {signed(r.change_ci[1])}]"


def attack_text(r: Row) -> str:
    """The attack behind each side: ``loss`` or ``loss → rmia`` when a 'best' check changed its attack."""
    b, n = (r.base.attack if r.base else None), (r.new.attack if r.new else None)
    if b == n or b is None or n is None:
        return b or n or ""
    return f"{b} → {n}"


def budget_text(d: Diff) -> str:
    """The error budget in one sentence."""
    m = d.comparisons
    if not m:
        return "no metric had numbers in both reports, so nothing was tested"
    return (
        f"α = {d.alpha:.3g} (1 − the policy's confidence) shared by {m} comparisons (Bonferroni): each change is "
        f"tested one-sided at α/m = {d.level:.2g}, and each end of a change interval is a one-sided "
        f"{(1 - d.level) * 100:.4g}% bound"
    )


def _who(rep: Report, name: str) -> str:
    tgt = rep.target or {}
    sha = tgt.get("sha256")
    digest = f", sha256 {md_code(str(sha)[:12] + '…')}" if sha else ""
    return f"{md_code(name)} (target {md_code(tgt.get('path'))}{digest}, {verdict_badge(rep.verdict)})"


def _data_text(d: Diff) -> str:
    data = d.new.data or {}
    sha = data.get("sha256")
    n = f"{data.get('members', {}).get('n', '?')} members / {data.get('nonmembers', {}).get('n', '?')} non-members"
    return f"same audit data ({md_text(n)}{', sha256 ' + md_code(str(sha)[:12] + '…') if sha else ''})"


def _table(header: list[str], rows: list[list[Any]]) -> list[str]:
    out = ["| " + " | ".join(cell(h) for h in header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return out


def render_diff_markdown(d: Diff) -> str:
    """The diff as GitHub-flavoured Markdown, for a pull-request comment and ``$GITHUB_STEP_SUMMARY``."""
    head = "❌ REGRESSION" if d.regressions else "✅ NO REGRESSION"
    lines = [
        f"## privgate diff {head} · policy {md_code(d.new.policy.get('name'))}",
        "",
        f"**{md_text(d.summary)}**",
        "",
    ]
    lines += [f"base {_who(d.base, d.base_name)} → new {_who(d.new, d.new_name)} · {_data_text(d)}", ""]
    lines += [md_text(budget_text(d) + "."), ""]
    checks = [r for r in d.rows if r.kind == "check"]
    attacks = [r for r in d.rows if r.kind == "attack"]
    header = ["result", "metric", "base [CI]", "new [CI]", "change [interval]", "p", "tolerance"]
    if checks:
        lines += ["### Checks", ""]
        lines += _table(
            ["result", "check", "attack", *header[1:]],
            [
                [
                    _ICON[r.status],
                    code(r.id),
                    attack_text(r),
                    r.metric,
                    Md(side_text(r.base)),
                    Md(side_text(r.new)),
                    Md(change_text(r)),
                    p_text(r.p_value),
                    f"{r.tolerance:g}" if r.tolerance is not None else "",
                ]
                for r in checks
            ],
        )
        lines.append("")
    if attacks:
        lines += ["### Attacks (AUC, evaluation split)", ""]
        lines += _table(
            ["result", "attack", *header[1:]],
            [
                [
                    _ICON[r.status],
                    r.id,
                    r.metric,
                    Md(side_text(r.base)),
                    Md(side_text(r.new)),
                    Md(change_text(r)),
                    p_text(r.p_value),
                    f"{r.tolerance:g}" if r.tolerance is not None else "",
                ]
                for r in attacks
            ],
        )
        lines.append("")
    lines += ["<details><summary>Reasons and methods</summary>", ""]
    lines += [  # Markdown text only, never raw HTML, inside <details> (privgate.report.safe)
        f"- **{md_text(r.id)}** ({md_text(r.metric)}, {r.status}{', ' + md_text(r.method) if r.method else ''}): "
        f"{md_text(r.reason)}"
        for r in d.rows
    ]
    lines += ["", "</details>", ""]
    if d.notes:
        lines += ["### Notes", ""] + [f"- {md_text(n)}" for n in d.notes] + [""]
    return "\n".join(lines) + "\n"


def _side_json(s: Side | None) -> dict[str, Any] | None:
    if s is None:
        return None
    out: dict[str, Any] = {
        "value": s.value,
        "ci": list(s.ci) if s.ci else None,
        "confidence": s.confidence,
        "attack": s.attack,
        "status": s.status,
    }
    if s.lower_bound is not None:
        out["lower_bound"] = s.lower_bound
    if s.n is not None:
        out["n_members"], out["n_nonmembers"] = s.n
    return out


def diff_dict(d: Diff) -> dict[str, Any]:
    """The diff as plain data (the JSON output)."""

    def who(rep: Report, name: str) -> dict[str, Any]:
        tgt = rep.target or {}
        return {
            "file": name,
            "verdict": rep.verdict,
            "target": {"path": tgt.get("path"), "sha256": tgt.get("sha256")},
            "privgate_version": rep.privgate_version,
            "started": rep.started,
            "seed": rep.environment.get("seed"),
        }

    rows = []
    for r in d.rows:
        rows.append(
            {
                "kind": r.kind,
                "id": r.id,
                "metric": r.metric,
                "status": r.status,
                "reason": r.reason,
                "method": r.method or None,
                "tolerance": r.tolerance,
                "change": finite_or_none(r.change),
                "change_ci": [finite_or_none(v) for v in r.change_ci] if r.change_ci else None,
                "p_value": r.p_value,
                "base": _side_json(r.base),
                "new": _side_json(r.new),
            }
        )
    return {
        "format": DIFF_FORMAT,
        "version": DIFF_VERSION,
        "result": "regression" if d.regressions else "no regression",
        "exit_code": d.exit_code,
        "summary": d.summary,
        "base": who(d.base, d.base_name),
        "new": who(d.new, d.new_name),
        "policy": d.new.policy.get("name"),
        "data_sha256": (d.new.data or {}).get("sha256"),
        "alpha": d.alpha,
        "comparisons": d.comparisons,
        "level": d.level,
        "tolerances": d.tolerances,
        "rows": rows,
        "notes": list(d.notes),
    }


def render_diff_json(d: Diff) -> str:
    return json.dumps(diff_dict(d), indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def print_diff(d: Diff, console: Console, verbose: bool = False) -> None:
    """The diff on the console: both tables, the reasons of what changed, the notes, then the one-line result."""
    console.print(
        f"[bold]privgate diff[/] · policy [bold]{escape(str(d.new.policy.get('name')))}[/] · "
        f"base {escape(d.base_name)} ({d.base.verdict}) → new {escape(d.new_name)} ({d.new.verdict})"
    )
    console.print(escape(budget_text(d)), highlight=False)
    for kind, title in (("check", "Checks"), ("attack", "Attacks (AUC)")):
        rows = [r for r in d.rows if r.kind == kind]
        if not rows:
            continue
        t = Table(title=title)
        for col in (
            "check" if kind == "check" else "attack",
            "metric",
            "base [CI]",
            "new [CI]",
            "change [interval]",
            "p",
            "tol",
            "result",
        ):
            t.add_column(escape(col))
        for r in rows:
            style = _STYLE[r.status]
            result = f"[{style}]{r.status}[/]" if style else r.status
            label = r.id + (f" ({attack_text(r)})" if kind == "check" and attack_text(r) else "")
            t.add_row(
                escape(label),
                escape(r.metric),
                escape(side_text(r.base)),
                escape(side_text(r.new)),
                escape(change_text(r)),
                p_text(r.p_value),
                f"{r.tolerance:g}" if r.tolerance is not None else "",
                result,
            )
        console.print(t)
    for r in d.rows:
        if verbose or r.status in (REGRESSED, NOT_SIGNIFICANT, IMPROVED):
            style = _STYLE[r.status] or "bold"
            console.print(f"  [{style}]{escape(r.id)}[/] {escape(r.metric)}: {escape(r.reason)}", highlight=False)
    for n in d.notes:
        console.print(f"[dim]note:[/] {escape(n)}", highlight=False)
    console.print(f"[{'bold red' if d.regressions else 'bold green'}]{escape(d.summary)}[/]", highlight=False)


__all__ = [
    "DIFF_FORMAT",
    "DIFF_VERSION",
    "attack_text",
    "budget_text",
    "change_text",
    "diff_dict",
    "p_text",
    "print_diff",
    "render_diff_json",
    "render_diff_markdown",
    "side_text",
]
