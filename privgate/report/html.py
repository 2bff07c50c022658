"""HTML: one self-contained page (no scripts, no external files) for people reviewing a model.

Safe to open whatever the report holds (docs/threat-model.md): text goes through :mod:`privgate.report.safe`,
a Content-Security-Policy allows no script or load, images are only PNGs privgate encoded, and no path the
report names is opened. Sections: verdict, checks, log-log ROC curves (TPR at low FPR matters: Carlini et
al. 2022, arXiv 2112.03570), attacks, the DP remediation plot, model-inversion images, warnings,
environment; charts are inline SVG.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path, PurePath
from typing import Any

import numpy as np

from privgate.io.png import png_bytes
from privgate.report.charts import remediation_chart, roc_chart
from privgate.report.exposed import view as exposed_view
from privgate.report.labels import (
    attack_label,
    check_fpr_label,
    interval,
    metric_label,
    origin_label,
    plain,
    rate_label,
    target_notes,
)
from privgate.report.model import Report
from privgate.report.numbers import num
from privgate.report.remediation import RemediationView
from privgate.report.remediation import view as remediation_view
from privgate.report.safe import checked_png_uri, csp_meta, png_data_uri, valid_png
from privgate.report.safe import html_text as escape

_STATUS_CLASS = {"pass": "pass", "fail": "fail", "inconclusive": "inc"}
#: Keys of attack extras that hold images (model-inversion reconstructions and their references).
IMAGE_KEY_HINTS = ("image", "reconstruction", "inversion", "original", "prototype")
MAX_IMAGES = 32

CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px auto;max-width:1100px;
color:#222;padding:0 16px}
h1{font-size:22px;margin:0 0 4px} h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #ddd;padding-bottom:4px}
.verdict{display:inline-block;padding:6px 14px;border-radius:6px;font-weight:700;font-size:18px;color:#fff;margin:8px 0}
.verdict.pass{background:#2e7d32}.verdict.fail{background:#c62828}.verdict.inc{background:#ef8f00}
.facts{color:#555;margin:4px 0 0} table{border-collapse:collapse;margin:6px 0;width:100%} .scroll{overflow-x:auto}
th,td{border:1px solid #ddd;padding:4px 8px;text-align:left;vertical-align:top} th{background:#f5f5f5}
td.num{font-variant-numeric:tabular-nums;white-space:nowrap}
.st{font-weight:700;white-space:nowrap} .st.pass{color:#2e7d32}.st.fail{color:#c62828}.st.inc{color:#b26a00}
.reason{color:#555;font-size:12.5px} .charts{display:flex;flex-wrap:wrap;gap:16px}
figure{margin:0;max-width:100%;min-width:0} figure svg{display:block;max-width:100%;height:auto}
figcaption{color:#555;font-size:12.5px;max-width:560px}
.imgs{display:flex;flex-wrap:wrap;gap:6px;margin:4px 0 12px} .imgs figure{text-align:center;font-size:11px;color:#666}
.imgs img{image-rendering:pixelated;border:1px solid #ccc;background:#fff}
.imgs img.tile{width:72px;height:72px} .imgs img.grid{max-width:100%;min-width:240px}
.muted{color:#777} code{background:#f3f3f3;padding:0 3px;border-radius:3px}
"""


# --------------------------------------------------------------------------- images


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
    if isinstance(item, str):  # from the report: only a checked PNG, re-encoded here
        uri = checked_png_uri(item)
        return [uri] if uri else []
    out = []
    for img in _as_images(item, shape):
        if img.ndim == 3 and img.shape[2] not in (1, 3, 4):
            continue
        uri = png_data_uri(png_bytes(_to_uint8(img)))
        if uri:
            out.append(uri)
    return out


