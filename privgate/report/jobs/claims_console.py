"""Console output of the audits (rich): Matsumoto et al. 2022, Figure 2, as a table;
the one-run audit's guesses; the verdict."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from privgate.report.jobs.claims import DpsgdAuditReport, LdpAuditReport, LdpResult
from privgate.report.safe import console as escape

_STYLE = {"pass": "green", "fail": "bold red", "inconclusive": "yellow"}


def eps_text(v: float | None) -> str:
    """An ε for people: 3 decimals, ∞ for an infinite point value (stored as null)."""
    return "∞" if v is None else f"{v:.3f}"


def _cell(r: LdpResult) -> str:
    style = _STYLE[r.status] if r.status != "pass" else ""
    text = f"{r.epsilon_lb:.3f} ({eps_text(r.epsilon_empirical)})"
    return f"[{style}]{text}[/]" if style else text


def print_ldp(report: LdpAuditReport, console: Console) -> None:
    """Header, the grid (one table for one claim, Figure 2's layout for a sweep), one line per claim, the verdict."""
    src = report.source
    console.print(
        f"[bold]privgate audit ldp[/] {report.privgate_version} · mechanism {escape(report.mechanism['name'])} · "
        f"clip L = {report.clip:g}",
        highlight=False,
    )
    console.print(
        f"gradients: {escape(src['description'])}, d = {escape(src['parameters'])} · "
        f"K = {report.trials:,} trials per cell · "
        f"{report.cells} cells at {report.confidence * 100:g}% jointly (each at {report.cell_confidence:.4%})".replace(
            ".0%", "%"
        ),
        highlight=False,
    )
    claims = sorted({r.claimed_epsilon for r in report.results})
    if len(claims) == 1:
        t = Table(
            title=f"Claimed ε = {claims[0]:g}: FP/FN of each distinguisher, ε_emp (Eq. 3, point value) and the lower "
            "bound"
        )
        for col in ("adversary", "distinguisher", "FP", "FN", "ε_emp", "ε lower bound", "status"):
            t.add_column(col)
        for r in report.results:
            t.add_row(
                escape(r.adversary),
                escape(r.distinguisher),
                f"{r.fp:.4f}",
                f"{r.fn:.4f}",
                eps_text(r.epsilon_empirical),
                f"{r.epsilon_lb:.3f}",
                f"[{_STYLE[r.status]}]{r.status}[/]",
            )
    else:
        t = Table(
            title="Lower bound (ε_emp) per adversary and claimed ε — Matsumoto et al. 2022 (arXiv 2206.09122), Figure 2"
        )
        t.add_column("adversary")
        t.add_column("distinguisher")
        for eps in claims:
            t.add_column(f"ε = {eps:g}")
        keys = dict.fromkeys((r.adversary, r.distinguisher) for r in report.results)
        by = {(r.adversary, r.distinguisher, r.claimed_epsilon): r for r in report.results}
        for adv, dist in keys:
            t.add_row(escape(adv), escape(dist), *[_cell(by[(adv, dist, eps)]) for eps in claims])
    console.print(t)
    for c in report.claims:
        console.print(
            f"  [{_STYLE[c.status]}]ε = {c.claimed_epsilon:g}: {c.status}[/] — {escape(c.reason)}", highlight=False
        )
    if report.trials_per_second:
        console.print(
            f"  [dim]{report.trials * report.cells:,} cell trials in {report.game_seconds:.2f} s "
            f"({report.trials_per_second:,.0f}/s); run {report.duration_s:.1f} s[/]"
        )
    console.print(f"[{_STYLE[report.verdict]}]{escape(report.summary)}[/]", highlight=False)
    if report.verdict == "pass":
        console.print(
            "  A pass means no adversary found a violation; it does not prove the mechanism is ε-LDP.", highlight=False
        )


def print_dpsgd(report: DpsgdAuditReport, console: Console) -> None:
    """Header, the guess grid with each attempt's bound, the verdict."""
    tr = report.trainer
    what = f"{tr['kind']}, recipe {tr['recipe']}" if "recipe" in tr else f"trainer {tr['train']}"
    console.print(
        f"[bold]privgate audit dpsgd[/] {report.privgate_version} · {report.mode.replace('_', '-')} · {escape(what)}",
        highlight=False,
    )
    dp = tr.get("dp_sgd") or {}
    if dp:
        spent = "—" if dp.get("epsilon") is None else f"{dp['epsilon']:.3g}"
        console.print(
            f"DP-SGD: σ = {dp['noise_multiplier']:.4g}, C = {dp['max_grad_norm']:g}, q = {dp['sample_rate']:.4g}, "
            f"{dp['steps']} steps, "
            f"accountant {dp['accountant']} ε = {spent} (δ = {dp['delta']:g})",
            highlight=False,
        )
    console.print(
        f"canaries: {escape(report.data['canary_design'])}; {report.included} of {report.canaries} included",
        highlight=False,
    )
    t = Table(
        title=f"Guesses (grid fixed in advance; each at {report.bound['attempt_confidence']:.4%})".replace(".0%", "%")
    )
    for col in ("guesses r", "correct v", "accuracy", "ε lower bound"):
        t.add_column(col)
    for a in report.attempts:
        mark = " ←" if (a.guesses, a.correct) == (report.guesses, report.correct) else ""
        t.add_row(
            str(a.guesses),
            str(a.correct),
            f"{a.correct / a.guesses:.3f}" if a.guesses else "—",
            f"{a.epsilon_lb:.3f}{mark}",
        )
    console.print(t)
    console.print(
        f"  claimed ε = {report.claimed_epsilon:g} · measured ε ≥ {report.epsilon_lb:.3f} · the most "
        f"{report.canaries} canaries could prove: "
        f"{report.max_provable_epsilon:.3f} · training {report.training_seconds:.1f} s, audit "
        f"{report.duration_s:.1f} s",
        highlight=False,
    )
    console.print(f"[{_STYLE[report.verdict]}]{escape(report.summary)}[/]", highlight=False)
    if report.verdict == "pass":
        console.print(
            "  A pass means the canaries found no violation; it does not prove the training is (ε, δ)-DP.",
            highlight=False,
        )


__all__ = ["eps_text", "print_dpsgd", "print_ldp"]
