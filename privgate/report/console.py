"""Console report (rich): the checks table, the attacks table, the verdict line."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from privgate.report.exposed import view as exposed_view
from privgate.report.model import Report
from privgate.report.text import check_fpr_label, interval, num, rate_label, sig, target_notes

_STYLE = {"pass": "green", "fail": "bold red", "inconclusive": "yellow"}


def _num(v: float | None) -> str:
    return num(v, missing="—")


def _ci(ci: list[float | None] | None) -> str:
    return f" {interval(ci)}" if interval(ci) else ""


def print_report(report: Report, console: Console, verbose: bool = False) -> None:
    """Print the checks, the per-attack summary and the verdict."""
    pol = report.policy
    console.print(
        f"[bold]privgate[/] {report.privgate_version} · policy [bold]{pol['name']}[/] "
        f"({pol['sensitivity']}, release: {pol['release']}, {pol['confidence']:.1%} confidence, decision: "
        f"{pol['decision']})".replace(".0%", "%")
        + (" · extends " + " → ".join(p["name"] for p in pol["extends"]) if pol.get("extends") else "")
    )
    console.print(
        f"target {report.target.get('path')} ({report.target.get('format')}) · "
        f"{report.data['members']['n']} members, {report.data['nonmembers']['n']} non-members"
    )
    for line in target_notes(report):  # accuracy on members / non-members, output kind (privgate.inputs.sanity)
        console.print(line, markup=False)
    for w in report.warnings:
        console.print(f"[yellow]warning:[/] {w}")
    if report.checks:
        t = Table(title="Checks", show_lines=False)
        for col in ("check", "attack", "metric", "value [CI]", "max", "status"):
            t.add_column(col)
        for c in report.checks:
            attack = c.attack + (f" → {c.chosen_attack}" if c.chosen_attack else "")
            metric = c.metric + (f"@{c.fpr:g}" if c.fpr else "")
            fpr = check_fpr_label(c)
            t.add_row(
                c.id,
                attack,
                metric,
                _num(c.value) + _ci(c.ci) + (f" {fpr}" if fpr else ""),
                f"{c.threshold:g}",
                f"[{_STYLE[c.status]}]{c.status}[/]",
            )
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
            rates = [
                rate_label(p) if p.resolvable and p.measurable else f"[dim]{rate_label(p)}[/]" for p in a.tpr_at_fpr
            ]
            measured = a.extras.get("metrics") if a.auc is None else None  # a measurement (canary exposure …)
            first = (
                "; ".join(f"{m} {_num(v['value'])}{_ci(v['ci'])}" for m, v in measured.items())
                if measured
                else _num(a.auc) + _ci(a.auc_ci)
            )
            t.add_row(
                a.name,
                a.threat_model,
                first,
                *(rates + ["", ""])[:2],
                f"{a.n_members}/{a.n_nonmembers}",
                f"{a.seconds:.2f}",
            )
        console.print(t)
    exposed = exposed_view(report)
    if exposed is not None:
        t = Table(title=f"Most exposed members (by {exposed.attack})")
        for col in exposed.header:
            t.add_column(col)
        for row in exposed.rows:
            t.add_row(*(escape(v) for v in row))  # a language model's records are text: never rich markup
        console.print(t)
        console.print(exposed.intro, markup=False, style="dim")
    if report.remediation:
        print_remediation(report.remediation, console)
    style = _STYLE[report.verdict]
    console.print(f"[{style}]{report.summary}[/]")


# --------------------------------------------------------------------------- remediation


def _g(v: Any) -> str:
    return sig(v, missing="?")


def _check_cell(c: dict[str, Any]) -> str:
    return f"{_num(c.get('value'))} [{_STYLE.get(c.get('status', ''), 'white')}]{c.get('status', '?')}[/]"


def remediation_row(row: dict[str, Any]) -> str:
    """One line per tried ε, printed as the search runs (``privgate harden``)."""
    tr = row.get("training") or {}
    util = f"utility {_num(row.get('utility'))}" + ("" if row.get("utility_ok", True) else " [bold red]< floor[/]")
    checks = " · ".join(f"{c.get('id', '?')} {_check_cell(c)}" for c in row.get("checks", []))
    outcome = (
        "[green]accepted[/]"
        if row.get("accepted")
        else f"[{_STYLE.get(row.get('verdict', ''), 'white')}]{row.get('privacy', '?')}[/]"
    )
    return (
        f"  ε = {_g(row.get('epsilon')):<5} σ = {_g(tr.get('noise_multiplier'))}  C = {_g(tr.get('max_grad_norm'))}  "
        f"{tr.get('steps', '?')} steps  {_g(tr.get('seconds'))}s  {util}  {checks}  → {outcome}"
    )


def print_remediation(rem: dict[str, Any], console: Console) -> None:
    """The ε–utility–attack table of the DP-SGD search, the choice and the selection caveat."""
    rows = rem.get("rows") or []
    util = rem.get("utility") or {}
    orig = rem.get("original") or {}
    if rows:
        ids = [c["id"] for c in rows[0].get("checks", [])]
        t = Table(title=f"Remediation: DP-SGD ε search ({rem.get('strategy', '?')})")
        for col in ("ε", "ε spent", "σ", "utility", *ids, "verdict"):
            t.add_column(col)
        floor = util.get("floor")
        first = ([_check_cell(c) for c in orig.get("checks", [])] + [""] * len(ids))[: len(ids)]
        t.add_row("original", "∞", "—", _num(orig.get("utility")), *first, str(orig.get("verdict", "")))
        for r in rows:
            tr = r.get("training") or {}
            mark = " ✓" if r.get("accepted") else ""
            u = _num(r.get("utility")) + ("" if r.get("utility_ok", True) else " [red]<floor[/]")
            spent = "—" if tr.get("epsilon") is None else f"{_g(tr['epsilon'])} ({tr.get('accountant', '')})"
            cells = [_check_cell(c) for c in r.get("checks", [])]
            cells = (cells + [""] * len(ids))[: len(ids)]
            t.add_row(
                f"{_g(r.get('epsilon'))}{mark}",
                spent,
                _g(tr.get("noise_multiplier")),
                u,
                *cells,
                str(r.get("verdict", "")),
            )
        console.print(t)
        if isinstance(floor, (int, float)):
            console.print(f"  utility = accuracy on {util.get('data')}; floor {floor:.4f} ({util.get('rule')})")
    settings = rem.get("settings") or {}
    if settings:
        mode = f" ({settings['max_grad_norm_mode']})" if settings.get("max_grad_norm_mode") else ""
        start = f", from {settings['start']}" if settings.get("start") else ""
        console.print(
            f"  DP-SGD: {settings.get('epochs', '?')} epochs, batch {settings.get('batch_size', '?')}, clip C "
            f"= {_g(settings.get('max_grad_norm'))}{mode}, "
            f"δ = {_g(settings.get('delta'))}, accountant {settings.get('accountant', '?')}{start}"
        )
    for change in rem.get("architecture_changes") or []:
        console.print(f"  [yellow]architecture change:[/] {change}")
    style = {"hardened": "green", "no_epsilon": "bold red", "audit_failed": "bold red"}.get(
        rem.get("status", ""), "white"
    )
    if rem.get("status"):
        console.print(f"  [{style}]remediation {rem['status']}[/]: {rem.get('reason', '')}")
    audit = rem.get("audit") if isinstance(rem.get("audit"), dict) else {}
    if audit.get("summary") and rem.get("status") != "audit_failed":  # the claim next to the measured lower bound
        console.print(f"  [{_STYLE.get(audit.get('verdict', ''), 'white')}]{audit['summary']}[/]")
    output = rem.get("output") or {}
    if output:
        console.print(
            f"  hardened model: {output.get('torchscript')} (TorchScript), {output.get('state_dict')} (state_dict)"
        )
    if rem.get("selection_leakage"):
        console.print(f"  [dim]{rem['selection_leakage']}[/]")
