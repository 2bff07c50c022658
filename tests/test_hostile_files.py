"""Hostile strings and files, tried as an attacker would (issue 26): reports that cannot run code or read files,
outputs that respect special files, markup escaped, limits everywhere.

The sibling of ``test_hostile_input.py`` (whose helpers it uses): every case runs the CLI in a subprocess
and parses the outputs back as their readers do (xml.etree, json, markdown-it-py as GitHub renders, html.parser);
the crafted report in headless Chromium is in ``test_html_browser.py``, the property test over every writer in
``test_safe_text.py``.
"""

from __future__ import annotations

import base64
import io
import json
import os
import socket
import stat
import subprocess
import xml.etree.ElementTree as ET
import zipfile
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
from cases import run_cli
from markdown_it import MarkdownIt
from test_hostile_input import CHECK, HEAD, _bad, _check, _validate

#: A policy name and description an attacker would write into a pull request.
EVIL_NAME = "team[/bogus] [link=http://evil.example]click[/link] [x] <img src=x onerror=alert(1)> `tick` a|b"
EVIL_DESCRIPTION = "![i](http://evil.example/i.png) <script>alert(1)</script>"
#: A model file name with rich markup, a backtick that would end a Markdown code span, a tag and a pipe.
EVIL_MODEL = Path("runs[", "final]", "m`<img src=x onerror=alert(1)>`|[best].pt")


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict]] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))


def _html_is_inert(page: str) -> list[tuple[str, dict]]:
    """Parse ``page``: no script, no event handler, images only PNG data URIs, a CSP that forbids scripts."""
    p = _Tags()
    p.feed(page)
    assert not [t for t, _ in p.tags if t in ("script", "iframe", "object", "embed", "base", "form", "a")]
    assert not [(t, a) for t, attrs in p.tags for a in attrs if a.lower().startswith("on")]
    assert all(a["src"].startswith("data:image/png;base64,") for t, a in p.tags if t == "img")
    csp = [a for t, a in p.tags if t == "meta" and a.get("http-equiv") == "Content-Security-Policy"]
    assert len(csp) == 1 and "default-src 'none'" in csp[0]["content"] and "script-src 'none'" in csp[0]["content"]
    return p.tags


def _markdown_is_inert(text: str) -> None:
    """GitHub's reading of ``text``: no image, no link, no HTML but the summary's own <details>."""
    md = MarkdownIt("commonmark", {"html": True}).enable(["table", "strikethrough"])
    flat = [t for tok in md.parse(text) for t in [tok, *(tok.children or [])]]
    assert not [t.type for t in flat if t.type in ("image", "link_open")]
    raw = [t.content.strip() for t in flat if t.type in ("html_inline", "html_block")]
    assert all(r in ("<details><summary>Reasons</summary>", "</details>") for r in raw), raw


@pytest.fixture(scope="module")
def hostile_run(case, tmp_path_factory):
    """One ``check`` of a hostile policy on a hostile model path, writing every format."""
    d = tmp_path_factory.mktemp("hostile")
    (d / "p.yaml").write_text(
        f"name: {json.dumps(EVIL_NAME)}\ndescription: {json.dumps(EVIL_DESCRIPTION)}\n"
        "sensitivity: internal\nrelease: api\n" + CHECK
    )
    (d / EVIL_MODEL).parent.mkdir(parents=True)
    (d / EVIL_MODEL).write_bytes(case.safe_ts.read_bytes())
    outs = ["--json", "r.json", "--junit", "r.xml", "--sarif", "r.sarif", "--markdown", "r.md", "--html", "r.html"]
    r = run_cli(
        "check", str(EVIL_MODEL), "--policy", "p.yaml", "--members", str(case.members),
        "--nonmembers", str(case.nonmembers), *outs, cwd=d,
    )  # fmt: skip
    return d, r


