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
from privgate.report.labels import check_fpr_label, interval, rate_label, target_notes
from privgate.report.model import Report
from privgate.report.numbers import num, sig
from privgate.report.remediation_section import CheckCell, RemediationSection, SearchRow, setting_text
from privgate.report.safe import console as e

_STYLE = {"pass": "green", "fail": "bold red", "inconclusive": "yellow"}
#: The widest the exposed-members table's label (or text) and "also flagged by" columns may be, by column.
_EXPOSED_WIDTHS = {2: 24, 7: 30}


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
            measured = a.extras.get("metrics") if a.auc is None else None  # a measurement (canary exposure …)
            first = (
                "; ".join(f"{m} {_num(v['value'])}{_ci(v['ci'])}" for m, v in measured.items())
                if measured
                else _num(a.auc) + _ci(a.auc_ci)
            )
            t.add_row(
                e(a.name),
                e(a.threat_model),
                e(first),
                *(rates + ["", ""])[:2],
                f"{a.n_members}/{a.n_nonmembers}",
                f"{a.seconds:.2f}",
            )
        console.print(t)
    exposed = exposed_view(report)
    if exposed is not None:
        t = Table(title=f"Most exposed members (by {e(exposed.attack)})", caption=e(exposed.caption))
        for i, col in enumerate(exposed.header):  # within the console's width: labels cut, lists of attacks folded
            t.add_column(e(col), max_width=_EXPOSED_WIDTHS.get(i), overflow="ellipsis" if i == 2 else "fold")
        for row in exposed.rows:
            t.add_row(*(e(v) for v in row))  # a language model's records are text: never rich markup
        console.print(t)
        console.print(e(exposed.intro), style="dim", soft_wrap=False)
    if report.remediation is not None:
        from privgate.report.remediation import section_of

        print_remediation(section_of(report), console)
    style = _STYLE[report.verdict]
    console.print(f"[{style}]{e(report.summary)}[/]")


# --------------------------------------------------------------------------- remediation


def _pct(v: Any) -> str:
    return f"{v:.1%}".replace(".0%", "%") if isinstance(v, (int, float)) else e(v)


def _g(v: Any) -> str:
    return sig(v, missing="?")


def _check_cell(c: CheckCell) -> str:
    return f"{_num(c.value)} [{_STYLE.get(c.status, 'white')}]{e(c.status)}[/]"


def _past(util: Any) -> str:
    """How a row marks utility on the wrong side of the floor (a perplexity ceiling is crossed upwards)."""
    return ">ceiling" if util is not None and util.metric == "perplexity" else "<floor"


def remediation_row(row: SearchRow) -> str:
    """One line per trained candidate, printed as the search runs (``privgate harden``)."""
    tr = row.training
    util = f"utility {_num(row.utility)}" + ("" if row.utility_ok else " [bold red]past the floor[/]")
    checks = " · ".join(f"{e(c.id)} {_check_cell(c)}" for c in row.checks)
    outcome = "[green]accepted[/]" if row.accepted else f"[{_STYLE.get(row.verdict or '', 'white')}]{row.privacy}[/]"
    if row.step is not None:  # a capacity search's step (no ε, no DP run)
        return (
            f"  step {row.step} {e(setting_text(row.setting or {}))}  fit {_g(row.fit_seconds)}s  {util}  {checks}"
            f"  → {outcome}"
        )
    trial = f" (trial {row.trial})" if row.trial else ""
    released = f"  released ε so far {_g(row.released_epsilon)}" if row.released_epsilon is not None else ""
    return (
        f"  ε = {_g(row.epsilon):<5}{trial} σ = {_g(tr.noise_multiplier)}  C = {_g(tr.max_grad_norm)}  "
        f"{tr.steps if tr.steps is not None else '?'} steps  {_g(tr.seconds)}s  {util}  {checks}  → {outcome}"
        f"{released}"
    )


def _print_capacity(rem: RemediationSection, console: Console) -> None:
    """A scikit-learn model's capacity search: its steps' settings, utility and checks; no ε, no DP statement."""
    orig = rem.original
    ids = [c.id for c in rem.rows[0].checks] if rem.rows else [c.id for c in (orig.checks if orig else [])]
    t = Table(title=f"Remediation: capacity search ({rem.strategy or '?'}) — no DP guarantee")
    for col in ("step", "setting", "utility", *ids, "verdict"):
        t.add_column(e(col))
    first = ([_check_cell(c) for c in orig.checks] if orig else []) + [""] * len(ids)
    t.add_row("original", "the model's own", _num(orig.utility if orig else None), *first[: len(ids)],
              e(orig.verdict if orig else ""))  # fmt: skip
    for r in rem.rows:
        u = _num(r.utility) + ("" if r.utility_ok else " [red]<floor[/]")
        cells = ([_check_cell(c) for c in r.checks] + [""] * len(ids))[: len(ids)]
        t.add_row(f"{r.step}{' ✓' if r.accepted else ''}", e(setting_text(r.setting or {})), u, *cells,
                  e(r.verdict or ""))  # fmt: skip
    base = (rem.utility.baseline or {}) if rem.utility else {}
    if isinstance(base.get("majority"), (int, float)):  # the constant model, beside the candidates' utility
        t.add_row("baseline", e(f"always {str(base.get('label'))!r}"), _num(base["majority"]), *[""] * len(ids), "")
    console.print(t)
    util = rem.utility
    if util is not None and util.floor is not None:
        console.print(f"  utility = {e(util.metric)} on {e(util.data)}; floor {util.floor:.4f} ({e(util.rule)})")
    if util is not None and util.baseline_line():
        console.print(f"  baseline: {e(util.baseline_line())}")
    if rem.capacity is not None:
        console.print(
            f"  [bold]no DP guarantee[/]: {e(rem.capacity.guarantee)}; for one, {e(rem.capacity.dp_alternative)}"
        )


