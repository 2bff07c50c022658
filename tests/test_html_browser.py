"""The HTML report in a real browser: headless Chromium on a desktop and a phone screen.

The page is opened over the DevTools protocol (``tests/browser.py``), which
reports every console message, uncaught exception and failed load; the test
then asks the browser where things were laid out and looks at the screenshot.
On CI Chromium must be there (``.ci/run`` installs it): a missing browser is a
failure there, and a skip only on a developer's machine.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from browser import Browser, find_chromium
from pipeline_cases import leaky_tree
from test_reports import POLICY, REMEDIATION, decode_png

import privgate
from privgate import Report
from privgate.report import render as render_report

#: Where the layout is read from inside the page (CSS pixels, getBoundingClientRect).
PROBE = {
    "layout": "[document.documentElement.scrollWidth, window.innerWidth, document.documentElement.scrollHeight]",
    "verdict": """(() => { const v = document.getElementById('verdict'); const r = v.getBoundingClientRect();
        return {text: v.textContent, background: getComputedStyle(v).backgroundColor, left: r.left, top: r.top,
                right: r.right, bottom: r.bottom, visible: v.checkVisibility()}; })()""",
    "checks": """[...document.querySelectorAll('#checks tr.check')].map(tr => { const r = tr.getBoundingClientRect();
        const id = tr.cells[1]; const ir = id.getBoundingClientRect();
        return {id: id.textContent, status: tr.cells[0].textContent, height: r.height, width: r.width,
                id_left: ir.left, id_right: ir.right, visible: tr.checkVisibility() && id.checkVisibility()}; })""",
    "roc": """(() => { const s = document.querySelector('#roc svg'); const r = s.getBoundingClientRect();
        const curves = [...s.querySelectorAll('polyline.series')].map(p => { const b = p.getBoundingClientRect();
            return {name: p.dataset.name, stroke: p.getAttribute('stroke'), width: b.width, height: b.height}; });
        return {left: r.left, top: r.top + window.scrollY, width: r.width, height: r.height, curves: curves}; })()""",
    "remediation": """(() => { const r = document.querySelector('#remediation svg').getBoundingClientRect();
        return [r.left, r.top + window.scrollY, r.width, r.height]; })()""",
}


@pytest.fixture(scope="module")
def chromium() -> Iterator[Browser]:
    """One Chromium for the module (each page in a browser context of its own): a start is a few CPU-seconds."""
    exe = find_chromium()
    if exe is None:
        if os.environ.get("CI"):
            pytest.fail(
                "Chromium is not installed, and on CI the browser test must run: .ci/run installs it "
                "(apt-get install -y chromium)"
            )
        pytest.skip("Chromium is not installed (CI installs it; locally: apt-get install -y chromium)")
    with Browser(exe) as browser:
        yield browser


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Report:
    """A failing report of three attacks with a remediation section: every part of the page."""
    policy = tmp_path_factory.mktemp("policy") / "policy.yaml"
    policy.write_text(POLICY)
    model, members, nonmembers = leaky_tree()
    return privgate.check(model, str(policy), members, nonmembers).model_copy(update={"remediation": REMEDIATION})


@pytest.fixture(scope="module")
def page_url(report, tmp_path_factory) -> str:
    page = tmp_path_factory.mktemp("html") / "report.html"
    page.write_text(render_report(report, "html"), encoding="utf-8")
    return page.as_uri()


def _pixels(img: np.ndarray, colour: str, box: tuple[float, float, float, float]) -> int:
    """How many pixels of the screenshot ``img`` (decoded once) inside ``box`` (left, top, width, height) are within
    40 of ``colour``."""
    left, top, width, height = (int(round(v)) for v in box)
    region = img[top : top + height, left : left + width]
    rgb = np.array([int(colour[i : i + 2], 16) for i in (1, 3, 5)])
    return int((np.abs(region - rgb).sum(axis=2) < 40).sum())


def _save(png: bytes, name: str, tmp_path: Path) -> Path:
    """Keep the screenshot for people to look at: in ``PRIVGATE_SCREENSHOTS=DIR`` when set, else the temp folder."""
    folder = Path(os.environ.get("PRIVGATE_SCREENSHOTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_bytes(png)
    return folder / name


def test_the_browser_reports_console_errors_and_failed_loads(chromium, tmp_path):
    """The error check can fail: a page that logs an error, throws and misses an image is caught three times."""
    bad = tmp_path / "bad.html"
    bad.write_text(
        "<!DOCTYPE html><html><body><script>console.error('boom'); missing();</script>"
        "<img src='nowhere.png'></body></html>"
    )
    page = chromium.render(bad.as_uri(), width=800, height=600)
    assert len(page.errors) == 3, page.errors
    assert any("boom" in e for e in page.errors) and any("missing is not defined" in e for e in page.errors)
    assert any("nowhere.png" in e for e in page.errors)


@pytest.mark.parametrize("width, height, mobile", [(1100, 900, False), (390, 844, True)], ids=["desktop", "phone"])
def test_html_report_renders_in_chromium(chromium, report, page_url, width, height, mobile, tmp_path):
    page = chromium.render(page_url, width=width, height=height, mobile=mobile, evaluate=PROBE)
    shot = _save(page.screenshot, f"report-{width}px.png", tmp_path)
    img = decode_png(page.screenshot)[:, :, :3].astype(int)
    assert page.errors == [], page.errors
    scroll_width, inner_width, _ = page.values["layout"]
    assert inner_width == width and scroll_width <= width, (
        f"the page is {scroll_width} px wide on a {width} px screen ({shot})"
    )

    v = page.values["verdict"]  # the verdict: on the first screen, red, and says FAIL
    assert v["visible"] and v["text"] == "FAIL" and v["background"] == "rgb(198, 40, 40)"
    assert 0 <= v["left"] < v["right"] <= width and 0 <= v["top"] < v["bottom"] <= height
    assert _pixels(img, "#c62828", (v["left"], v["top"], v["right"] - v["left"], v["bottom"] - v["top"])) > 500

    rows = page.values["checks"]  # every check has a row whose id cell is laid out on the screen's width
    assert [r["id"] for r in rows] == [c.id for c in report.checks]
    assert [r["status"] for r in rows] == [c.status for c in report.checks]
    for r in rows:
        assert r["visible"] and r["height"] > 10 and 0 <= r["id_left"] < r["id_right"] <= width, r

    roc = page.values["roc"]  # the ROC: one curve per attack that ran, drawn inside a chart that fits the screen
    ran = [a for a in report.attacks if a.status == "ran"]
    assert [c["name"].split(" (AUC")[0] for c in roc["curves"]] == [a.name for a in ran]
    assert roc["left"] >= 0 and roc["left"] + roc["width"] <= width and roc["height"] > 150
    for c in roc["curves"]:
        assert c["width"] > roc["width"] / 3 and c["height"] > roc["height"] / 3, c
    box = (roc["left"], roc["top"], roc["width"], roc["height"])
    last = roc["curves"][-1]["stroke"]  # drawn last, so on top where curves overlap
    assert _pixels(img, last, box) > 100, f"the ROC curve {last} is not in the screenshot ({shot})"
    assert len({c["stroke"] for c in roc["curves"]}) == len(ran)
    rem = page.values["remediation"]  # the ε search plot fits too, its utility curve drawn
    assert rem[0] >= 0 and rem[0] + rem[2] <= width and _pixels(img, "#1f77b4", rem) > 100


#: Script that would record itself in ``window.pwned`` if a report string ever became markup.
PAYLOADS = [
    "<script>window.pwned=(window.pwned||[]).concat('script')</script>",
    "<img src=x onerror=\"window.pwned=(window.pwned||[]).concat('img')\">",
    "' onerror='window.pwned=(window.pwned||[]).concat(\"attr\")' x='",
    '" onload="window.pwned=(window.pwned||[]).concat(\'dq\')" x="',
    "<svg onload=\"window.pwned=(window.pwned||[]).concat('svg')\"></svg>",
    "</title><script>window.pwned=(window.pwned||[]).concat('title')</script>",
    "<style>body{background:url(http://evil.example/x)}</style>",
]
HOSTILE_PROBE = {
    "pwned": "window.pwned || null",
    "loads": "performance.getEntriesByType('resource').map(e => e.name)",
    "scripts": "document.scripts.length",
}


def test_a_crafted_report_runs_no_script_and_reads_no_file_in_chromium(chromium, report, tmp_path):
    """issue 26: ``report render`` of a crafted JSON, opened in headless Chromium. Before: an artefact entry
    "data:image/png' onerror='…' x='" ran its script, and an artefact naming a local file was embedded."""
    import base64
    import json
    import subprocess

    secret = tmp_path / "secret.png"
    secret.write_text("the-secret-only-this-file-holds")
    d = json.loads(report.to_json())
    payload = " ".join(PAYLOADS)
    d["summary"] = d["policy"]["name"] = d["target"]["path"] = payload
    d["warnings"] = PAYLOADS
    for c in d["checks"]:
        c["reason"] = c["id"] = payload
    d["attacks"][0]["extras"]["artefacts"] = {
        "x.png": "data:image/png' onerror='window.pwned=[\"uri\"]' x='",
        "y.png": str(secret),
        "file.png": secret.as_uri(),
    }
    d["attacks"][1]["extras"]["artefacts"] = [str(secret)]
    (tmp_path / "crafted.json").write_text(json.dumps(d))
    from privgate_cli import PRIVGATE

    r = subprocess.run(
        [*PRIVGATE, "report", "render", "crafted.json", "--html", "page.html"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    html = (tmp_path / "page.html").read_text()
    assert base64.b64encode(secret.read_bytes()).decode()[:16] not in html
    page = chromium.render((tmp_path / "page.html").as_uri(), width=1100, height=900, evaluate=HOSTILE_PROBE)
    assert page.values["pwned"] is None, page.values["pwned"]
    assert page.values["scripts"] == 0
    assert page.values["loads"] == [], page.values["loads"]  # nothing fetched: no file, no URL
    assert page.errors == [], page.errors  # nothing even tried (a CSP refusal would be logged here)

    # the probe can fail: the same payloads in a page that does not escape them run
    raw = tmp_path / "raw.html"
    raw.write_text(f"<!DOCTYPE html><html><body><p>{payload}</p><img src='{secret.name}'></body></html>")
    bad = chromium.render(raw.as_uri(), width=800, height=600, evaluate=HOSTILE_PROBE)
    assert set(bad.values["pwned"]) >= {"script", "img", "svg"} and bad.values["loads"]