def test_hostile_names_print_as_typed_on_the_console(hostile_run):
    """Before: a policy named team[/bogus] ended in 'internal error: MarkupError', exit 4, after the files were
    written; [link=…] became a terminal hyperlink and [x] disappeared."""
    d, r = hostile_run
    assert r.returncode in (0, 1, 3), r.stderr
    assert f"policy {EVIL_NAME} (internal" in r.stdout and f"target {EVIL_MODEL} (torchscript)" in r.stdout
    assert "\x1b" not in r.stdout + r.stderr and "Traceback" not in r.stderr


def test_hostile_names_cannot_break_any_report_format(hostile_run):
    d, r = hostile_run
    report = json.loads((d / "r.json").read_text())
    assert report["policy"]["name"] == EVIL_NAME and report["target"]["path"] == str(EVIL_MODEL)
    suite = ET.fromstring((d / "r.xml").read_bytes()).find("testsuite")
    assert suite.get("name") == f"privgate.{EVIL_NAME}"
    sarif = json.loads((d / "r.sarif").read_text())
    assert sarif["runs"][0]["properties"]["policy"] == EVIL_NAME
    md = (d / "r.md").read_text()
    _markdown_is_inert(md)
    assert md.startswith(f"## privgate ✅ PASS · policy `` {EVIL_NAME} ``") or "policy ``" in md.splitlines()[0]
    page = (d / "r.html").read_text()
    _html_is_inert(page)
    assert "<img src=x" not in page and "&lt;img src=x onerror=alert(1)&gt;" in page


@pytest.mark.parametrize(
    "body, line",
    [
        (HEAD.replace("name: x", 'name: "x\\e]8;;http://evil.example\\aclick"') + CHECK, 1),
        (HEAD + 'description: "fine\\x9b2J"\n' + CHECK, 4),
        (HEAD + CHECK.replace("max: 0.7}", 'max: 0.7, description: "\\e[31mred"}'), 5),
        (HEAD + 'attacks:\n  shadow: {classifier: "\\u001b[2J"}\n' + CHECK, 5),
    ],
)
def test_control_characters_in_yaml_are_refused_by_validate_and_check_alike(case, tmp_path, body, line):
    """Before: an ESC spelt as a YAML escape reached stdout raw, even without a terminal. policy validate
    accepts exactly what check can print: both refuse it with the same sentence."""
    want = f"p.yaml: line {line}: a value holds the control character"
    err = _bad(_validate(tmp_path, body), want)
    assert "\x1b" not in err
    if line == 1:  # check loads policies the same way (one run: a check costs a torch import)
        _bad(_check(case, policy=tmp_path / "p.yaml"), want)


@pytest.mark.parametrize(
    "body, key, lines",
    [
        (HEAD + CHECK + "checks:\n  - {id: b, attack: loss, metric: auc, max: 0.99}\n", "checks", (4, 6)),
        (HEAD + "checks:\n  - id: a\n    attack: loss\n    metric: auc\n    max: 0.7\n    max: 0.99\n", "max", (8, 9)),
        (HEAD.replace("release: api\n", "release: api\nrelease: model\n") + CHECK, "release", (3, 4)),
        (HEAD + "attacks:\n  loss: {}\n  loss: {class_dependent: true}\n" + CHECK, "loss", (5, 6)),
    ],
)
def test_duplicate_yaml_keys_are_refused_naming_both_lines(case, tmp_path, body, key, lines):
    """Before: the second key won silently, so a bad merge with two 'checks:' loosened the gate."""
    want = f"p.yaml: line {lines[1]}: key '{key}' is given twice (lines {lines[0]} and {lines[1]})"
    _bad(_validate(tmp_path, body), want)
    if key == "checks":  # check loads policies the same way (one run: a check costs a torch import)
        _bad(_check(case, policy=tmp_path / "p.yaml"), want)


def _fl(tmp_path, manifest: str, *args):
    (tmp_path / "federation.yaml").write_text(manifest)
    return run_cli("fl", "audit", "federation.yaml", *args, cwd=tmp_path)


FED = "nonmembers: n.npz\nnodes:\n  - {name: a, data: a.npz, checkpoints: CKPT}\n"