def attach_images(report: Report, files: Mapping[str | Path, bytes]) -> Report:
    """``report`` with the PNG files privgate wrote in this run, ``{artefact path: bytes}``, for the HTML to embed.

    The HTML writer never reads a path a report names (a report is data; one
    read back by ``report render`` may name any file): it embeds an artefact
    only when its bytes were attached here, by the run that wrote them, and
    are a valid PNG (:func:`privgate.report.safe.valid_png`). The images are
    a private attribute: never in the JSON, never read from it.
    """
    images = {str(p): bytes(b) for p, b in files.items() if str(p).lower().endswith(".png") and valid_png(b)}
    report._images.update(images)
    return report


def _artefact_uri(report: Report, value: Any) -> str | None:
    """A data URI for an image artefact: bytes privgate made, attached bytes for a path, or a checked PNG data URI.

    A path is looked up among the images attached by :func:`attach_images`;
    it is never opened.
    """
    if isinstance(value, dict):
        value = value.get("path") or value.get("data") or value.get("base64")
    if isinstance(value, (bytes, bytearray)):  # in memory, from an attack of this run (Python API)
        return png_data_uri(value)
    if not isinstance(value, str) or not value:
        return None
    if value in report._images:
        return png_data_uri(report._images[value])
    return checked_png_uri(value)


def inversion_images(report: Report) -> tuple[list[tuple[str, list[str], bool]], list[str]]:
    """(caption, data URIs, is a ready-made grid) for every image an attack left in its extras, and the
    image artefacts that could not be embedded (shown as their paths, as text).

    Understood: image artefacts (``extras["artefacts"]["reconstructions.png"]``
    as PNG bytes or a ``data:image/png;base64`` URI, or a path privgate wrote
    in this run, see :func:`attach_images`) and image-like arrays under keys
    such as ``reconstructions`` (one image, a batch, or flat vectors reshaped by
    ``extras["image_shape"]`` or to a square).
    """
    groups, missing = [], []
    for a in report.attacks:
        extras = a.extras or {}
        shape = next((extras[k] for k in ("image_shape", "shape", "input_shape") if extras.get(k) is not None), None)
        for key, value in extras.items():
            if key in ("artefacts", "artifacts"):
                # {name: bytes | data URI} in memory, or [path, ...] as saved by privgate.io.artefacts
                items = (
                    value.items()
                    if isinstance(value, dict)
                    else ((str(v), v) for v in value)
                    if isinstance(value, list)
                    else ()
                )
                for name, item in items:
                    if not str(name).lower().endswith(".png"):
                        continue
                    uri = _artefact_uri(report, item)
                    if uri:
                        groups.append((f"{a.name}: {PurePath(str(name)).name}", [uri], True))
                    elif isinstance(item, str):
                        missing.append(f"{a.name}: {item}")
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
                for v in value[:MAX_IMAGES]:
                    uris += _data_uri(v)
            else:
                uris = _data_uri(value, shape_k)
            if uris:
                groups.append((f"{a.name}: {key}", uris[:MAX_IMAGES], False))
    return groups, missing


# --------------------------------------------------------------------------- exposed records


def _exposed_html(report: Report) -> list[str]:
    """The most exposed members: one row each, every attack's rank and FPR, the record's image for image data."""
    ex = exposed_view(report)
    if ex is None:
        return []
    names = sorted(ex.records[0]["attacks"], key=lambda n: (n != ex.attack, n))
    images = [_artefact_uri(report, p) if p else None for p in ex.images]
    h = [
        f"<h2>Most exposed members (by {escape(ex.attack)})</h2>",
        f"<p class='muted'>{escape(ex.intro)}</p>",
        "<div class='scroll'><table id='exposed'><tr>",
    ]
    head = ex.header[:4] + (["image"] if any(images) else []) + [f"{n}: score · rank · FPR · TPR" for n in names]
    h.append("".join(f"<th>{escape(c)}</th>" for c in head) + "</tr>")
    for row, rec, uri in zip(ex.rows, ex.records, images):
        cells = "".join(_td(v, "num") for v in row[:4])
        if any(images):
            cells += (
                f"<td class='imgs'><img class='tile' alt='member {escape(rec.get('member_index'))}' "
                f"src='{escape(uri)}'></td>"
                if uri
                else "<td></td>"
            )
        for n in names:
            a = rec["attacks"][n]
            flagged = " st fail" if a["fpr"] <= 0.01 else ""
            cells += _td(f"{a['score']:.4g} · {a['rank']} · {a['fpr']:.2%} · {a['tpr']:.2%}", "num" + flagged)
        h.append(f"<tr>{cells}</tr>")
    h.append("</table></div>")
    return h


