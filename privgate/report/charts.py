"""SVG charts for the HTML report: log-log ROC curves and the remediation's ε–utility–leakage plot.

Self-contained SVG strings (no scripts, no external files). ROC curves are read
on log-log axes — what matters in membership inference is the true-positive
rate at low false-positive rates (Carlini et al. 2022, arXiv 2112.03570) — and
every attack gets its own colour, with the legend below the plot.
"""

from __future__ import annotations

import colorsys
import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from privgate.report.model import AttackSummary
from privgate.report.numbers import is_finite_number, num
from privgate.report.remediation import RemediationView
from privgate.report.safe import html_text as escape

#: Line colours: Tableau's 10, then 10 more (navy, maroon, dark green, goldenrod, magenta, black, slate blue,
#: teal, yellow-green, dark slate grey) — 20 distinct colours, more than privgate has attacks.
PALETTE = (
    "#1f77b4",
    "#d62728",
    "#2ca02c",
    "#ff7f0e",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#17becf",
    "#7f7f7f",
    "#bcbd22",
    "#000080",
    "#800000",
    "#006400",
    "#daa520",
    "#ff00ff",
    "#000000",
    "#6a5acd",
    "#008080",
    "#9acd32",
    "#2f4f4f",
)


def colour(i: int) -> str:
    """The i-th line colour: :data:`PALETTE`, then hues spaced by the golden angle, so no two lines share one."""
    if i < len(PALETTE):
        return PALETTE[i]
    r, g, b = colorsys.hls_to_rgb(((i - len(PALETTE)) * 0.381966 + 0.05) % 1.0, 0.4, 0.75)
    return f"#{round(r * 255):02x}{round(g * 255):02x}{round(b * 255):02x}"


@dataclass
class Series:
    """One line of a chart."""

    name: str
    xs: list[float]
    ys: list[float]
    color: str
    dashed: bool = False
    markers: bool = False


def _decades(lo: float, hi: float) -> list[float]:
    return [10.0**k for k in range(int(math.floor(math.log10(lo) + 1e-9)), int(math.ceil(math.log10(hi) - 1e-9)) + 1)]


def _log_ticks(lo: float, hi: float) -> list[float]:
    """Decades, or 1-2-5 steps when the range spans fewer than three decades."""
    decades = _decades(lo, hi)
    if len(decades) >= 4:
        return decades
    return [d * m for d in decades for m in (1, 2, 5) if lo <= d * m <= hi]


def _linear_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    span = hi - lo
    if span <= 0:
        return [lo]
    raw = span / n
    step = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 2.5, 5, 10):
        if step * m >= raw:
            step *= m
            break
    start = math.ceil(lo / step - 1e-9) * step
    return [round(start + i * step, 10) for i in range(int((hi - start) / step + 1e-9) + 1)]


def _tick_label(v: float, log: bool) -> str:
    k = math.log10(v) if log and v > 0 else None
    if k is not None and abs(k - round(k)) < 1e-9 and not -2 <= round(k) <= 2:
        return f"10<tspan dy='-6' font-size='9'>{round(k)}</tspan>"
    return f"{v:g}"


@dataclass(frozen=True)
class _Frame:
    """A chart's plot area: where a value lands on the page (log axes clip values below the range to its end)."""

    left: float
    top: float
    pw: float
    ph: float
    x_range: tuple[float, float]
    y_range: tuple[float, float]
    x_log: bool
    y_log: bool

    def px(self, v: float) -> float:
        v = min(max(v, self.x_range[0]), self.x_range[1])
        x0, x1 = (_scaled(r, self.x_log) for r in self.x_range)
        return self.left + (_scaled(v, self.x_log) - x0) / (x1 - x0) * self.pw

    def py(self, v: float) -> float:
        v = min(max(v, self.y_range[0]), self.y_range[1])
        y0, y1 = (_scaled(r, self.y_log) for r in self.y_range)
        return self.top + self.ph - (_scaled(v, self.y_log) - y0) / (y1 - y0) * self.ph


def _scaled(v: float, log: bool) -> float:
    return math.log10(v) if log else v