@pytest.mark.parametrize(
    "manifest, needles",
    [
        ("rounds: 100000000\n" + FED.replace("CKPT", "'m{round}.pt'"), ["line 1", "rounds", "10000"]),
        (
            "rounds: 3\n" + FED.replace("CKPT", "'model{round:0999999999d}.pt'"),
            ["line 4: nodes[0].checkpoints: bad pattern", "format '0999999999d' is not allowed"],
        ),
        (
            "rounds: 3\n" + FED.replace("CKPT", "'{round.real.__class__}.pt'"),
            ["bad pattern", "{round.real.__class__} is not a field; only {round} and {node} are"],
        ),
        ("rounds: 3\n" + FED.replace("CKPT", "'{round!r}.pt'"), ["conversion !r is not allowed"]),
        ("rounds: 3\n" + FED.replace("CKPT", "'{node}.pt'"), ["it has no {round}"]),
        (
            "rounds: 2000\nnonmembers: n.npz\nnodes:\n"
            + "".join(f"  - {{name: n{i}, data: a.npz, checkpoints: 'm{{node}}-{{round}}.pt'}}\n" for i in range(60)),
            ["60 nodes × 2000 rounds name 120,000 checkpoints, more than the 100,000"],
        ),
        ("rounds: 3\nrounds: 4\n" + FED.replace("CKPT", "'m{round}.pt'"), ["line 2: key 'rounds' is given twice"]),
    ],
)
def test_fl_manifests_are_bounded_before_anything_grows(tmp_path, manifest, needles):
    """Before: rounds: 100000000 grew to 18.9 GB; a 999999999-wide field took 6 GB and ended in exit 4 with a
    1 GB message; '{round.real.__class__}' resolved through str.format."""
    r = _fl(tmp_path, manifest)
    _bad(r, "federation.yaml", *needles)


SECRET = "root:x:0:0:the-secret-only-this-file-holds"


