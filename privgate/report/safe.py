"""Text from files made safe for every output dialect: one function per dialect, for every writer.

Everything a report shows may come from a file someone else controls (docs/threat-model.md), so a writer
never outputs such a string raw: it calls its dialect's function here — :func:`console`, :func:`clean`,
:func:`xml` / :func:`xml_tree`, :func:`deep`, :func:`md_text` / :func:`md_code` / :func:`md_cell`,
:func:`html_text` / :func:`html_attr`, :func:`png_data_uri` / :func:`checked_png_uri`, :func:`csp_meta`.
Every function takes any value (``None`` is ``""``), never raises, and returns text that cannot change the
structure of its dialect. What each dialect's function guarantees: docs/threat-model.md.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
import struct
import zlib
from html import escape as _html_escape
from typing import Any

from privgate.plaintext import MAX_TEXT, clean, no_surrogates, one_line, text

#: What XML 1.0 (5th ed., production [2] Char) does not allow, on top of the control characters :func:`clean` removes.
_NOT_XML = re.compile("[\ufffe\uffff]")
#: Markdown: the ASCII punctuation that can start markup in the middle of a line, backslash-escaped (CommonMark
#: 0.31 section 2.4; GFM): code spans "`", HTML and autolinks "<", entities "&", table pipes "|", emphasis "*" and
#: "_" (at a word's edge: inside a word "_" is no emphasis), strikethrough "~", images "!", GitHub's math "$", a
#: link's destination "](" and a link reference definition "]:", GFM's bare-URL autolinks ("://", "www.").
#: "[" and "]" alone make no link, so numbers and intervals stay readable.
_MD_PUNCT = re.compile(r"([\\`*~<>&|!$]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])|(?<=\])[(:]|:(?=//)|(?<=[Ww]{3})\.)")
#: Put after every "@": GFM autolinks an e-mail address ("foo@evil.example", also after "mailto:" or "xmpp:") while
#: it renders, and GitHub turns "@name" and "@org/team" into mentions that notify those people; neither a backslash
#: nor "&#64;" stops either (both are undone before the address is looked for), an invisible WORD JOINER (U+2060)
#: between "@" and the name does, and shows nothing.
_MD_AT = "@\u2060"
#: What makes a line a heading, block quote, list item, thematic break or setext underline: escaped when the text
#: starts with it, so the text stays a paragraph even where it starts a line (a list item's content).
_MD_BLOCK_START = re.compile(r"(?P<num>\d{1,9})[.)](?=[ \t]|$)|(?:#{1,6}|[+-])(?=[ \t]|$)|=+[ \t]*$|(?:-[ \t]*){3,}$")
#: What rich reads as a tag (rich.markup.RE_TAGS), with the backslashes before it; backslashes ending a text.
_RICH_TAG = re.compile(r"(\\*)(\[[a-z#/@][^[]*?])")
_TRAILING_BACKSLASHES = re.compile(r"\\+\Z")  # \Z: "$" would also match before a final newline
#: A backslash run before a "[" that is no tag (rich turns every "\\[" into "[").
_RICH_BACKSLASH_BRACKET = re.compile(r"(\\+)(\[)(?![a-z#/@][^[]*?])")
#: The largest PNG embedded in an HTML report.
MAX_PNG_BYTES = 8 << 20
#: The largest image (pixels) embedded.
MAX_PNG_PIXELS = 16 << 20
_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_PNG_CHUNKS = {b"IHDR", b"PLTE", b"IDAT", b"IEND", b"tRNS", b"gAMA", b"sRGB", b"pHYs"}
_PNG_URI = re.compile(r"data:image/png;base64,([A-Za-z0-9+/]*={0,2})")


def console(value: Any, *, newlines: bool = True) -> str:
    """Text to print through rich with markup on: control characters gone, ``[...]`` shown as typed.

    Like :func:`rich.markup.escape` (a backslash run before something
    tag-like is doubled and the bracket escaped), and a backslash run at the
    end is doubled too, so markup that follows (``f"[b]{console(s)}[/b]"``)
    stays markup whatever ``s`` ends with. Consoles print with ``emoji=False``
    (:func:`privgate.cli.guard.out_console`), so ``:smile:`` stays text.
    """
    s = _RICH_TAG.sub(lambda m: m.group(1) * 2 + "\\" + m.group(2), clean(value, newlines=newlines))
    s = _RICH_BACKSLASH_BRACKET.sub(r"\1\\\2", s)  # rich reads any "\[" as "[": keep a backslash typed there
    tail = _TRAILING_BACKSLASHES.search(s)
    return s + tail.group() if tail else s


def xml(value: Any) -> str:
    """Text allowed in an XML 1.0 document (attribute or element): forbidden characters removed.

    Escaping ``<``, ``&`` and quotes is left to the serialiser (ElementTree) or
    to :func:`html_text` for hand-written XML such as SVG.
    """
    return _NOT_XML.sub("", clean(value))


def xml_tree(root: Any) -> Any:
    """Every attribute value, text and tail of an ElementTree ``root`` through :func:`xml`, in place; returns it.

    Call it just before serialising: whatever went into the tree, the document is well-formed XML 1.0.
    """
    for el in root.iter():
        for k, v in list(el.attrib.items()):
            el.attrib[k] = xml(v)
        if el.text is not None:
            el.text = xml(el.text)
        if el.tail is not None:
            el.tail = xml(el.tail)
    return root


def deep(value: Any, fn: Any = None) -> Any:
    """``value`` with every string inside it (dict keys and values, list items) passed through ``fn``
    (:func:`clean` by default): for JSON documents such as SARIF logs, built from many report strings."""
    fn = fn or clean
    if isinstance(value, str):
        return fn(value)
    if isinstance(value, dict):
        return {deep(k, fn) if isinstance(k, str) else k: deep(v, fn) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [deep(v, fn) for v in value]
    return value


# --------------------------------------------------------------------------- Markdown (GitHub-flavoured)


def md_text(value: Any) -> str:
    """Text for GitHub-flavoured Markdown, shown literally wherever it goes: a paragraph, a list item, a cell.

    No link, image, autolink (a URL, ``www.``, an e-mail address, ``mailto:``
    or ``xmpp:``), @mention, code span, HTML tag, entity, emphasis, math or
    table pipe can start inside it, and it cannot start a heading, quote or
    list; newlines become spaces, so it stays in its block. Spaces at either
    end are dropped (Markdown drops them too).
    """
    out = _MD_PUNCT.sub(r"\\\1", one_line(value).strip(" ")).replace("@", _MD_AT)
    block = _MD_BLOCK_START.match(out)  # a heading, list item, rule or setext line if it started a line
    if block:
        at = block.end("num") if block.group("num") else 0  # "1\. x"; "\# x", "\- x", "\==="
        out = out[:at] + "\\" + out[at:]
    return out


def md_cell(value: Any) -> str:
    """Text for a GFM table cell (the same as :func:`md_text`, whose ``\\|`` cannot end the cell)."""
    return md_text(value)


def md_code(value: Any, *, in_table: bool = False) -> str:
    """``value`` as a GFM code span, however many backticks it holds: the fence is one longer than its longest run.

    Inside a code span nothing is interpreted (no tag, link or image). In a
    table (``in_table=True``) a ``|`` would still end the cell, so it is
    written ``\\|``, which GFM turns back into ``|`` inside tables.
    """
    s = one_line(value)
    if not s:
        return ""
    longest = max((len(m) for m in re.findall(r"`+", s)), default=0)
    fence = "`" * (longest + 1)
    if in_table:
        s = s.replace("|", "\\|")
    pad = " " if s[0] in "` " or s[-1] in "` " else ""
    return f"{fence}{pad}{s}{pad}{fence}"


# --------------------------------------------------------------------------- HTML


def html_text(value: Any) -> str:
    """Text for an HTML (or SVG) element's content: ``& < > " '`` escaped, control characters gone."""
    return _html_escape(xml(value), quote=True)


def html_attr(value: Any) -> str:
    """Text for a quoted HTML attribute value (either quote): the same escaping as :func:`html_text`."""
    return html_text(value)


def valid_png(data: Any) -> bool:
    """Whether ``data`` is a well-formed PNG of reasonable size (W3C PNG specification, 2003).

    Strict: the signature, an ``IHDR`` of 13 bytes first, every chunk's CRC,
    only the standard image chunks (no text or metadata chunks), an ``IEND``
    last with nothing after it, at most :data:`MAX_PNG_BYTES` bytes and
    :data:`MAX_PNG_PIXELS` pixels.
    """
    if not isinstance(data, (bytes, bytearray)) or len(data) > MAX_PNG_BYTES or not data.startswith(_PNG_SIGNATURE):
        return False
    pos, first, data = len(_PNG_SIGNATURE), True, bytes(data)
    while pos + 12 <= len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        tag = data[pos + 4 : pos + 8]
        body = data[pos + 8 : pos + 8 + length]
        end = pos + 12 + length
        if end > len(data) or tag not in _PNG_CHUNKS or (first != (tag == b"IHDR")):
            return False
        (crc,) = struct.unpack(">I", data[end - 4 : end])
        if zlib.crc32(tag + body) & 0xFFFFFFFF != crc:
            return False
        if tag == b"IHDR":
            if length != 13:
                return False
            w, h = struct.unpack(">II", body[:8])
            if not (w > 0 and h > 0 and w * h <= MAX_PNG_PIXELS):
                return False
        if tag == b"IEND":
            return end == len(data)
        first, pos = False, end
    return False


def png_data_uri(data: Any) -> str | None:
    """``data:image/png;base64,…`` for PNG bytes privgate made (checked by :func:`valid_png`), else None."""
    if not valid_png(data):
        return None
    return "data:image/png;base64," + base64.b64encode(bytes(data)).decode("ascii")


def checked_png_uri(value: Any) -> str | None:
    """A ``data:image/png;base64,`` URI (or bare base64 PNG) read from a report, re-made from its checked bytes.

    Anything else (another media type, a path, a URL, a quote, whitespace,
    bytes that are not a valid PNG) gives None: a report is data, and the HTML
    never embeds a string it did not encode itself.
    """
    if not isinstance(value, str) or len(value) > MAX_PNG_BYTES * 4 // 3 + 64:
        return None
    m = _PNG_URI.fullmatch(value)
    payload = m.group(1) if m else value if value.startswith("iVBOR") else None
    if payload is None:
        return None
    try:
        raw = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        return None
    return png_data_uri(raw)


def csp_meta(styles: tuple[str, ...] = (), scripts: tuple[str, ...] = ()) -> str:
    """A Content-Security-Policy ``<meta>`` for a self-contained report page; put it first in ``<head>``.

    Nothing may load from anywhere (``default-src 'none'``); images only from
    ``data:`` URIs; styles and scripts only the exact ``<style>`` / ``<script>``
    bodies given (by their SHA-256), so no injected script runs even if some
    text escaped its escaping. A page with no scripts passes none:
    ``script-src 'none'``.
    """

    def hashes(blocks: tuple[str, ...]) -> str:
        return (
            " ".join(
                "'sha256-" + base64.b64encode(hashlib.sha256(b.encode("utf-8")).digest()).decode() + "'" for b in blocks
            )
            or "'none'"
        )

    policy = (
        f"default-src 'none'; img-src data:; style-src {hashes(styles)}; script-src {hashes(scripts)}; "
        "base-uri 'none'; form-action 'none'; frame-src 'none'; object-src 'none'"
    )
    return f'<meta http-equiv="Content-Security-Policy" content="{policy}">'


__all__ = [
    "MAX_TEXT",
    "checked_png_uri",
    "clean",
    "console",
    "csp_meta",
    "deep",
    "html_attr",
    "html_text",
    "md_cell",
    "md_code",
    "md_text",
    "no_surrogates",
    "one_line",
    "png_data_uri",
    "text",
    "valid_png",
    "xml",
    "xml_tree",
]