def _grid(f: _Frame, x_label: str, y_label: str, height: int) -> list[str]:
    """Tick lines and labels on both axes, the plot's border and the axis labels."""
    left, top, pw, ph = f.left, f.top, f.pw, f.ph
    out = []
    xt = _log_ticks(*f.x_range) if f.x_log else _linear_ticks(*f.x_range)
    yt = _log_ticks(*f.y_range) if f.y_log else _linear_ticks(*f.y_range)
    for t in xt:
        if f.x_range[0] - 1e-12 <= t <= f.x_range[1] + 1e-12:
            X = f.px(t)
            out.append(f"<line x1='{X:.1f}' y1='{top}' x2='{X:.1f}' y2='{top + ph}' stroke='#e6e6e6'/>")
            out.append(f"<text x='{X:.1f}' y='{top + ph + 16}' text-anchor='middle'>{_tick_label(t, f.x_log)}</text>")
    for t in yt:
        if f.y_range[0] - 1e-12 <= t <= f.y_range[1] + 1e-12:
            Y = f.py(t)
            out.append(f"<line x1='{left}' y1='{Y:.1f}' x2='{left + pw}' y2='{Y:.1f}' stroke='#e6e6e6'/>")
            out.append(f"<text x='{left - 6}' y='{Y + 4:.1f}' text-anchor='end'>{_tick_label(t, f.y_log)}</text>")
    out.append(f"<rect x='{left}' y='{top}' width='{pw}' height='{ph}' fill='none' stroke='#999'/>")
    out.append(f"<text x='{left + pw / 2}' y='{height - 8}' text-anchor='middle'>{escape(x_label)}</text>")
    out.append(
        f"<text transform='translate(14,{top + ph / 2}) rotate(-90)' text-anchor='middle'>{escape(y_label)}</text>"
    )
    return out


def _guides(
    f: _Frame, diagonal: bool, vlines: Iterable[tuple[float, str]], hlines: Iterable[tuple[float, str]]
) -> list[str]:
    """The dashed diagonal (guessing, on a ROC) and labelled vertical and horizontal reference lines."""
    left, top, pw, ph = f.left, f.top, f.pw, f.ph
    out = []
    if diagonal:
        lo, hi = max(f.x_range[0], f.y_range[0]), min(f.x_range[1], f.y_range[1])
        out.append(
            f"<line x1='{f.px(lo):.1f}' y1='{f.py(lo):.1f}' x2='{f.px(hi):.1f}' y2='{f.py(hi):.1f}' stroke='#888' "
            f"stroke-dasharray='4 4'/>"
        )
    for v, label in vlines:
        X = f.px(v)
        out.append(f"<line x1='{X:.1f}' y1='{top}' x2='{X:.1f}' y2='{top + ph}' stroke='#444' stroke-dasharray='2 3'/>")
        out.append(f"<text x='{X + 4:.1f}' y='{top + 12}' fill='#444'>{escape(label)}</text>")
    for v, label in hlines:
        Y = f.py(v)
        out.append(
            f"<line x1='{left}' y1='{Y:.1f}' x2='{left + pw}' y2='{Y:.1f}' stroke='#444' stroke-dasharray='2 3'/>"
        )
        out.append(f"<text x='{left + pw - 4}' y='{Y - 4:.1f}' fill='#444' text-anchor='end'>{escape(label)}</text>")
    return out


def _curves(f: _Frame, series: list[Series]) -> list[str]:
    """Each series as a polyline through its finite points (with markers when asked)."""
    out = []
    for s in series:
        pts = [(f.px(x), f.py(y)) for x, y in zip(s.xs, s.ys) if is_finite_number(x) and is_finite_number(y)]
        if not pts:
            continue
        path = " ".join(f"{x:.1f},{y:.1f}" for x, y in pts)
        dash = " stroke-dasharray='6 3'" if s.dashed else ""
        out.append(
            f"<polyline class='series' data-name='{escape(s.name)}' points='{path}' fill='none' "
            f"stroke='{s.color}' stroke-width='2'{dash}/>"
        )
        if s.markers:
            out += [f"<circle cx='{x:.1f}' cy='{y:.1f}' r='3' fill='{s.color}'/>" for x, y in pts]
    return out