def print_remediation(rem: RemediationSection, console: Console) -> None:
    """The ε–utility–attack table of the DP-SGD search, the choice, the two ε and the selection's cost."""
    util = rem.utility
    orig = rem.original
    if rem.method == "capacity":
        _print_capacity(rem, console)
    elif rem.rows:
        ids = [c.id for c in rem.rows[0].checks]
        t = Table(title=f"Remediation: DP-SGD ε search ({rem.strategy or '?'})")
        for col in ("ε", "ε spent", "σ", "utility", *ids, "verdict", "released ε"):
            t.add_column(e(col))
        first = ([_check_cell(c) for c in orig.checks] if orig else []) + [""] * len(ids)
        t.add_row(
            "original",
            "∞",
            "—",
            _num(orig.utility if orig else None),
            *first[: len(ids)],
            e(orig.verdict if orig else ""),
        )
        for r in rem.rows:
            tr = r.training
            mark = " ✓" if r.accepted else ""
            u = _num(r.utility) + ("" if r.utility_ok else " [red]" + _past(util) + "[/]")
            spent = "—" if tr.epsilon is None else f"{_g(tr.epsilon)} ({tr.accountant or ''})"
            cells = ([_check_cell(c) for c in r.checks] + [""] * len(ids))[: len(ids)]
            trial = f" #{r.trial}" if r.trial else ""
            released = "—" if r.released_epsilon is None else _g(r.released_epsilon)
            t.add_row(
                f"{_g(r.epsilon)}{trial}{mark}",
                spent,
                _g(tr.noise_multiplier),
                u,
                *cells,
                e(r.verdict or ""),
                released,
            )
        console.print(t)
        if util is not None and util.floor is not None:
            bound = "ceiling" if util.metric == "perplexity" else "floor"  # lower perplexity is better
            console.print(f"  utility = {e(util.metric)} on {e(util.data)}; {bound} {util.floor:.4f} ({e(util.rule)})")
        if util is not None and util.baseline_line():
            console.print(f"  baseline: {e(util.baseline_line())}")
    settings = rem.settings
    if settings is not None:
        mode = f" ({settings.max_grad_norm_mode})" if settings.max_grad_norm_mode else ""
        start = f", from {settings.start}" if settings.start else ""
        console.print(
            f"  DP-SGD: {settings.epochs} epochs, batch {settings.batch_size}, clip C = {_g(settings.max_grad_norm)}"
            f"{mode}, δ = {_g(settings.delta)}, accountant {settings.accountant}{start}"
        )
    for change in rem.architecture_changes:
        console.print(f"  [yellow]architecture change:[/] {e(change)}")
    style = {
        "hardened": "green",
        "no_epsilon": "bold red",
        "no_setting": "bold red",
        "audit_failed": "bold red",
        "budget_exceeded": "bold red",
    }
    for row in rem.rows:  # why each candidate the search did not take was not taken
        if row.reason:
            where = f"step {row.step}" if row.step is not None else f"ε = {_g(row.epsilon)}"
            where += f" (trial {row.trial})" if row.trial else ""
            console.print(f"  [dim]{e(where)} not taken:[/] {e(row.reason)}", highlight=False)
    if rem.status:
        console.print(f"  [{style.get(rem.status, 'white')}]remediation {e(rem.status)}[/]: {e(rem.reason or '')}")
    line = rem.epsilon_line()
    if line:  # which ε is which, in one line
        console.print(f"  [bold]{e(line)}[/]", highlight=False)
    audit = rem.audit or {}
    if audit.get("summary") and rem.status != "audit_failed":  # the claim next to the measured lower bound
        console.print(f"  [{_STYLE.get(audit.get('verdict', ''), 'white')}]{e(audit['summary'])}[/]")
    if rem.output and rem.output.get("skops"):  # a scikit-learn model's capacity search
        console.print(
            f"  hardened model: {e(rem.output['skops'])} (skops), {e(rem.output.get('model_card'))} (model card: "
            "no DP guarantee)"
        )
    elif rem.output and rem.output.get("folder"):  # a language model's save_pretrained folder
        console.print(f"  hardened model: {e(rem.output['folder'])} ({e(rem.output.get('format', ''))}, with its card)")
    elif rem.output:
        card = f", {e(rem.output['model_card'])} (model card, DP statement)" if rem.output.get("model_card") else ""
        fmt = "torch.export" if rem.output.get("format") == "torch.export" else "TorchScript"
        console.print(
            f"  hardened model: {e(rem.output.get('model') or rem.output.get('torchscript'))} ({fmt}), "
            f"{e(rem.output.get('state_dict'))} (state_dict){card}"
        )
        if rem.output.get("export_refused"):
            console.print(f"  [yellow]written as TorchScript: {e(rem.output['export_refused'])}[/]")
    if rem.selection_leakage:
        console.print(f"  [dim]{e(rem.selection_leakage)}[/]")