# --------------------------------------------------------------------------- page


def _td(v: Any, cls: str = "") -> str:
    c = f" class='{cls}'" if cls else ""
    return f"<td{c}>{escape('' if v is None else str(v))}</td>"


def _head(report: Report) -> list[str]:
    """The page's head, the verdict, the summary and the run's facts."""
    pol, tgt, data = report.policy, report.target, report.data or {}
    vclass = _STATUS_CLASS[report.verdict]
    h: list[str] = [
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
        csp_meta(styles=(CSS,)),  # no script, nothing loaded: only this page's own style and data: images
        "<meta name='viewport' content='width=device-width, initial-scale=1'>",
        f"<title>privgate {escape(report.verdict.upper())}: {escape(str(pol.get('name')))} · "
        f"{escape(str(tgt.get('path')))}</title>",
        f"<style>{CSS}</style></head><body>",
        f"<h1>privgate report · policy <code>{escape(str(pol.get('name')))}</code></h1>",
        f"<div class='verdict {vclass}' id='verdict'>{escape(report.verdict.upper())}</div>",
        f"<p><strong>{escape(report.summary)}</strong></p>",
        "<p class='facts'>"
        + " · ".join(
            escape(s)
            for s in (
                f"target {tgt.get('path')} ({tgt.get('format')})",
                f"{data.get('members', {}).get('n', '?')} members / "
                f"{data.get('nonmembers', {}).get('n', '?')} non-members",
                f"{pol.get('sensitivity')}, release: {pol.get('release')}",
                f"{pol.get('confidence', 0.95):.1%} confidence, decision: {pol.get('decision')}".replace(".0%", "%")
                + (" (extends " + " → ".join(p["name"] for p in pol["extends"]) + ")" if pol.get("extends") else ""),
                f"seed {report.environment.get('seed')}",
                f"privgate {report.privgate_version}",
                f"started {report.started}, {report.duration_s:.1f} s",
            )
        )
        + "</p>",
    ]
    return h + [f"<p class='facts target'>{escape(line)}</p>" for line in target_notes(report)]


def _checks(report: Report) -> list[str]:
    """The checks: status, value with its interval, threshold and sample sizes, then the reason."""
    h = ["<h2>Checks</h2>"]
    if not report.checks:
        return [*h, "<p>The policy requires no checks.</p>"]
    h.append(
        "<div class='scroll'><table "
        "id='checks'><tr><th>status</th><th>check</th><th>attack</th><th>metric</th><th>value "
        "[CI]</th><th>max</th><th>n in/out</th></tr>"
    )
    for c in report.checks:
        cls = _STATUS_CLASS[c.status]
        value = (num(c.value) + " " + interval(c.ci) + " " + check_fpr_label(c)).strip()
        origin = origin_label(c, report)
        reason = (f"{origin}: " if origin else "") + c.reason
        h.append(
            f"<tr class='check {cls}'><td class='st {cls}'>{escape(c.status)}</td>{_td(c.id)}"
            f"{_td(attack_label(c))}{_td(metric_label(c))}{_td(value, 'num')}{_td(f'≤ {c.threshold:g}', 'num')}"
            f"{_td(f'{c.n_members}/{c.n_nonmembers}', 'num')}</tr>"
            f"<tr><td></td><td colspan='6' class='reason'>{escape(reason)}</td></tr>"
        )
    h.append("</table></div>")
    return h


