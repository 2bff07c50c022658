"""Hostile strings through every report writer, each output parsed back as its consumer would (issue 26).

A property test: random strings built from the pieces attackers use (rich
markup, terminal escape sequences, HTML and Markdown injection, XML-forbidden
characters, lone surrogates) go into every string field of a real report, and
every writer's output is parsed back — JSON with ``json``, JUnit with
``xml.etree``, SARIF with ``json``, Markdown with markdown-it-py (CommonMark
plus GFM tables and strikethrough, raw HTML on as on GitHub) and with cmark-gfm
(GitHub's own renderer, whose autolinks turn URLs and e-mail addresses into
links; issue 36 added addresses and @mentions to the pieces), HTML with
``html.parser``, the console through rich — and checked for what it must not
contain: a script, an event handler, a link, an image, a raw HTML tag, a
terminal control sequence, a broken table row. Then the functions of
:mod:`privgate.report.safe` one by one, against the same strings.
"""

from __future__ import annotations

import io
import json
import re
import xml.etree.ElementTree as ET
from html import unescape
from html.parser import HTMLParser

import cmarkgfm
import pytest
from cmarkgfm.cmark import Options
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt
from pipeline_cases import leaky_tree
from rich.console import Console
from rich.text import Text

import privgate
from privgate import Report
from privgate.report import render
from privgate.report.console import print_report
from privgate.report.safe import (
    checked_png_uri,
    clean,
    console,
    html_attr,
    html_text,
    md_code,
    md_text,
    no_surrogates,
    one_line,
    xml,
)

PIECES = [
    "<script>alert(1)</script>",
    "<img src=x onerror=alert(1)>",
    "' onerror='alert(1)' x='",
    '" onload="alert(1)',
    "`",
    "``",
    "|",
    "\\",
    "[/bold]",
    "[link=http://evil.example]click[/link]",
    "[x]",
    "\x1b]8;;http://evil.example\x07",
    "\x1b[31m",
    "\x9b2J",
    "\x00",
    "\x07",
    "\ufffe",
    "\ud800",
    "\u202e",
    "\n",
    "\r",
    "\t",
    "![i](http://evil.example/i.png)",
    "[a](javascript:alert(1))",
    "[r]: http://evil.example",
    "<http://evil.example>",
    "http://evil.example",
    "www.evil.example",
    "&lt;",
    "&#60;",
    "$x$",
    "*",
    "_",
    "~~",
    "# ",
    "1. ",
    "- ",
    "> ",
    "<details>",
    "</details>",
    "<!--",
    "]]>",
    "data:image/png;base64,iVBOR' onerror='x",
    "/etc/passwd",
    "foo@evil.example",
    "mailto:x@evil.example",
    "xmpp:y@evil.example/r",
    "@octocat",
    "@org/team",
    "ftp://evil.example",
]
HOSTILE = st.lists(st.sampled_from(PIECES) | st.text(max_size=6), max_size=8).map("".join)
EXAMPLES = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])

#: Tags privgate's HTML writer itself writes; anything else came from a report string.
HTML_TAGS = {
    "html", "head", "meta", "title", "style", "body", "h1", "h2", "div", "p", "strong", "code", "table", "tr", "th",
    "td", "figure", "figcaption", "svg", "rect", "text", "line", "polyline", "circle", "g", "tspan", "img", "ul",
    "li", "em",
}  # fmt: skip
CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]")


@pytest.fixture(scope="module")
def base() -> Report:
    model, members, nonmembers = leaky_tree()
    return privgate.check(model, "internal", members, nonmembers)


def _hostile(base: Report, s: str) -> Report:
    """``base`` with ``s`` in every string field a file or a saved report can set."""
    d = base.model_dump()
    d["summary"] = s
    d["policy"].update(name=s, description=s, source=s + ".yaml", sensitivity=s, decision=s)
    d["policy"]["extends"] = [{"name": s}]
    d["target"].update(path=s, format=s)
    d["data"]["members"]["source"] = s
    d["warnings"] = [s, "ok " + s]
    d["environment"].update(platform=s, python=s)
    for c in d["checks"]:
        c.update(id=s, attack=s, reason=s, policy=s)
    for a in d["attacks"]:
        a.update(name=s, threat_model=s, reason=s)
        a["extras"] = {"artefacts": [s, s + ".png"], "reconstructions": [s]}
    if d.get("exposed"):
        d["exposed"]["attack"] = s
    return Report.model_validate(d)


