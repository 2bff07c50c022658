"""HTML: one self-contained page (no scripts, no external files) for people reviewing a model.

Sections: the verdict; the checks table with reasons; ROC curves of every attack
that ran, on log-log axes — the way membership-inference results are read, since
what matters is the true-positive rate at low false-positive rates (Carlini et
al. 2022, arXiv 2112.03570); the attacks table; the DP remediation search as an
ε–utility–leakage plot when the report has one; model-inversion
reconstructions when an attack left images in its extras; warnings and the
environment. Charts are inline SVG, images inline PNG data URIs.
"""

from __future__ import annotations

import base64
import colorsys
import math
import struct
import zlib
from dataclasses import dataclass
from html import escape
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from privgate.report.model import AttackSummary, Report
from privgate.report.remediation import RemediationView
from privgate.report.remediation import view as remediation_view
from privgate.report.text import attack_label, interval, metric_label, num

#: Line colours: Tableau's 10, then 10 more (navy, maroon, dark green, goldenrod, magenta, black, slate blue,
#: teal, yellow-green, dark slate grey) — 20 distinct colours, more than privgate has attacks.
PALETTE = (
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22",
    "#000080", "#800000", "#006400", "#daa520", "#ff00ff", "#000000", "#6a5acd", "#008080", "#9acd32", "#2f4f4f",
)
_STATUS_CLASS = {"pass": "pass", "fail": "fail", "inconclusive": "inc"}
#: Keys of attack extras that hold images (model-inversion reconstructions and their references).
IMAGE_KEY_HINTS = ("image", "reconstruction", "inversion", "original", "prototype")
MAX_IMAGES = 32

CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px auto;max-width:1100px;color:#222;padding:0 16px}
h1{font-size:22px;margin:0 0 4px} h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #ddd;padding-bottom:4px}
.verdict{display:inline-block;padding:6px 14px;border-radius:6px;font-weight:700;font-size:18px;color:#fff;margin:8px 0}
.verdict.pass{background:#2e7d32}.verdict.fail{background:#c62828}.verdict.inc{background:#ef8f00}
.facts{color:#555;margin:4px 0 0} table{border-collapse:collapse;margin:6px 0;width:100%} .scroll{overflow-x:auto}
th,td{border:1px solid #ddd;padding:4px 8px;text-align:left;vertical-align:top} th{background:#f5f5f5}
td.num{font-variant-numeric:tabular-nums;white-space:nowrap}
.st{font-weight:700;white-space:nowrap} .st.pass{color:#2e7d32}.st.fail{color:#c62828}.st.inc{color:#b26a00}
.reason{color:#555;font-size:12.5px} .charts{display:flex;flex-wrap:wrap;gap:16px}
figure{margin:0} figcaption{color:#555;font-size:12.5px;max-width:560px}
.imgs{display:flex;flex-wrap:wrap;gap:6px;margin:4px 0 12px} .imgs figure{text-align:center;font-size:11px;color:#666}
.imgs img{image-rendering:pixelated;border:1px solid #ccc;background:#fff} .imgs img.tile{width:72px;height:72px} .imgs img.grid{max-width:100%;min-width:240px}
.muted{color:#777} code{background:#f3f3f3;padding:0 3px;border-radius:3px}
"""


# --------------------------------------------------------------------------- charts


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
    pw, ph = width - left - right, height - top - bottom
    lh = 16
    col_w = min(width - left, max((len(s.name) for s in series), default=0) * 6.6 + 40)
    cols = max(1, int((width - left) // col_w)) if series else 1
    legend_h = (math.ceil(len(series) / cols) * lh + 10) if series else 0
    full_height = height + legend_h
    fx = (lambda v: math.log10(v)) if x_log else (lambda v: v)
    fy = (lambda v: math.log10(v)) if y_log else (lambda v: v)
    x0, x1 = fx(x_range[0]), fx(x_range[1])
    y0, y1 = fy(y_range[0]), fy(y_range[1])

    def px(v: float) -> float:
        v = min(max(v, x_range[0]), x_range[1])
        return left + (fx(v) - x0) / (x1 - x0) * pw

    def py(v: float) -> float:
        v = min(max(v, y_range[0]), y_range[1])
        return top + ph - (fy(v) - y0) / (y1 - y0) * ph

    out = [f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{full_height}' viewBox='0 0 {width} {full_height}' role='img' aria-label='{escape(title)}' font-family='sans-serif' font-size='11'>"]
    out.append(f"<rect x='0' y='0' width='{width}' height='{full_height}' fill='#fff'/>")
    out.append(f"<text x='{left + pw / 2}' y='18' text-anchor='middle' font-size='13' font-weight='bold'>{escape(title)}</text>")
    xt = _log_ticks(*x_range) if x_log else _linear_ticks(*x_range)
    yt = _log_ticks(*y_range) if y_log else _linear_ticks(*y_range)
    for t in xt:
        if x_range[0] - 1e-12 <= t <= x_range[1] + 1e-12:
            X = px(t)
            out.append(f"<line x1='{X:.1f}' y1='{top}' x2='{X:.1f}' y2='{top + ph}' stroke='#e6e6e6'/>")
            out.append(f"<text x='{X:.1f}' y='{top + ph + 16}' text-anchor='middle'>{_tick_label(t, x_log)}</text>")
    for t in yt:
        if y_range[0] - 1e-12 <= t <= y_range[1] + 1e-12:
            Y = py(t)
            out.append(f"<line x1='{left}' y1='{Y:.1f}' x2='{left + pw}' y2='{Y:.1f}' stroke='#e6e6e6'/>")
            out.append(f"<text x='{left - 6}' y='{Y + 4:.1f}' text-anchor='end'>{_tick_label(t, y_log)}</text>")
    out.append(f"<rect x='{left}' y='{top}' width='{pw}' height='{ph}' fill='none' stroke='#999'/>")
    out.append(f"<text x='{left + pw / 2}' y='{height - 8}' text-anchor='middle'>{escape(x_label)}</text>")
    out.append(f"<text transform='translate(14,{top + ph / 2}) rotate(-90)' text-anchor='middle'>{escape(y_label)}</text>")
    if diagonal:
        lo, hi = max(x_range[0], y_range[0]), min(x_range[1], y_range[1])
        out.append(f"<line x1='{px(lo):.1f}' y1='{py(lo):.1f}' x2='{px(hi):.1f}' y2='{py(hi):.1f}' stroke='#888' stroke-dasharray='4 4'/>")
    for v, label in vlines:
        X = px(v)
        out.append(f"<line x1='{X:.1f}' y1='{top}' x2='{X:.1f}' y2='{top + ph}' stroke='#444' stroke-dasharray='2 3'/>")
        out.append(f"<text x='{X + 4:.1f}' y='{top + 12}' fill='#444'>{escape(label)}</text>")
    for v, label in hlines:
        Y = py(v)
        out.append(f"<line x1='{left}' y1='{Y:.1f}' x2='{left + pw}' y2='{Y:.1f}' stroke='#444' stroke-dasharray='2 3'/>")
        out.append(f"<text x='{left + pw - 4}' y='{Y - 4:.1f}' fill='#444' text-anchor='end'>{escape(label)}</text>")
    for s in series:
        pts = [(px(x), py(y)) for x, y in zip(s.xs, s.ys) if _ok(x) and _ok(y)]
        if not pts:
            continue
        path = " ".join(f"{x:.1f},{y:.1f}" for x, y in pts)
        dash = " stroke-dasharray='6 3'" if s.dashed else ""
        out.append(f"<polyline class='series' data-name='{escape(s.name)}' points='{path}' fill='none' stroke='{s.color}' stroke-width='2'{dash}/>")
        if s.markers:
            out += [f"<circle cx='{x:.1f}' cy='{y:.1f}' r='3' fill='{s.color}'/>" for x, y in pts]
    # legend below the plot and its axis label, row by row
    for i, s in enumerate(series):
        row, col = divmod(i, cols)
        lx, y = left + col * col_w, height + row * lh + 8
        dash = " stroke-dasharray='6 3'" if s.dashed else ""
        out.append(f"<g class='legend' data-name='{escape(s.name)}'><line x1='{lx:.1f}' y1='{y}' x2='{lx + 22:.1f}' y2='{y}' stroke='{s.color}' stroke-width='2'{dash}/>")
        out.append(f"<text x='{lx + 28:.1f}' y='{y + 4}'>{escape(s.name)}</text></g>")
    out.append("</svg>")
    return "".join(out)


def _ok(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _floor_decade(v: float) -> float:
    return 10.0 ** math.floor(math.log10(v) + 1e-9)


def densify_roc(fpr: list[float], tpr: list[float], lo: float, per_segment: int = 12) -> tuple[list[float], list[float]]:
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
    rows = sorted((r for r in rem.rows if _ok(r.get(rem.epsilon_key)) and r[rem.epsilon_key] > 0), key=lambda r: r[rem.epsilon_key])
    eps = [float(r[rem.epsilon_key]) for r in rows]
    series = []

    def in_unit(k: str) -> bool:
        return all(0.0 <= r[k] <= 1.0 for r in rows if _ok(r.get(k)))

    leakage = rem.leakage_keys
    if all(in_unit(k) for k in rem.utility_keys) and any(in_unit(k) for k in leakage):
        leakage = [k for k in leakage if in_unit(k)]  # one 0..1 axis; ε bounds and the like stay in the table
    keys = [(k, False) for k in rem.utility_keys] + [(k, True) for k in leakage]
    values = []
    for i, (k, dashed) in enumerate(keys):
        ys = [float(r[k]) if _ok(r.get(k)) else float("nan") for r in rows]
        values += [y for y in ys if math.isfinite(y)]
        series.append(Series(k, eps, ys, colour(i), dashed=dashed, markers=True))
    if not values:
        return None
    ylo, yhi = (0.0, 1.0) if 0.0 <= min(values) and max(values) <= 1.0 else (min(values), max(values) if max(values) > min(values) else min(values) + 1)
    xlo, xhi = min(eps), max(eps)
    if xlo == xhi:
        xlo, xhi = xlo / 2, xhi * 2
    xlo, xhi = xlo / 1.3, xhi * 1.3
    vlines = [(rem.chosen_epsilon, f"chosen ε = {rem.chosen_epsilon:g}")] if rem.chosen_epsilon is not None and rem.chosen_epsilon > 0 else []
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


# --------------------------------------------------------------------------- images


def png_bytes(img: np.ndarray) -> bytes:
    """A minimal PNG (8-bit grayscale, RGB or RGBA) of a uint8 array ``[h, w]`` or ``[h, w, c]``."""
    img = np.ascontiguousarray(img, dtype=np.uint8)
    h, w = img.shape[:2]
    if img.ndim == 3 and img.shape[2] == 1:
        img = img[:, :, 0]
    color = 0 if img.ndim == 2 else {3: 2, 4: 6}[img.shape[2]]
    raw = b"".join(b"\x00" + img[y].tobytes() for y in range(h))

    def chunk(tag: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)

    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, color, 0, 0, 0)) + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b"")


def _to_uint8(a: np.ndarray) -> np.ndarray:
    lo, hi = float(np.min(a)), float(np.max(a))
    scaled = np.zeros_like(a, dtype=float) if hi <= lo else (a - lo) / (hi - lo)
    return np.round(scaled * 255).astype(np.uint8)


def _square(n: int) -> int | None:
    r = int(round(math.sqrt(n)))
    return r if r * r == n and r > 1 else None


def _as_images(value: Any, shape: Any = None) -> list[np.ndarray]:
    """Images from an array-like: one image, a batch, or flat vectors (reshaped by ``shape`` or to a square)."""
    try:
        a = np.asarray(value, dtype=float)
    except (TypeError, ValueError):
        return []
    if a.size == 0 or not np.all(np.isfinite(a)):
        return []
    if shape is not None:
        try:
            shp = tuple(int(s) for s in shape)
            per = int(np.prod(shp))
            if a.size % per == 0:
                return [b.reshape(shp) for b in a.reshape(-1, per)]
        except (TypeError, ValueError):
            pass
    if a.ndim == 1:
        r = _square(a.size)
        return [a.reshape(r, r)] if r else []
    if a.ndim == 2:
        r = _square(a.shape[1])
        if r and r >= 4 and a.shape[0] != a.shape[1]:
            return [row.reshape(r, r) for row in a]
        return [a]
    if a.ndim == 3:
        if a.shape[2] in (3, 4) and a.shape[0] > 4:
            return [a]
        return [img for img in a]
    if a.ndim == 4:
        return [np.transpose(img, (1, 2, 0)) if img.shape[0] in (1, 3) else img for img in a]
    return []


def _data_uri(item: Any, shape: Any = None) -> list[str]:
    if isinstance(item, str):
        if item.startswith("data:image/"):
            return [item]
        if item.startswith("iVBOR"):
            return ["data:image/png;base64," + item]
        return []
    out = []
    for img in _as_images(item, shape):
        if img.ndim == 3 and img.shape[2] not in (1, 3, 4):
            continue
        out.append("data:image/png;base64," + base64.b64encode(png_bytes(_to_uint8(img))).decode())
    return out


_IMAGE_SUFFIXES = {".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".gif": "image/gif", ".svg": "image/svg+xml"}


def _artefact_uri(name: str, value: Any) -> str | None:
    """A data URI for an image artefact given as bytes, base64 text, a data URI or a file path."""
    mime = _IMAGE_SUFFIXES.get(Path(name).suffix.lower())
    if mime is None:
        return None
    if isinstance(value, dict):
        value = value.get("path") or value.get("data") or value.get("base64")
    if isinstance(value, (bytes, bytearray)):
        return f"data:{mime};base64," + base64.b64encode(bytes(value)).decode()
    if not isinstance(value, str) or not value:
        return None
    if value.startswith("data:image/"):
        return value
    p = Path(value)
    try:
        if len(value) < 4096 and p.is_file():
            return f"data:{mime};base64," + base64.b64encode(p.read_bytes()).decode()
    except OSError:
        return None
    if value.startswith("iVBOR") or (mime != "image/png" and len(value) > 64):
        return f"data:{mime};base64,{value}"
    return None


def inversion_images(attacks: list[AttackSummary]) -> list[tuple[str, list[str], bool]]:
    """(caption, data URIs, is a ready-made grid) for every image an attack left in its extras.

    Understood: image artefacts (``extras["artefacts"]["reconstructions.png"]``
    as bytes, base64, a data URI or a file path, e.g. the grid written by the
    inversion attack) and image-like arrays under keys such as
    ``reconstructions`` (one image, a batch, or flat vectors reshaped by
    ``extras["image_shape"]`` or to a square).
    """
    groups = []
    for a in attacks:
        extras = a.extras or {}
        shape = next((extras[k] for k in ("image_shape", "shape", "input_shape") if extras.get(k) is not None), None)
        for key, value in extras.items():
            if key in ("artefacts", "artifacts"):
                # {name: bytes | base64 | path} in memory, or [path, ...] as saved by privgate.artefacts
                items = value.items() if isinstance(value, dict) else ((str(v), v) for v in value) if isinstance(value, list) else ()
                for name, item in items:
                    uri = _artefact_uri(str(name), item)
                    if uri:
                        groups.append((f"{a.name}: {Path(str(name)).name}", [uri], True))
                continue
            if not any(h in key.lower() for h in IMAGE_KEY_HINTS) or key == "image_shape":
                continue
            shape_k = shape
            if isinstance(value, dict):
                shape_k = value.get("shape", shape)
                value = value.get("images", value.get("data"))
            if value is None:
                continue
            uris: list[str] = []
            if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
                for v in value:
                    uris += _data_uri(v)
            else:
                uris = _data_uri(value, shape_k)
            if uris:
                groups.append((f"{a.name}: {key}", uris[:MAX_IMAGES], False))
    return groups


# --------------------------------------------------------------------------- page


def _td(v: Any, cls: str = "") -> str:
    c = f" class='{cls}'" if cls else ""
    return f"<td{c}>{escape('' if v is None else str(v))}</td>"


def _fmt(v: Any) -> str:
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, float):
        return f"{v:.4g}"
    return "" if v is None else str(v)


def render_html(report: Report) -> str:
    """The report as one self-contained HTML page."""
    pol, tgt, data = report.policy, report.target, report.data or {}
    vclass = _STATUS_CLASS[report.verdict]
    h: list[str] = [
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
        "<meta name='viewport' content='width=device-width, initial-scale=1'>",
        f"<title>privgate {escape(report.verdict.upper())}: {escape(str(pol.get('name')))} · {escape(str(tgt.get('path')))}</title>",
        f"<style>{CSS}</style></head><body>",
        f"<h1>privgate report · policy <code>{escape(str(pol.get('name')))}</code></h1>",
        f"<div class='verdict {vclass}' id='verdict'>{escape(report.verdict.upper())}</div>",
        f"<p><strong>{escape(report.summary)}</strong></p>",
        "<p class='facts'>"
        + " · ".join(
            escape(s)
            for s in (
                f"target {tgt.get('path')} ({tgt.get('format')})",
                f"{data.get('members', {}).get('n', '?')} members / {data.get('nonmembers', {}).get('n', '?')} non-members",
                f"{pol.get('sensitivity')}, release: {pol.get('release')}",
                f"{pol.get('confidence', 0.95):.0%} confidence, decision: {pol.get('decision')}",
                f"seed {report.environment.get('seed')}",
                f"privgate {report.privgate_version}",
                f"started {report.started}, {report.duration_s:.1f} s",
            )
        )
        + "</p>",
    ]

    h.append("<h2>Checks</h2>")
    if report.checks:
        h.append("<div class='scroll'><table id='checks'><tr><th>status</th><th>check</th><th>attack</th><th>metric</th><th>value [CI]</th><th>max</th><th>n in/out</th></tr>")
        for c in report.checks:
            cls = _STATUS_CLASS[c.status]
            h.append(
                f"<tr class='check {cls}'><td class='st {cls}'>{escape(c.status)}</td>{_td(c.id)}{_td(attack_label(c))}{_td(metric_label(c))}"
                f"{_td((num(c.value) + ' ' + interval(c.ci)).strip(), 'num')}{_td(f'≤ {c.threshold:g}', 'num')}{_td(f'{c.n_members}/{c.n_nonmembers}', 'num')}</tr>"
                f"<tr><td></td><td colspan='6' class='reason'>{escape(c.reason)}</td></tr>"
            )
        h.append("</table></div>")
    else:
        h.append("<p>The policy requires no checks.</p>")

    h.append("<h2>Attacks</h2>")
    chart = roc_chart(report.attacks)
    if chart:
        h.append(
            f"<div class='charts'><figure id='roc'>{chart}<figcaption>Each attack's ROC on the evaluation split, log-log: "
            "the low false-positive end (left) is where membership inference is dangerous; the dashed diagonal is guessing. "
            "Rates below one example in the split cannot be shown.</figcaption></figure></div>"
        )
    if report.attacks:
        h.append("<div class='scroll'><table id='attacks'><tr><th>attack</th><th>access</th><th>status</th><th>AUC [CI]</th><th>accuracy [CI]</th><th>TPR @ 0.1% FPR</th><th>TPR @ 1% FPR</th><th>n in/out</th><th>s</th></tr>")
        for a in report.attacks:
            if a.status != "ran":
                h.append(f"<tr>{_td(a.name)}{_td(a.threat_model)}<td class='st inc'>{escape(a.status)}</td><td colspan='6' class='reason'>{escape(a.reason or '')}</td></tr>")
                continue
            rates = {round(p.fpr, 6): ((num(p.tpr) + " " + interval(p.ci)).strip() if p.resolvable else "too few non-members") for p in a.tpr_at_fpr}
            h.append(
                f"<tr>{_td(a.name)}{_td(a.threat_model)}<td class='st pass'>ran</td>{_td((num(a.auc) + ' ' + interval(a.auc_ci)).strip(), 'num')}"
                f"{_td((num(a.accuracy) + ' ' + interval(a.accuracy_ci)).strip(), 'num')}{_td(rates.get(0.001, ''), 'num')}{_td(rates.get(0.01, ''), 'num')}"
                f"{_td(f'{a.n_members}/{a.n_nonmembers}', 'num')}{_td(f'{a.seconds:.2f}', 'num')}</tr>"
            )
        h.append("</table></div>")
    else:
        h.append("<p class='muted'>No attacks were run.</p>")

    images = inversion_images(report.attacks)
    if images:
        h.append("<h2>Model inversion</h2>")
        for caption, uris, grid in images:
            h.append(f"<p class='muted'>{escape(caption)}</p><div class='imgs inversion'>")
            if grid:
                h += [f"<img class='grid' alt='{escape(caption)}' src='{u}'>" for u in uris]
            else:
                h += [f"<figure><img class='tile' alt='{escape(caption)} #{i}' src='{u}'><figcaption>#{i}</figcaption></figure>" for i, u in enumerate(uris)]
            h.append("</div>")

    rem = remediation_view(report)
    if rem is not None:
        h.append("<h2>Remediation (DP-SGD)</h2>")
        head = f"Chosen ε: <strong>{rem.chosen_epsilon:g}</strong>" if rem.chosen_epsilon is not None else "No ε was chosen."
        facts = [f"{escape(str(k))}: {escape(_fmt(v))}" for k, v in rem.facts.items()]
        h.append(f"<p>{' · '.join([head, *facts])}</p>")
        rchart = remediation_chart(rem, {c.id: c.threshold for c in report.checks})
        if rchart:
            h.append(f"<div class='charts'><figure id='remediation'>{rchart}<figcaption>Each step of the ε search: utility (solid) should stay above its floor while leakage (dashed) falls under the policy's bounds.</figcaption></figure></div>")
        if rem.rows:
            h.append("<div class='scroll'><table id='remediation-steps'><tr>" + "".join(f"<th>{escape('ε' if k == rem.epsilon_key else k)}</th>" for k in rem.columns) + "</tr>")
            for r in rem.rows:
                h.append("<tr>" + "".join(_td(_fmt(r.get(k)), "num") for k in rem.columns) + "</tr>")
            h.append("</table></div>")
        h += [f"<p class='reason'><em>{escape(k.replace('_', ' '))}</em>: {escape(v)}</p>" for k, v in rem.notes.items()]

    if report.warnings:
        h.append("<h2>Warnings</h2><ul>" + "".join(f"<li>{escape(w)}</li>" for w in report.warnings) + "</ul>")
    env = report.environment or {}
    versions = ", ".join(f"{k} {v}" for k, v in (env.get("versions") or {}).items() if v)
    h.append(f"<h2>Environment</h2><p class='muted'>python {escape(str(env.get('python')))} · {escape(str(env.get('platform')))} · {escape(versions)}</p>")
    h.append("</body></html>")
    return "\n".join(h) + "\n"


__all__ = ["PALETTE", "Series", "colour", "densify_roc", "inversion_images", "line_chart", "png_bytes", "remediation_chart", "render_html", "roc_chart"]