def test_report_render_reads_no_path_and_runs_no_script(hostile_run, tmp_path):
    """Before: a crafted artefact "data:image/png' onerror='…' x='" and an exposed record whose member index held
    a quote were written into src='…' / alt='…' unescaped; an artefact naming a local file was read and embedded
    as base64. Now the paths are shown as text, only PNGs privgate re-encodes are embedded, a CSP forbids scripts."""
    d, _ = hostile_run
    secret = tmp_path / "secret.png"
    secret.write_text(SECRET)
    rep = json.loads((d / "r.json").read_text())
    rep["attacks"][0]["extras"]["artefacts"] = {
        "x.png": "data:image/png' onerror='alert(1)' x='",
        "y.png": str(secret),
        "z.svg": "data:image/svg+xml;base64," + base64.b64encode(b"<svg onload='alert(1)'/>").decode(),
    }
    rep["attacks"][1 % len(rep["attacks"])]["extras"]["artefacts"] = [str(secret), "/etc/passwd"]
    rep["exposed"]["records"][0]["member_index"] = "1' onerror='alert(2)"
    rep["exposed"]["records"][0]["image"] = str(secret)
    rep["policy"]["name"] = "p\x1b]8;;http://evil.example\x07\x00\ufffe"
    (tmp_path / "crafted.json").write_text(json.dumps(rep))
    outs = ["--html", "o.html", "--junit", "o.xml", "--sarif", "o.sarif", "--markdown", "o.md"]
    r = run_cli("report", "render", "crafted.json", *outs, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    page = (tmp_path / "o.html").read_text()
    tags = _html_is_inert(page)
    assert base64.b64encode(SECRET.encode()).decode()[:20] not in page and SECRET not in page
    assert "svg+xml" not in page and not [t for t, a in tags if t == "img"]
    assert f"<code>loss: {secret}</code>" in page or str(secret) in page  # named as text, never opened
    # the other writers: well-formed, the control characters gone
    suite = ET.fromstring((tmp_path / "o.xml").read_bytes()).find("testsuite")
    assert suite.get("name") == "privgate.p]8;;http://evil.example"
    assert "\\u001b" not in (tmp_path / "o.sarif").read_text() and "\x1b" not in (tmp_path / "o.md").read_text()
    _markdown_is_inert((tmp_path / "o.md").read_text())


def _special_files(tmp_path) -> dict[str, Path]:
    fifo = tmp_path / "pipe.xml"
    os.mkfifo(fifo)
    sock = tmp_path / "s.sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(sock))
    link = tmp_path / "link.xml"
    link.symlink_to(fifo)
    return {"FIFO (named pipe)": fifo, "socket": sock, "link": link, "character device": Path("/dev/null")}


@pytest.mark.parametrize("kind", ["FIFO (named pipe)", "socket", "link", "character device"])
def test_outputs_never_replace_special_files(case, hostile_run, tmp_path, kind):
    """Before: mkfifo pipe.xml; privgate check … --junit pipe.xml exited 0 and pipe.xml was a regular file;
    --junit /dev/full as root replaced the device node. Now: exit 2 before any work, the node untouched."""
    target = _special_files(tmp_path)[kind]
    before = os.lstat(target)
    shown = "FIFO (named pipe)" if kind == "link" else kind
    d, _ = hostile_run
    runs = [
        _check(case, "--junit", str(target), cwd=tmp_path),
        run_cli("report", "render", str(d / "r.json"), "--html", str(target), cwd=tmp_path),
        run_cli("audit", "ldp", "--epsilon", "1", "--json", str(target), cwd=tmp_path),
        run_cli("diff", str(d / "r.json"), str(d / "r.json"), "--markdown", str(target), cwd=tmp_path),
    ]
    for r in runs:
        _bad(r, f"{target}: the ", f"exists and is a {shown}, not a regular file; privgate leaves it alone")
    folder = _check(case, "--artefacts", str(target), cwd=tmp_path)  # where attack files would be written
    _bad(folder, f"{target}: the artefacts folder (--artefacts) must be a folder, but this is a {shown}")
    after = os.lstat(target)
    assert (after.st_ino, after.st_mode, after.st_mtime_ns) == (before.st_ino, before.st_mode, before.st_mtime_ns)
    assert not stat.S_ISREG(os.stat(target).st_mode)


def test_over_long_output_names_are_one_sentence(case, hostile_run, tmp_path):
    """Before: a 300-character output name was exit 4, 'OSError: File name too long'."""
    long = "r" * 300 + ".json"
    _bad(_check(case, "--json", long, cwd=tmp_path), "is 305 bytes long, more than the 255 the file system allows")
    d, _ = hostile_run
    r = run_cli("report", "render", str(d / "r.json"), "--markdown", f"sub/{long}", cwd=tmp_path)
    _bad(r, "the Markdown summary (--markdown) cannot be written", "bytes long")
    _bad(_check(case, "--artefacts", "a" * 256, cwd=tmp_path), "the artefacts folder (--artefacts) cannot be created")
    assert list(tmp_path.iterdir()) == []


def _npz_bomb(path: Path, declared: tuple[int, ...] | None) -> None:
    """An npz whose x.npy declares ``declared`` (and holds nothing), or, without it, 300 MB of zeros deflated."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as z:
        if declared is not None:
            buf = io.BytesIO()
            np.lib.format.write_array_header_1_0(buf, {"descr": "<f8", "fortran_order": False, "shape": declared})
            z.writestr("x.npy", np.lib.format.magic(1, 0) + buf.getvalue()[8:])
        else:
            with z.open("x.npy", "w", force_zip64=True) as f:
                np.lib.format.write_array_header_1_0(
                    f, {"descr": "<f8", "fortran_order": False, "shape": (300_000_000 // 8, 1)}
                )
                zeros = bytes(1 << 20)
                for _ in range(300):
                    f.write(zeros)
        z.writestr("y.npy", b"")


@pytest.mark.parametrize(
    "declared, needle",
    [
        ((10**12, 5), "array 'x.npy' declares shape (1000000000000, 5) of float64 (36.4 TiB), more than the 2.0 GiB"),
        (None, "array 'x.npy' inflates 1,0"),
    ],
)
def test_npz_headers_and_deflate_bombs_are_refused_before_allocating(case, tmp_path, declared, needle):
    """Before: an npz header declaring (10^12, 5) was exit 4 (MemoryError); a 1.9 MB deflate bomb took 2.3 GB."""
    bomb = tmp_path / "m.npz"
    _npz_bomb(bomb, declared)
    assert bomb.stat().st_size < 2 << 20
    _bad(_check(case, members=bomb), f"m.npz: {needle}")


@pytest.mark.parametrize(
    "args, env, needle",
    [
        (["check", "--threads", "10000"], {}, "Invalid value for '--threads'"),
        (["check"], {"PRIVGATE_THREADS": "10000"}, "10000 threads is more than the"),
        (["audit", "ldp", "--epsilon", "1", "--threads", "100000"], {}, "100000 threads is more than the"),
        (["fl", "simulate", "--threads", "5000"], {}, "5000 threads is more than the"),
        (["audit", "ldp", "--epsilon", "1e308"], {}, "a claimed ε of 1e+308 cannot be audited"),
        (["audit", "ldp", "--epsilon", "1,1e308"], {}, "a claimed ε of 1e+308 cannot be audited"),
        (["audit", "dpsgd", "--epsilon", "1e308"], {}, "a claimed ε of 1e+308 cannot be audited"),
        (
            ["audit", "ldp", "--epsilon", "1", "--trials", "1000000000000"],
            {},
            "--trials: 1,000,000,000,000 trials in 12 cells are 1.2e+13 games, about 63 years at the 6,000 games",
        ),
    ],
)
def test_absurd_limits_are_refused_with_their_cost(tmp_path, args, env, needle):
    """Before: --threads 10000 was accepted (and ran out of memory); --epsilon 1e308 was exit 4 (OverflowError);
    --trials 10^12 ran until killed with no estimate."""
    r = run_cli(*args, cwd=tmp_path, env=env)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert needle in " ".join(r.stderr.split()), r.stderr


def test_threads_in_the_config_are_capped(tmp_path):
    (tmp_path / "privgate.toml").write_text("threads = 10000\n")
    _bad(run_cli("check", cwd=tmp_path), "privgate.toml: 'threads': 10000 threads is more than the")


@pytest.mark.parametrize(
    "raise_, needle",
    [
        ("raise MemoryError()", "out of memory"),
        ("raise RuntimeError('std::bad_alloc')", "out of memory"),
    ],
)
def test_running_out_of_memory_is_never_exit_1(case, tmp_path, raise_, needle):
    """Before: under a memory limit torch's bad_alloc was 'the model cannot run on the audit data', then a
    MemoryError while printing ended in a raw traceback and exit 1, which reads as "the model leaks"."""
    (tmp_path / "oom.py").write_text(f"def members():\n    {raise_}\n")
    r = _check(case, members="oom:members", cwd=tmp_path)
    assert r.returncode == 4 and "Traceback" not in r.stderr, (r.returncode, r.stderr)
    assert r.stderr.startswith("error: out of memory:") and needle in r.stderr


def test_a_memory_limit_never_ends_in_exit_1(case, tmp_path):
    """The whole command under a 300 MB address-space limit: it cannot even import torch; exit 4, one line."""
    import resource

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (300 << 20, 300 << 20))

    from privgate_cli import PRIVGATE

    args = [*PRIVGATE, "check", str(case.safe_ts), "--policy", "internal", "--members", str(case.members)]
    r = subprocess.run(
        [*args, "--nonmembers", str(case.nonmembers)],
        cwd=tmp_path, preexec_fn=limit, capture_output=True, text=True, timeout=120,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    assert r.returncode == 4, (r.returncode, r.stderr[-800:])
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