def _markdown_ok(text: str, report: Report) -> None:
    github = cmarkgfm.github_flavored_markdown_to_html(text, options=Options.CMARK_OPT_UNSAFE)
    assert "<a " not in github, "an autolink (URL, www., e-mail, mailto:, xmpp:) from a report string"
    md = MarkdownIt("commonmark", {"html": True}).enable(["table", "strikethrough"])
    tokens = md.parse(text)
    flat = [t for tok in tokens for t in ([tok] + list(tok.children or []))]
    assert not [t for t in flat if t.type in ("image", "link_open")], "a link or image from a report string"
    raw = [t.content.strip() for t in flat if t.type in ("html_inline", "html_block")]
    assert all(re.fullmatch(r"(<details><summary>Reasons</summary>|</details>)\s*", r) for r in raw), raw
    # the checks table keeps one row of 7 cells per check
    html = md.render(text)
    table = html[html.index("<th>status</th>") :].split("</table>")[0]
    rows = table.split("<tr>")[1:]
    assert len(rows) == len(report.checks) and all(r.count("<td") == 7 for r in rows)


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


def _html_ok(page: str) -> None:
    p = _Tags()
    p.feed(page)
    names = {t for t, _ in p.tags}
    assert names <= HTML_TAGS, names - HTML_TAGS
    assert not [a for _, attrs in p.tags for a in attrs if a.startswith("on")], "an event handler attribute"
    assert all(attrs["src"].startswith("data:image/png;base64,") for t, attrs in p.tags if t == "img")
    head = [t for t in p.tags if t[0] == "meta"]
    assert head[1][1]["http-equiv"] == "Content-Security-Policy" and "script-src 'none'" in head[1][1]["content"]
    assert "/etc/passwd" not in page or "root:" not in page


@EXAMPLES
@given(s=HOSTILE)
def test_every_writer_survives_hostile_strings_and_parses_back(base, s):
    rep = _hostile(base, s)
    # JSON: the report round-trips (lone surrogates and controls are JSON escapes, never raw bytes)
    out = render(rep, "json")
    assert json.loads(out)["summary"] == no_surrogates(rep.summary)
    # JUnit: well-formed XML 1.0, the suite named after the (cleaned) policy
    root = ET.fromstring(render(rep, "junit").encode("utf-8"))
    assert root.find("testsuite").get("name") == "privgate." + xml(s)
    # SARIF: JSON without control characters in any string
    sarif = render(rep, "sarif")
    json.loads(sarif)
    assert not CONTROL.search(json.loads(sarif)["runs"][0]["properties"]["summary"])
    # Markdown, as GitHub renders it
    _markdown_ok(render(rep, "markdown"), rep)
    # HTML: only privgate's own tags, no handler, only checked PNGs, the CSP first
    _html_ok(render(rep, "html"))
    # console: no exception, no escape sequence but rich's own colours, no hyperlink
    for terminal in (False, True):
        buf = io.StringIO()
        con = Console(file=buf, force_terminal=terminal, width=160, highlight=False, emoji=False)
        print_report(rep, con, verbose=True)
        text = re.sub("\x1b\\[[0-9;]*m", "", buf.getvalue())
        assert CONTROL.sub("", text.replace("\n", "")) == text.replace("\n", ""), repr(text[:300])
        assert "\x1b]8" not in buf.getvalue()