def _attacks(report: Report) -> list[str]:
    """The attacks: their ROC curves, then a row each (why it did not run, or its numbers)."""
    h = ["<h2>Attacks</h2>"]
    chart = roc_chart(report.attacks)
    if chart:
        h.append(
            f"<div class='charts'><figure id='roc'>{chart}<figcaption>Each attack's ROC on the evaluation "
            f"split, log-log: "
            "the low false-positive end (left) is where membership inference is dangerous; the dashed "
            "diagonal is guessing. "
            "Rates below one example in the split cannot be shown.</figcaption></figure></div>"
        )
    if not report.attacks:
        return [*h, "<p class='muted'>No attacks were run.</p>"]
    h.append(
        "<div class='scroll'><table id='attacks'><tr><th>attack</th><th>access</th><th>status</th><th>AUC "
        "[CI]</th><th>accuracy [CI]</th><th>TPR @ 0.1% FPR</th><th>TPR @ 1% FPR</th><th>n "
        "in/out</th><th>s</th></tr>"
    )
    for a in report.attacks:
        if a.status != "ran":
            h.append(
                f"<tr>{_td(a.name)}{_td(a.threat_model)}<td class='st inc'>{escape(a.status)}</td><td "
                f"colspan='6' class='reason'>{escape(a.reason or '')}</td></tr>"
            )
            continue
        rates = {round(p.fpr, 6): rate_label(p) for p in a.tpr_at_fpr}
        h.append(
            f"<tr>{_td(a.name)}{_td(a.threat_model)}<td class='st "
            f"pass'>ran</td>{_td((num(a.auc) + ' ' + interval(a.auc_ci)).strip(), 'num')}"
            f"{_td((num(a.accuracy) + ' ' + interval(a.accuracy_ci)).strip(), 'num')}"
            f"{_td(rates.get(0.001, ''), 'num')}{_td(rates.get(0.01, ''), 'num')}"
            f"{_td(f'{a.n_members}/{a.n_nonmembers}', 'num')}{_td(f'{a.seconds:.2f}', 'num')}</tr>"
        )
    h.append("</table></div>")
    return h


def _inversion(report: Report) -> list[str]:
    """Model inversion's reconstructions, embedded; a report read back names the images it cannot embed."""
    images, not_embedded = inversion_images(report)
    if not (images or not_embedded):
        return []
    h = ["<h2>Model inversion</h2>"]
    for caption, uris, grid in images:
        h.append(f"<p class='muted'>{escape(caption)}</p><div class='imgs inversion'>")
        if grid:
            h += [f"<img class='grid' alt='{escape(caption)}' src='{escape(u)}'>" for u in uris]
        else:
            h += [
                f"<figure><img class='tile' alt='{escape(caption)} #{i}' "
                f"src='{escape(u)}'><figcaption>#{i}</figcaption></figure>"
                for i, u in enumerate(uris)
            ]
        h.append("</div>")
    if not_embedded:  # a report read back: its paths are names, never opened
        h.append(
            "<p class='muted' id='not-embedded'>Saved beside the report, not embedded: "
            + ", ".join(f"<code>{escape(n)}</code>" for n in not_embedded[:MAX_IMAGES])
            + "</p>"
        )
    return h


