"""HTML for the federated audit: one self-contained page (inline SVG, no scripts), in the style of the model report.

Per topology, the figures of Gao 2024 (University of Zurich): a heatmap attacker × victim of the
headline metric in the final round; a heatmap victim × round for a chosen
attacker; the topology drawn from a networkx layout; held-out accuracy per
round. Above them the verdict (with a policy), the checks, and the topology
comparison table. Colours: white at AUC 0.5 (guessing), red above, blue below.
"""

from __future__ import annotations

import math
from typing import Any

import networkx as nx
import numpy as np

from privgate.report.charts import Series, colour, line_chart
from privgate.report.html import CSS
from privgate.report.jobs.federation import FederationReport, TopologyResult
from privgate.report.labels import interval
from privgate.report.numbers import num
from privgate.report.safe import csp_meta
from privgate.report.safe import html_text as escape

_STATUS_CLASS = {"pass": "pass", "fail": "fail", "inconclusive": "inc"}
EXTRA_CSS = ".heat text{font-size:10px} .grid2{display:flex;flex-wrap:wrap;gap:18px;align-items:flex-start}"


def _cell_colour(v: float | None, centre: float = 0.5, span: float = 0.25) -> str:
    if v is None or not math.isfinite(v):
        return "#eeeeee"
    t = max(-1.0, min(1.0, (v - centre) / span))
    if t >= 0:
        r, g, b = 255, round(255 * (1 - 0.8 * t)), round(255 * (1 - 0.85 * t))
    else:
        r, g, b = round(255 * (1 + 0.85 * t)), round(255 * (1 + 0.6 * t)), 255
    return f"#{r:02x}{g:02x}{b:02x}"