@pytest.fixture(scope="module")
def ldp_base():
    """A claim-audit report (another job of the family, with its own Markdown section and HTML page)."""
    from privgate import LdpAuditSettings, RunOptions, api

    settings = LdpAuditSettings(epsilons=(2.0,), trials=100, adversaries=("input_perturbation",))
    return api.audit_ldp(settings, RunOptions(seed=0))


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(s=HOSTILE)
def test_another_jobs_writers_survive_hostile_strings(ldp_base, s):
    """The writers every job shares, and the claim audit's own Markdown section and HTML page."""
    d = ldp_base.model_dump()
    d["summary"] = s
    d["policy"]["name"] = s
    d["mechanism"]["name"] = s
    d["source"]["description"] = s
    d["warnings"] = [s]
    for c in d["checks"]:
        c.update(id=s, reason=s)
    rep = type(ldp_base).model_validate(d)
    assert json.loads(render(rep, "json"))["summary"] == no_surrogates(s)
    assert ET.fromstring(render(rep, "junit").encode("utf-8")).find("testsuite") is not None
    json.loads(render(rep, "sarif"))
    md = MarkdownIt("commonmark", {"html": True}).enable(["table", "strikethrough"])
    flat = [t for tok in md.parse(render(rep, "markdown")) for t in [tok, *(tok.children or [])]]
    assert not [t for t in flat if t.type in ("image", "link_open")]
    assert all(t.content.strip() in ("<details><summary>Reasons</summary>", "</details>")
               for t in flat if t.type in ("html_inline", "html_block"))  # fmt: skip
    _html_ok(render(rep, "html"))
    buf = io.StringIO()
    from privgate.report.show import show

    show(rep, Console(file=buf, force_terminal=True, width=160, highlight=False, emoji=False))
    assert not CONTROL.search(re.sub("\x1b\\[[0-9;]*m", "", buf.getvalue()).replace("\n", ""))


@settings(max_examples=200, deadline=None)
@given(s=HOSTILE)
@example(s="\\\n")  # a backslash before a final newline: once doubled after the newline, escaping the markup
def test_each_dialect_shows_the_text_as_typed(s):
    c = clean(s)
    assert not CONTROL.search(c.replace("\n", ""))
    # rich: the markup-escaped text, followed by markup as the console report writes it, prints as typed
    assert Text.from_markup(f"[bold]{console(s)}[/bold] [red]x[/]", emoji=False).plain == c + " x"
    assert Text.from_markup(console(s), emoji=False).plain.rstrip("\\") == c.rstrip("\\")
    # XML: an attribute and an element holding the text parse back to it
    el = ET.fromstring(f"<a b='{html_attr(s)}'>{html_text(s)}</a>")
    assert el.get("b") == re.sub("[\n\t]", " ", xml(s)) and (el.text or "") == xml(s)
    # Markdown: a paragraph (or a list item) of the text renders as exactly the text, nothing else
    md = MarkdownIt("commonmark", {"html": True}).enable(["table", "strikethrough"])
    for prefix, tag in (("", "p"), ("- ", "li")):
        html = md.render(prefix + md_text(s)).strip()
        want = one_line(s).strip(" ")
        if not want.strip():  # markdown-it trims Unicode spaces too (GitHub keeps them); nothing to compare
            continue
        assert html.startswith("<ul>\n<li>" if tag == "li" else "<p>"), html
        inner = re.sub(r"^(<ul>\n<li>|<p>)|(</li>\n</ul>|</p>)$", "", html)
        shown = unescape(inner).replace("\u2060", "")  # md_text's word joiner after "@": invisible
        assert "<" not in inner.replace("&lt;", "") and shown.strip() == want.replace("\u2060", "").strip(), (s, html)
        # GitHub's renderer (cmark-gfm, autolinks on) makes no link, and GitHub no @mention, of the text
        github = cmarkgfm.github_flavored_markdown_to_html(prefix + md_text(s), options=Options.CMARK_OPT_UNSAFE)
        assert "<a " not in github and not re.search(r"(?:^|\W)@[A-Za-z0-9]", unescape(re.sub("<[^>]+>", " ", github)))
    # a code span holds the text whatever its backticks
    span = md_code(s)
    if one_line(s).strip():
        html = md.render(span).strip()
        assert html.startswith("<p><code>") and html.endswith("</code></p>") and html.count("<code>") == 1, html


def test_only_valid_pngs_become_data_uris():
    from privgate.io.png import png_bytes

    good = png_bytes(__import__("numpy").zeros((4, 4), "uint8"))
    import base64

    uri = "data:image/png;base64," + base64.b64encode(good).decode()
    assert checked_png_uri(uri) == uri
    for bad in (
        uri + "' onerror='alert(1)",
        uri.replace("image/png", "image/svg+xml"),
        "data:image/png;base64," + base64.b64encode(good[:-4] + b"xxxx").decode(),  # bad CRC
        "data:image/png;base64," + base64.b64encode(b"<svg onload=alert(1)>").decode(),
        "/etc/passwd",
        "http://evil.example/i.png",
    ):
        assert checked_png_uri(bad) is None, bad
