"""Console report (rich): the checks table, the attacks table, the verdict line.

Every string from the report goes through :func:`privgate.report.safe.console`
(rich markup escaped, terminal control characters removed): a policy named
``team[/bogus]`` prints as typed, and an ESC byte in a YAML string never
reaches the terminal.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from privgate.report.exposed import view as exposed_view
from privgate.report.model import Report
from privgate.report.safe import console as e
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
        f"[bold]privgate[/] {e(report.privgate_version)} · policy [bold]{e(pol.get('name'))}[/] "
        f"({e(pol.get('sensitivity'))}, release: {e(pol.get('release'))}, {_pct(pol.get('confidence'))} confidence, "
        f"decision: {e(pol.get('decision'))})"
        + (" · extends " + " → ".join(e(p.get("name")) for p in pol["extends"]) if pol.get("extends") else "")
    )
    console.print(
        f"target {e(report.target.get('path'))} ({e(report.target.get('format'))}) · "
        f"{e(report.data['members']['n'])} members, {e(report.data['nonmembers']['n'])} non-members"
    )
    for line in target_notes(report):  # accuracy on members / non-members, output kind (privgate.inputs.sanity)
        console.print(e(line))
    for w in report.warnings:
        console.print(f"[yellow]warning:[/] {e(w)}")
    if report.checks:
        t = Table(title="Checks", show_lines=False)
        for col in ("check", "attack", "metric", "value [CI]", "max", "status"):
            t.add_column(col)
        for c in report.checks:
            attack = c.attack + (f" → {c.chosen_attack}" if c.chosen_attack else "")
            metric = c.metric + (f"@{c.fpr:g}" if c.fpr else "")
            fpr = check_fpr_label(c)
            t.add_row(
                e(c.id),
                e(attack),
                e(metric),
                e(_num(c.value) + _ci(c.ci) + (f" {fpr}" if fpr else "")),
                f"{c.threshold:g}",
                f"[{_STYLE[c.status]}]{c.status}[/]",
            )
        console.print(t)
        for c in report.checks:
            if c.status != "pass" or verbose:
                console.print(f"  [{_STYLE[c.status]}]{e(c.id)}[/]: {e(c.reason)}")
    if report.attacks:
        t = Table(title="Attacks (evaluation split)")
        for col in ("attack", "access", "AUC [CI]", "TPR@0.1% FPR", "TPR@1% FPR", "n in/out", "s"):
            t.add_column(col)
        for a in report.attacks:
            if a.status != "ran":
                t.add_row(e(a.name), e(a.threat_model), f"[yellow]{e(a.status)}[/]: {e(a.reason)}", "", "", "", "")
                continue
            rates = [
                e(rate_label(p)) if p.resolvable and p.measurable else f"[dim]{e(rate_label(p))}[/]"
                for p in a.tpr_at_fpr
            ]
            t.add_row(
                e(a.name),
                e(a.threat_model),
                _num(a.auc) + e(_ci(a.auc_ci)),
                *rates,
                f"{a.n_members}/{a.n_nonmembers}",
                f"{a.seconds:.2f}",
            )
        console.print(t)
    exposed = exposed_view(report)
    if exposed is not None:
        t = Table(title=f"Most exposed members (by {e(exposed.attack)})")
        for col in exposed.header:
            t.add_column(e(col))
        for row in exposed.rows:
            t.add_row(*(e(v) for v in row))
        console.print(t)
        console.print(e(exposed.intro), style="dim")
    if report.remediation:
        print_remediation(report.remediation, console)
    style = _STYLE[report.verdict]
    console.print(f"[{style}]{e(report.summary)}[/]")


# --------------------------------------------------------------------------- remediation


def _pct(v: Any) -> str:
    return f"{v:.1%}".replace(".0%", "%") if isinstance(v, (int, float)) else e(v)


def _g(v: Any) -> str:
    return sig(v, missing="?")


def _check_cell(c: dict[str, Any]) -> str:
    return f"{_num(c.get('value'))} [{_STYLE.get(c.get('status', ''), 'white')}]{e(c.get('status', '?'))}[/]"


def remediation_row(row: dict[str, Any]) -> str:
    """One line per tried ε, printed as the search runs (``privgate harden``)."""
    tr = row.get("training") or {}
    util = f"utility {_num(row.get('utility'))}" + ("" if row.get("utility_ok", True) else " [bold red]< floor[/]")
    checks = " · ".join(f"{e(c.get('id', '?'))} {_check_cell(c)}" for c in row.get("checks", []))
    outcome = (
        "[green]accepted[/]"
        if row.get("accepted")
        else f"[{_STYLE.get(row.get('verdict', ''), 'white')}]{e(row.get('privacy', '?'))}[/]"
    )
    return (
        f"  ε = {_g(row.get('epsilon')):<5} σ = {_g(tr.get('noise_multiplier'))}  C = {_g(tr.get('max_grad_norm'))}  "
        f"{e(tr.get('steps', '?'))} steps  {_g(tr.get('seconds'))}s  {util}  {checks}  → {outcome}"
    )


def print_remediation(rem: dict[str, Any], console: Console) -> None:
    """The ε–utility–attack table of the DP-SGD search, the choice and the selection caveat."""
    rows = rem.get("rows") or []
    util = rem.get("utility") or {}
    orig = rem.get("original") or {}
    if rows:
        ids = [c["id"] for c in rows[0].get("checks", [])]
        t = Table(title=f"Remediation: DP-SGD ε search ({e(rem.get('strategy', '?'))})")
        for col in ("ε", "ε spent", "σ", "utility", *ids, "verdict"):
            t.add_column(e(col))
        floor = util.get("floor")
        first = ([_check_cell(c) for c in orig.get("checks", [])] + [""] * len(ids))[: len(ids)]
        t.add_row("original", "∞", "—", _num(orig.get("utility")), *first, e(orig.get("verdict", "")))
        for r in rows:
            tr = r.get("training") or {}
            mark = " ✓" if r.get("accepted") else ""
            u = _num(r.get("utility")) + ("" if r.get("utility_ok", True) else " [red]<floor[/]")
            spent = "—" if tr.get("epsilon") is None else f"{_g(tr['epsilon'])} ({e(tr.get('accountant', ''))})"
            cells = [_check_cell(c) for c in r.get("checks", [])]
            cells = (cells + [""] * len(ids))[: len(ids)]
            t.add_row(
                f"{_g(r.get('epsilon'))}{mark}",
                spent,
                _g(tr.get("noise_multiplier")),
                u,
                *cells,
                e(r.get("verdict", "")),
            )
        console.print(t)
        if isinstance(floor, (int, float)):
            console.print(f"  utility = accuracy on {e(util.get('data'))}; floor {floor:.4f} ({e(util.get('rule'))})")
    settings = rem.get("settings") or {}
    if settings:
        mode = f" ({e(settings['max_grad_norm_mode'])})" if settings.get("max_grad_norm_mode") else ""
        start = f", from {e(settings['start'])}" if settings.get("start") else ""
        console.print(
            f"  DP-SGD: {e(settings.get('epochs', '?'))} epochs, batch {e(settings.get('batch_size', '?'))}, clip C "
            f"= {_g(settings.get('max_grad_norm'))}{mode}, "
            f"δ = {_g(settings.get('delta'))}, accountant {e(settings.get('accountant', '?'))}{start}"
        )
    for change in rem.get("architecture_changes") or []:
        console.print(f"  [yellow]architecture change:[/] {e(change)}")
    style = {"hardened": "green", "no_epsilon": "bold red", "audit_failed": "bold red"}.get(
        rem.get("status", ""), "white"
    )
    if rem.get("status"):
        console.print(f"  [{style}]remediation {e(rem['status'])}[/]: {e(rem.get('reason', ''))}")
    audit = rem.get("audit") if isinstance(rem.get("audit"), dict) else {}
    if audit.get("summary") and rem.get("status") != "audit_failed":  # the claim next to the measured lower bound
        console.print(f"  [{_STYLE.get(audit.get('verdict', ''), 'white')}]{e(audit['summary'])}[/]")
    output = rem.get("output") or {}
    if output:
        console.print(
            f"  hardened model: {e(output.get('torchscript'))} (TorchScript), "
            f"{e(output.get('state_dict'))} (state_dict)"
        )
    if rem.get("selection_leakage"):
        console.print(f"  [dim]{e(rem['selection_leakage'])}[/]")