def heatmap(
    values: list[list[float | None]], rows: list[str], cols: list[str], title: str, row_label: str, col_label: str
) -> str:
    """An SVG heatmap with the value in every cell (2 decimals)."""
    cell = 34 if len(cols) <= 12 else max(14, 420 // max(len(cols), 1))
    left, top = 70, 44
    w, h = left + cell * len(cols) + 10, top + cell * len(rows) + 34
    out = [
        f"<svg class='heat' xmlns='http://www.w3.org/2000/svg' width='{w}' height='{h}' viewBox='0 0 {w} {h}' "
        f"role='img' aria-label='{escape(title)}' font-family='sans-serif' font-size='11'>",
        f"<rect width='{w}' height='{h}' fill='#fff'/>",
        f"<text x='{left}' y='14' font-weight='bold' font-size='12'>{escape(title)}</text>",
        f"<text x='{left + cell * len(cols) / 2}' y='{h - 6}' text-anchor='middle'>{escape(col_label)}</text>",
        f"<text transform='translate(12,{top + cell * len(rows) / 2}) rotate(-90)' "
        f"text-anchor='middle'>{escape(row_label)}</text>",
    ]
    for j, c in enumerate(cols):
        out.append(f"<text x='{left + j * cell + cell / 2}' y='{top - 6}' text-anchor='middle'>{escape(c)}</text>")
    for i, r in enumerate(rows):
        out.append(f"<text x='{left - 6}' y='{top + i * cell + cell / 2 + 4}' text-anchor='end'>{escape(r)}</text>")
        for j, v in enumerate(values[i]):
            x, y = left + j * cell, top + i * cell
            label = "" if v is None else f"{v:.2f}"[1:] if 0 <= v < 1 else f"{v:.1f}"
            out.append(
                f"<rect class='cell' x='{x}' y='{y}' width='{cell}' height='{cell}' fill='{_cell_colour(v)}' "
                f"stroke='#fff'><title>{escape(r)} → {escape(c)}: {escape(num(v))}</title></rect>"
            )
            if cell >= 24:
                out.append(f"<text x='{x + cell / 2}' y='{y + cell / 2 + 4}' text-anchor='middle'>{label}</text>")
    out.append("</svg>")
    return "".join(out)


def layout(graph: nx.Graph, kind: str, seed: int = 0) -> np.ndarray:
    """``[N, 2]`` positions in [−1, 1]² for drawing a topology of ``kind``: a circle for rings and the complete and
    empty graphs, the hub (node 0) in the centre for a star, a force-directed layout (Fruchterman & Reingold 1991)
    otherwise."""
    n = graph.number_of_nodes()
    if kind == "star" and n > 1:
        pos = nx.shell_layout(graph, nlist=[[0], list(range(1, n))])
    elif kind in ("ring", "fully", "none"):
        pos = nx.circular_layout(graph)
    else:
        pos = nx.spring_layout(graph, seed=int(seed))
    out = np.array([pos[i] for i in range(n)], dtype=float).reshape(n, 2)
    span = np.abs(out).max()
    return out / span if span > 0 else out


def topology_svg(result: TopologyResult, seed: int = 0, size: int = 260) -> str:
    """The topology drawn: nodes at a networkx layout, edges as lines, each node labelled and coloured by its
    final-round self-attack AUC."""
    g = nx.Graph()
    g.add_nodes_from(range(result.nodes))
    g.add_edges_from(tuple(e) for e in result.edges)
    name = str(result.topology.get("name"))
    pos = layout(g, str(result.topology.get("kind")), seed)
    pad = 24
    xy = [((p[0] + 1) / 2 * (size - 2 * pad) + pad, (1 - (p[1] + 1) / 2) * (size - 2 * pad) + pad) for p in pos]
    final = result.mia.values[-1]
    out = [
        f"<svg class='topology' xmlns='http://www.w3.org/2000/svg' width='{size}' height='{size}' "
        f"viewBox='0 0 {size} {size}' role='img' aria-label='topology {escape(name)}' font-family='sans-serif' "
        f"font-size='10'><rect width='{size}' height='{size}' fill='#fff'/>"
    ]
    for a, b in result.edges:
        out.append(
            f"<line class='edge' x1='{xy[a][0]:.1f}' y1='{xy[a][1]:.1f}' x2='{xy[b][0]:.1f}' y2='{xy[b][1]:.1f}' "
            f"stroke='#999'/>"
        )
    for i, (x, y) in enumerate(xy):
        out.append(
            f"<circle class='node' cx='{x:.1f}' cy='{y:.1f}' r='10' fill='{_cell_colour(final[i][i])}' stroke='#333'>"
            f"<title>{escape(result.node_names[i])}: self AUC {escape(num(final[i][i]))}</title></circle>"
            f"<text x='{x:.1f}' y='{y + 3.5:.1f}' text-anchor='middle'>{escape(result.node_names[i][:4])}</text>"
        )
    out.append("</svg>")
    return "".join(out)


def accuracy_chart(result: TopologyResult) -> str:
    rounds = list(range(1, result.rounds + 1))
    series = [
        Series(result.node_names[i], rounds, [result.accuracy.values[r][i] for r in range(result.rounds)], colour(i))
        for i in range(result.nodes)
    ]
    lo = min(min(v) for v in result.accuracy.values)
    return line_chart(
        series, x_range=(1, max(2, result.rounds)), y_range=(max(0.0, math.floor(lo * 10) / 10), 1.0), x_log=False,
        y_log=False, x_label="round", y_label="held-out accuracy", title="accuracy per round", width=420, height=300,
    )  # fmt: skip


def _td(v: Any, cls: str = "") -> str:
    c = f" class='{cls}'" if cls else ""
    return f"<td{c}>{escape('' if v is None else str(v))}</td>"


def _comparison(report: FederationReport) -> list[str]:
    h = [
        "<div class='scroll'><table id='comparison'><tr><th>topology</th><th>nodes × rounds</th><th>distribution</th>"
        "<th>self</th><th>1 hop</th><th>≥ 2 hops / unreachable</th><th>others</th><th>accuracy</th><th>training</th>"
        "</tr>"
    ]
    for t in report.topologies:
        s = t.summary
        hops = s.get("by_hop", {})
        far = [v for k, v in hops.items() if k != "1" and v is not None]
        train = t.training
        how = f"{train.get('engine', '')} {train.get('kernel', '')} {t.seconds.get('training', '')} s".strip()
        h.append(
            f"<tr>{_td(t.topology.get('name'))}{_td(f'{t.nodes} × {t.rounds}', 'num')}{_td(t.distribution)}"
            f"{_td(num(s.get('self')), 'num')}{_td(num(hops.get('1')), 'num')}"
            f"{_td(num(float(np.mean(far))) if far else '', 'num')}{_td(num(s.get('others')), 'num')}"
            f"{_td(num(s.get('mean_accuracy_final')), 'num')}{_td(how if t.training.get('engine') else '')}</tr>"
        )
    h.append("</table></div>")
    return h


def render_fl_html(report: FederationReport, attacker: int = 0) -> str:
    """The report as one self-contained HTML page; ``attacker`` picks the node of the victim × round heatmap."""
    title = "federated simulation" if report.kind == "simulation" else "federation audit"
    h = [
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
        csp_meta(styles=(CSS + EXTRA_CSS,)),
        "<meta name='viewport' content='width=device-width, initial-scale=1'>",
        f"<title>privgate {escape(title)}</title><style>{CSS}{EXTRA_CSS}</style></head><body>",
        f"<h1>privgate {escape(title)}</h1>",
    ]
    if report.verdict:
        cls = _STATUS_CLASS[report.verdict]
        h.append(f"<div class='verdict {cls}' id='verdict'>{escape(report.verdict.upper())}</div>")
    h.append(f"<p><strong>{escape(report.summary)}</strong></p>")
    h.append(
        "<p class='facts'>"
        + " · ".join(
            escape(s)
            for s in (
                f"attacks: {', '.join(report.attacks)}",
                f"TPR at FPR {report.fpr:g}",
                f"{report.confidence:.0%} pointwise intervals",
                f"seed {report.environment.get('seed')}",
                f"privgate {report.privgate_version}",
                f"{report.duration_s:.1f} s",
            )
        )
        + "</p>"
    )
    if report.checks:
        h.append("<h2>Checks</h2><div class='scroll'><table id='checks'><tr><th>status</th><th>check</th>"
                 "<th>attack</th><th>metric</th><th>value [CI]</th><th>max</th></tr>")  # fmt: skip
        for c in report.checks:
            cls = _STATUS_CLASS[c.status]
            h.append(
                f"<tr class='check {cls}'><td class='st {cls}'>{escape(c.status)}</td>{_td(c.id)}"
                f"{_td(c.chosen_attack or c.attack)}{_td(c.metric)}"
                f"{_td((num(c.value) + ' ' + interval(c.ci)).strip(), 'num')}"
                f"{_td(f'≤ {c.threshold:g}', 'num')}</tr><tr><td></td><td colspan='5' class='reason'>"
                f"{escape(c.reason)}</td></tr>"
            )
        h.append("</table></div>")
    h.append("<h2>Topologies compared (final round, AUC of the strongest attack)</h2>")
    h += _comparison(report)
    for t in report.topologies:
        name = str(t.topology.get("name"))
        a = min(max(attacker, 0), t.nodes - 1)
        final = t.mia.values[-1]
        by_round = [[t.mia.values[r][a][v] for r in range(t.rounds)] for v in range(t.nodes)]
        rounds = [str(r) for r in range(1, t.rounds + 1)]
        h.append(f"<h2 id='topology-{escape(name)}'>Topology {escape(name)}</h2>")
        h.append(
            f"<p class='facts'>{t.nodes} nodes, {t.rounds} rounds, {escape(t.distribution)}; shard sizes "
            f"{escape(str(t.shard_sizes))}; headline: {escape(t.mia.attack)} AUC, intervals at {t.mia.confidence:.4g}"
            "</p>"
        )
        h.append("<div class='grid2'>")
        h.append(
            "<figure>"
            + heatmap(final, t.node_names, t.node_names, "attacker × victim, final round", "attacker", "victim")
            + "<figcaption>Row: the attacking node's model; column: whose training data it is tested on.</figcaption>"
            "</figure>"
        )
        h.append(
            "<figure>"
            + heatmap(by_round, t.node_names, rounds, f"attacker {t.node_names[a]}: victim × round", "victim", "round")
            + "<figcaption>How much the chosen attacker infers of each node's data, round after round.</figcaption>"
            "</figure>"
        )
        h.append(f"<figure>{topology_svg(t)}<figcaption>Topology; node colour: final self-attack AUC.</figcaption>"
                 "</figure>")  # fmt: skip
        h.append(f"<figure>{accuracy_chart(t)}</figure></div>")
        h += [f"<p class='reason'>{escape(n)}</p>" for n in t.notes]
    if report.warnings:
        h.append("<h2>Warnings</h2><ul>" + "".join(f"<li>{escape(w)}</li>" for w in report.warnings) + "</ul>")
    h.append("</body></html>")
    return "\n".join(h) + "\n"


__all__ = ["accuracy_chart", "heatmap", "layout", "render_fl_html", "topology_svg"]
