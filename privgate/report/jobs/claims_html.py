"""HTML for the audits: one self-contained page each (inline SVG, no scripts, no external files).

The LDP page is Matsumoto et al.'s (2022) Figure 2: for each distinguisher, the lower bound
(solid) and the point value ε_emp (dashed) of every adversary against the
claimed ε, with the claim itself as the diagonal — a correct mechanism keeps
every solid line on or under it — and the same numbers as a table. The
one-run DP-SGD page shows each pre-declared number of guesses with its bound
against the claim.
"""

from __future__ import annotations

import math

from privgate.report.charts import Series, colour, line_chart
from privgate.report.html import CSS
from privgate.report.jobs.claims import DpsgdAuditReport, LdpAuditReport
from privgate.report.jobs.claims_console import eps_text
from privgate.report.safe import csp_meta
from privgate.report.safe import html_text as escape

_CLASS = {"pass": "pass", "fail": "fail", "inconclusive": "inc"}
_NAMES = {"black_box": "black-box", "white_box": "white-box"}


def _head(title: str, verdict: str, summary: str) -> list[str]:
    return [
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
        csp_meta(styles=(CSS,)),
        "<meta name='viewport' content='width=device-width, initial-scale=1'>",
        f"<title>{escape(title)}</title><style>{CSS}</style></head><body>",
        f"<h1>{escape(title)}</h1>",
        f"<div class='verdict {_CLASS[verdict]}' id='verdict'>{escape(verdict.upper())}</div>",
        f"<p><strong>{escape(summary)}</strong></p>",
    ]


def _facts(items: list[str]) -> str:
    return "<p class='facts'>" + " · ".join(escape(s) for s in items) + "</p>"


def _table(table_id: str, headers: list[str]) -> str:
    return (
        f"<div class='scroll'><table id='{table_id}'><tr>" + "".join(f"<th>{escape(x)}</th>" for x in headers) + "</tr>"
    )


def _row(cells: list[tuple[str, str]], cls: str = "") -> str:
    """One table row of (text, class) cells, the text escaped."""
    tds = "".join(f"<td class='{c}'>{escape(t)}</td>" if c else f"<td>{escape(t)}</td>" for t, c in cells)
    return f"<tr class='{cls}'>{tds}</tr>" if cls else f"<tr>{tds}</tr>"


def _num(v: float | None) -> float:
    return float("nan") if v is None else float(v)


def ldp_chart(report: LdpAuditReport, distinguisher: str) -> str | None:
    """ε_lb (solid) and ε_emp (dashed) per adversary against the claimed ε, for one distinguisher."""
    rows = [r for r in report.results if r.distinguisher == distinguisher]
    if not rows:
        return None
    claims = sorted({r.claimed_epsilon for r in rows})
    finite = [v for r in rows for v in (r.epsilon_lb, r.epsilon_empirical) if v is not None and math.isfinite(v)]
    top = max([*claims, *finite]) * 1.1
    series = []
    for i, adv in enumerate(dict.fromkeys(r.adversary for r in rows)):
        mine = sorted((r for r in rows if r.adversary == adv), key=lambda r: r.claimed_epsilon)
        xs = [r.claimed_epsilon for r in mine]
        series.append(Series(f"{adv} lower bound", xs, [r.epsilon_lb for r in mine], colour(i), markers=True))
        series.append(
            Series(f"{adv} ε_emp", xs, [_num(r.epsilon_empirical) for r in mine], colour(i), dashed=True, markers=True)
        )
    return line_chart(
        series,
        x_range=(0.0, top),
        y_range=(0.0, top),
        x_log=False,
        y_log=False,
        x_label="claimed ε",
        y_label="measured ε",
        title=f"{_NAMES[distinguisher]} distinguisher",
        diagonal=True,
        width=520,
        height=380,
    )