def _legend(series: list[Series], left: float, top_y: float, cols: int, col_w: float, lh: int) -> list[str]:
    """The legend below the plot and its axis label, row by row."""
    out = []
    for i, s in enumerate(series):
        row, col = divmod(i, cols)
        lx, y = left + col * col_w, top_y + row * lh + 8
        dash = " stroke-dasharray='6 3'" if s.dashed else ""
        out.append(
            f"<g class='legend' data-name='{escape(s.name)}'><line x1='{lx:.1f}' y1='{y}' x2='{lx + 22:.1f}' "
            f"y2='{y}' stroke='{s.color}' stroke-width='2'{dash}/>"
        )
        out.append(f"<text x='{lx + 28:.1f}' y='{y + 4}'>{escape(s.name)}</text></g>")
    return out


def line_chart(
    series: list[Series],
    *,
    x_range: tuple[float, float],
    y_range: tuple[float, float],
    x_log: bool,
    y_log: bool,
    x_label: str,
    y_label: str,
    title: str,
    diagonal: bool = False,
    vlines: Iterable[tuple[float, str]] = (),
    hlines: Iterable[tuple[float, str]] = (),
    width: int = 560,
    height: int = 400,
) -> str:
    """An SVG line chart; log axes clip values below the range to its lower end.

    The legend sits below the plot, in as many columns as fit the width, so it
    never covers a curve; the SVG is ``height`` plus the legend's rows tall.
    """
    left, right, top, bottom = 62, 16, 30, 48
    frame = _Frame(left, top, width - left - right, height - top - bottom, x_range, y_range, x_log, y_log)
    lh = 16
    col_w = min(width - left, max((len(s.name) for s in series), default=0) * 6.6 + 40)
    cols = max(1, int((width - left) // col_w)) if series else 1
    legend_h = (math.ceil(len(series) / cols) * lh + 10) if series else 0
    full_height = height + legend_h
    out = [
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{full_height}' viewBox='0 0 {width} "
        f"{full_height}' role='img' aria-label='{escape(title)}' font-family='sans-serif' font-size='11'>",
        f"<rect x='0' y='0' width='{width}' height='{full_height}' fill='#fff'/>",
        f"<text x='{left + frame.pw / 2}' y='18' text-anchor='middle' font-size='13' "
        f"font-weight='bold'>{escape(title)}</text>",
    ]
    out += _grid(frame, x_label, y_label, height)
    out += _guides(frame, diagonal, vlines, hlines)
    out += _curves(frame, series)
    out += _legend(series, left, height, cols, col_w, lh)
    out.append("</svg>")
    return "".join(out)


def _floor_decade(v: float) -> float:
    return 10.0 ** math.floor(math.log10(v) + 1e-9)


def densify_roc(
    fpr: list[float], tpr: list[float], lo: float, per_segment: int = 12
) -> tuple[list[float], list[float]]:
    """Points along each ROC segment, spaced evenly on a log FPR axis.

    Between two operating points the ROC is a straight line in linear space
    (randomising between the two thresholds), which is a curve on log-log axes;
    drawing it as one straight log-log segment would misplace the low-FPR rates.
    """
    xs, ys = [fpr[0]], [tpr[0]]
    for (f0, t0), (f1, t1) in zip(zip(fpr, tpr), zip(fpr[1:], tpr[1:])):
        if f1 > f0 and f1 > lo and (f0 <= 0 or f1 / f0 > 1.5):
            for f in np.geomspace(max(f0, lo), f1, per_segment)[1:-1]:
                xs.append(float(f))
                ys.append(t0 + (t1 - t0) * (float(f) - f0) / (f1 - f0))
        xs.append(f1)
        ys.append(t1)
    return xs, ys


def roc_chart(attacks: list[AttackSummary]) -> str | None:
    """ROC curves of the attacks that ran, log-log, from their down-sampled evaluation ROC."""
    ran = [a for a in attacks if a.status == "ran" and a.roc and a.roc.get("fpr") and a.roc.get("tpr")]
    if not ran:
        return None
    # the lowest rate a split of this size can show: one example in n
    n0 = max(max(a.n_nonmembers for a in ran), 1)
    n1 = max(max(a.n_members for a in ran), 1)
    lo = min(_floor_decade(1.0 / n0), _floor_decade(1.0 / n1))
    lo = max(lo, 1e-6)
    series = []
    for i, a in enumerate(ran):
        name = f"{a.name} (AUC {num(a.auc)})"
        xs, ys = densify_roc([float(v) for v in a.roc["fpr"]], [float(v) for v in a.roc["tpr"]], lo)
        series.append(Series(name, xs, ys, colour(i)))
    return line_chart(
        series,
        x_range=(lo, 1.0),
        y_range=(lo, 1.0),
        x_log=True,
        y_log=True,
        x_label="false-positive rate",
        y_label="true-positive rate",
        title="ROC of each attack (log-log, evaluation split)",
        diagonal=True,
    )


def remediation_chart(rem: RemediationView, thresholds: dict[str, float] | None = None) -> str | None:
    """ε on a log axis against utility (solid) and leakage (dashed) for each step of the search.

    ``thresholds``: the policy's bound for a leakage column named after a check, drawn as a line.
    """
    if not rem.plottable or rem.epsilon_key is None:
        return None
    rows = sorted(
        (r for r in rem.rows if is_finite_number(r.get(rem.epsilon_key)) and r[rem.epsilon_key] > 0),
        key=lambda r: r[rem.epsilon_key],
    )
    eps = [float(r[rem.epsilon_key]) for r in rows]
    series = []

    def in_unit(k: str) -> bool:
        return all(0.0 <= r[k] <= 1.0 for r in rows if is_finite_number(r.get(k)))

    leakage = rem.leakage_keys
    if all(in_unit(k) for k in rem.utility_keys) and any(in_unit(k) for k in leakage):
        leakage = [k for k in leakage if in_unit(k)]  # one 0..1 axis; ε bounds and the like stay in the table
    keys = [(k, False) for k in rem.utility_keys] + [(k, True) for k in leakage]
    values = []
    for i, (k, dashed) in enumerate(keys):
        ys = [float(r[k]) if is_finite_number(r.get(k)) else float("nan") for r in rows]
        values += [y for y in ys if math.isfinite(y)]
        series.append(Series(k, eps, ys, colour(i), dashed=dashed, markers=True))
    if not values:
        return None
    ylo, yhi = (
        (0.0, 1.0)
        if min(values) >= 0.0 and max(values) <= 1.0
        else (min(values), max(values) if max(values) > min(values) else min(values) + 1)
    )
    xlo, xhi = min(eps), max(eps)
    if xlo == xhi:
        xlo, xhi = xlo / 2, xhi * 2
    xlo, xhi = xlo / 1.3, xhi * 1.3
    vlines = (
        [(rem.chosen_epsilon, f"chosen ε = {rem.chosen_epsilon:g}")]
        if rem.chosen_epsilon is not None and rem.chosen_epsilon > 0
        else []
    )
    hlines = [(rem.utility_floor, f"utility floor {rem.utility_floor:.3g}")] if rem.utility_floor is not None else []
    hlines += [(t, f"{k} max {t:g}") for k, t in (thresholds or {}).items() if k in leakage]
    hlines = [(v, label) for v, label in hlines if ylo <= v <= yhi]
    return line_chart(
        series,
        x_range=(xlo, xhi),
        y_range=(ylo, yhi),
        x_log=True,
        y_log=False,
        x_label="ε (DP-SGD privacy budget, log scale)",
        y_label="utility (solid) / leakage (dashed)",
        title="Remediation: ε vs utility and leakage",
        vlines=vlines,
        hlines=hlines,
    )


__all__ = ["PALETTE", "Series", "colour", "densify_roc", "line_chart", "remediation_chart", "roc_chart"]