def _remediation(report: Report) -> list[str]:
    """The ε search: the chosen ε, its chart and steps, and the DP statement of the hardened model."""
    rem = remediation_view(report)
    if rem is None:
        return []
    h = [f"<h2>{escape(rem.title)}</h2>"]
    head = escape(rem.head) if rem.head else "No ε was chosen."
    if rem.chosen_epsilon is not None:
        head = f"Chosen ε: <strong>{rem.chosen_epsilon:g}</strong>"
    facts = [f"{escape(str(k))}: {escape(plain(v))}" for k, v in rem.facts.items()]
    h.append(f"<p>{' · '.join([head, *facts])}</p>")
    if rem.epsilon_line:
        h.append(f"<p id='dp-epsilon-line'><strong>{escape(rem.epsilon_line)}</strong></p>")
    rchart = remediation_chart(rem, {c.id: c.threshold for c in report.checks})
    if rchart:
        h.append(
            f"<div class='charts'><figure id='remediation'>{rchart}<figcaption>Each step of the ε search: "
            f"utility (solid) should stay above its floor while leakage (dashed) falls under the "
            f"policy's bounds.</figcaption></figure></div>"
        )
    if rem.rows:
        h.append(
            "<div class='scroll'><table id='remediation-steps'><tr>"
            + "".join(f"<th>{escape('ε' if k == rem.epsilon_key else k)}</th>" for k in rem.columns)
            + "</tr>"
        )
        for r in rem.rows:
            h.append("<tr>" + "".join(_td(plain(r.get(k)), "num") for k in rem.columns) + "</tr>")
        h.append("</table></div>")
    h += [f"<p class='reason'><em>{escape(k.replace('_', ' '))}</em>: {escape(v)}</p>" for k, v in rem.notes.items()]
    return h + _dp_statement(rem)


def _dp_statement(rem: RemediationView) -> list[str]:
    """The hardened model's DP statement (Ponomareva et al. 2023, arXiv 2303.00654, §5.5), when it has one."""
    if not rem.statement:
        return []
    h = [f"<h3>{escape(rem.statement_title)}</h3><table id='dp-statement'>"]
    h += [f"<tr><th>{escape(k)}</th><td>{escape(v)}</td></tr>" for k, v in rem.statement]
    h.append("</table>")
    if rem.hyperparameters:
        h.append("<table id='dp-hyperparameters'><tr><th>hyper-parameter</th><th>value</th><th>source</th></tr>")
        h += [
            f"<tr><td>{escape(n)}</td><td>{escape(v)}</td><td>{escape(s)}</td></tr>" for n, v, s in rem.hyperparameters
        ]
        h.append("</table>")
    h.append("<ul class='caveats'>" + "".join(f"<li>{escape(c)}</li>" for c in rem.caveats) + "</ul>")
    return h


def _warnings_and_environment(report: Report) -> list[str]:
    h = []
    if report.warnings:
        h.append("<h2>Warnings</h2><ul>" + "".join(f"<li>{escape(w)}</li>" for w in report.warnings) + "</ul>")
    env = report.environment or {}
    versions = ", ".join(f"{k} {v}" for k, v in (env.get("versions") or {}).items() if v)
    h.append(
        f"<h2>Environment</h2><p class='muted'>python {escape(str(env.get('python')))} · "
        f"{escape(str(env.get('platform')))} · {escape(versions)}</p>"
    )
    ran_on = [  # where the run computed and why (environment.device_reason, threads_reason: privgate.report.provenance)
        f"{label} {escape(str(env[key]))}" + (f" — {escape(str(env[why]))}" if env.get(why) else "")
        for label, key, why in (("device", "device", "device_reason"), ("threads", "threads", "threads_reason"))
        if env.get(key) is not None
    ]
    if len(env.get("devices") or []) > 1:  # reference-model groups spread over several GPUs (--devices)
        ran_on.append(f"reference-model groups over {escape(', '.join(map(str, env['devices'])))}")
    if ran_on:
        h.append("<ul class='muted'>" + "".join(f"<li>{line}</li>" for line in ran_on) + "</ul>")
    return h


def render_html(report: Report) -> str:
    """The report as one self-contained HTML page."""
    h = _head(report) + _checks(report) + _attacks(report) + _inversion(report) + _remediation(report)
    h += _exposed_html(report)  # after the remediation plot: which records to fix
    h += _warnings_and_environment(report)
    h.append("</body></html>")
    return "\n".join(h) + "\n"


__all__ = ["attach_images", "inversion_images", "render_html"]