def render_ldp_html(report: LdpAuditReport) -> str:
    """The LDP audit as one page: verdict, Figure 2 (plots and table), the claims, the settings."""
    src = report.source
    h = _head(f"privgate audit ldp · {report.mechanism['name']}", report.verdict, report.summary)
    h.append(
        _facts(
            [
                f"clip L = {report.clip:g}",
                f"K = {report.trials:,} trials per cell",
                f"{report.cells} cells",
                f"{report.confidence * 100:g}% confidence jointly (each cell at {report.cell_confidence:.4%})",
                f"gradients: {src['description']}, d = {src['parameters']}",
                f"seed {report.environment.get('seed')}",
                f"privgate {report.privgate_version}",
                f"started {report.started}, {report.duration_s:.1f} s",
            ]
        )
    )
    h.append("<h2>Claims</h2>")
    h.append(_table("claims", ["status", "claimed ε", "largest lower bound", "by", "most provable with K", "reason"]))
    for c in report.claims:
        cls = _CLASS[c.status]
        cells = [
            (c.status, f"st {cls}"),
            (f"{c.claimed_epsilon:g}", "num"),
            (f"{c.max_epsilon_lb:.3f}", "num"),
            (c.strongest or "", ""),
            (f"{c.max_provable_epsilon:.3f}", "num"),
            (c.reason, "reason"),
        ]
        h.append(_row(cells))
    h.append("</table></div>")
    h.append("<h2>Measured ε per adversary (Matsumoto et al. 2022, Figure 2)</h2><div class='charts'>")
    for dist in report.distinguishers:
        chart = ldp_chart(report, dist)
        if chart:
            h.append(
                f"<figure id='figure-{dist}'>{chart}<figcaption>Solid: the lower bound, valid at the report's "
                "confidence; dashed: the point value ε_emp (Eq. 3), which can exceed the truth by chance and decides "
                "nothing; the diagonal is the claim.</figcaption></figure>"
            )
    h.append("</div>")
    columns = ["claimed ε", "adversary", "distinguisher", "rule", "FP", "FN", "ε_emp", "ε lower bound", "status"]
    h.append(_table("results", columns))
    for r in report.results:
        cls = _CLASS[r.status]
        cells = [
            (f"{r.claimed_epsilon:g}", "num"),
            (r.adversary, ""),
            (_NAMES[r.distinguisher], ""),
            (r.rule, "reason"),
            (f"{r.fp:.4f} ({r.fp_count}/{r.trials_g1})", "num"),
            (f"{r.fn:.4f} ({r.fn_count}/{r.trials_g2})", "num"),
            (eps_text(r.epsilon_empirical), "num"),
            (f"{r.epsilon_lb:.3f}", "num"),
            (r.status, f"st {cls}"),
        ]
        h.append(_row(cells, f"cell {cls}"))
    h.append("</table></div>")
    h.append(
        "<p class='reason'>A pass means no adversary found a violation at these trial counts; it does not prove the "
        "mechanism is ε-LDP. Bounds: Clopper-Pearson upper bounds on FP and FN, each at the cell's α/2, Bonferroni "
        "over all cells.</p>"
    )
    h.append("</body></html>")
    return "\n".join(h) + "\n"


def dpsgd_chart(report: DpsgdAuditReport) -> str | None:
    """The bound of each pre-declared number of guesses, with the claim and the most m canaries could prove."""
    pts = [a for a in report.attempts if a.guesses > 0]
    if not pts:
        return None
    top = max(report.claimed_epsilon, report.max_provable_epsilon, *(a.epsilon_lb for a in pts)) * 1.15 or 1.0
    xs = [float(a.guesses) for a in pts]
    lo, hi = min(xs), max(xs)
    if lo == hi:
        lo, hi = lo / 2, hi * 2
    return line_chart(
        [Series("ε lower bound", xs, [a.epsilon_lb for a in pts], colour(0), markers=True)],
        x_range=(lo / 1.2, hi * 1.2),
        y_range=(0.0, top),
        x_log=True,
        y_log=False,
        x_label="guesses r (log scale)",
        y_label="ε",
        title="One-run audit: bound per number of guesses",
        hlines=[
            (report.claimed_epsilon, f"claimed ε = {report.claimed_epsilon:g}"),
            (report.max_provable_epsilon, f"most provable {report.max_provable_epsilon:.2f}"),
        ],
    )


def render_dpsgd_html(report: DpsgdAuditReport) -> str:
    """The one-run DP-SGD audit as one page."""
    tr = report.trainer
    what = f"recipe {tr['recipe']} (privgate DP-SGD)" if report.mode == "white_box" else f"trainer {tr['train']}"
    h = _head(f"privgate audit dpsgd · {what}", report.verdict, report.summary)
    dp = tr.get("dp_sgd") or {}
    facts = [
        f"{report.mode.replace('_', '-')}",
        f"claimed ε = {report.claimed_epsilon:g}, δ = {report.delta:g}",
        f"{report.canaries} canaries, {report.included} included",
        f"{report.guesses} guesses, {report.correct} right",
        f"ε ≥ {report.epsilon_lb:.3f} at {report.confidence * 100:g}%",
        f"training {report.training_seconds:.1f} s",
        f"seed {report.environment.get('seed')}",
        f"privgate {report.privgate_version}",
    ]
    if dp:
        sigma, clip, rate = dp["noise_multiplier"], dp["max_grad_norm"], dp["sample_rate"]
        facts.insert(2, f"σ = {sigma:.4g}, C = {clip:g}, q = {rate:.4g}, {dp['steps']} steps")
    h.append(_facts(facts))
    chart = dpsgd_chart(report)
    if chart:
        h.append(
            f"<div class='charts'><figure id='guesses'>{chart}<figcaption>Each number of guesses was fixed before "
            f"training and is tested at {report.bound['attempt_confidence']:.4%} (Bonferroni); the report keeps the "
            "largest bound.</figcaption></figure></div>"
        )
    h.append(_table("attempts", ["guesses r", "correct v", "ε lower bound"]))
    h += [
        _row([(str(a.guesses), "num"), (str(a.correct), "num"), (f"{a.epsilon_lb:.3f}", "num")])
        for a in report.attempts
    ]
    h.append("</table></div>")
    bound = report.bound
    h.append(
        f"<p class='reason'>Canaries: {escape(report.data['canary_design'])}. Bound: {escape(bound['name'])}; "
        f"{escape(bound['delta_handling'])}.</p>"
    )
    h.append("</body></html>")
    return "\n".join(h) + "\n"


__all__ = ["dpsgd_chart", "ldp_chart", "render_dpsgd_html", "render_ldp_html"]
