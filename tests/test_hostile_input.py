"""Hostile and careless input: alias bombs, huge files, foreign entry points, CSV cells, misspelt keys.

Every case runs the CLI in a subprocess, as a user would, and expects one
sentence naming the file, line or field at fault, exit code 2, no traceback.
"""

from __future__ import annotations

import base64
import json
import os
import socket
import stat
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
import zipfile
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
from cases import run_cli
from markdown_it import MarkdownIt

HEAD = "name: x\nsensitivity: internal\nrelease: api\n"
CHECK = "checks:\n  - {id: a, attack: loss, metric: auc, max: 0.7}\n"


def _bad(r, *needles, most: int = 600) -> str:
    """The error sentence of a bad-input run: exit 2, no traceback, short, containing every needle."""
    assert r.returncode == 2, (r.returncode, r.stdout[-2000:], r.stderr[-2000:])
    assert "Traceback" not in r.stderr + r.stdout
    err = " ".join(r.stderr.split())
    assert err.startswith("error:") and len(err) <= most, err[:2000]
    for n in needles:
        assert n in err, (n, err)
    return err


def _validate(tmp_path, body: str, name: str = "p.yaml"):
    p = tmp_path / name
    p.write_text(body)
    return run_cli("policy", "validate", str(p), cwd=tmp_path)


def _check(case, *extra, cwd=None, members=None, nonmembers=None, policy="internal"):
    return run_cli(
        "check",
        str(case.safe_ts),
        "--policy",
        str(policy),
        "--members",
        str(members or case.members),
        "--nonmembers",
        str(nonmembers or case.nonmembers),
        *extra,
        cwd=cwd,
    )


# --------------------------------------------------------------------------- YAML


BOMB = (
    HEAD
    + textwrap.dedent(
        """\
    attacks:
      loss:
        a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]
        b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]
        c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]
        d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]
        e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]
        f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]
        g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f]
        h: &h [*g, *g, *g, *g, *g, *g, *g, *g, *g]
        i: &i [*h, *h, *h, *h, *h, *h, *h, *h, *h]
    """
    )
    + CHECK
)


def test_alias_bomb_is_refused_with_its_line(case, tmp_path):
    # 9 levels of 9 aliases: 9^9 strings once expanded; the first level above 100,000 nodes is 'f' on line 11
    err = _bad(_validate(tmp_path, BOMB), "p.yaml: line 11:", "597,871 YAML nodes", "more than the 100,000")
    assert "lol" not in err
    _bad(_check(case, policy=tmp_path / "p.yaml"), "p.yaml: line 11:")
    # an alias inside the value it names has no end
    _bad(
        _validate(tmp_path, HEAD + "attacks:\n  loss: &x {a: [*x]}\n" + CHECK),
        "p.yaml: line 5:",
        "refers to the value that contains it",
    )


def test_ordinary_anchors_still_work(tmp_path):
    body = (
        HEAD + "attacks:\n  modified_entropy: &opts {class_dependent: true}\n  true_class_confidence: *opts\n" + CHECK
    )
    r = _validate(tmp_path, body)
    assert r.returncode == 0, r.stderr
    assert "valid policy 'x' (1 checks, 3 attacks, every decision at 0.95 confidence)" in r.stdout


def test_policy_and_config_files_are_size_limited(case, tmp_path):
    big = tmp_path / "big.yaml"
    big.write_text(HEAD + CHECK + "description: " + "a" * (1 << 20) + "\n")
    _bad(run_cli("policy", "validate", str(big)), "big.yaml: policy file is larger than 1 MiB")
    _bad(_check(case, policy=big), "big.yaml: policy file is larger than 1 MiB")
    (tmp_path / "privgate.toml").write_text("# " + "x" * (1 << 20) + "\nseed = 1\n")
    _bad(run_cli("check", cwd=tmp_path), "privgate.toml: config is larger than 1 MiB")


def test_long_values_are_quoted_cut_short(tmp_path):
    body = HEAD + f"attacks:\n  shadow: {{classifier: '{'x' * 100_000}'}}\n" + CHECK
    err = _bad(_validate(tmp_path, body), "p.yaml: line 5:", "field 'attacks.shadow.classifier'", "…", most=400)
    assert err.count("x") < 250
    body = HEAD + f"attacks:\n  {'y' * 1000}: {{}}\n" + CHECK  # PyYAML's longest plain key
    err = _bad(_validate(tmp_path, body), "p.yaml: line 5:", "unknown attack", "…", most=800)
    assert err.count("y") < 500


def test_markup_in_a_value_is_printed_as_is(case, tmp_path):
    _bad(_check(case, policy="[/bold]x[red].yaml"), "[/bold]x[red].yaml: policy file not found.")


# --------------------------------------------------------------------------- semantic errors point at their line


@pytest.mark.parametrize(
    "body, where, needle",
    [
        (HEAD + "checks: []\n", "line 4: field 'checks'", "needs at least one check"),
        (
            "name: x\nsensitivity: confidential\nrelease: api\n",
            "line 2: field 'sensitivity'",
            "needs at least one check",
        ),
        (
            HEAD + "checks:\n  - id: a\n    attack: los\n    metric: auc\n    max: 0.7\n",
            "line 6: field 'checks[0].attack'",
            "unknown attack 'los' (did you mean 'loss'?)",
        ),
        (
            HEAD + CHECK + "  - id: a\n    attack: loss\n    metric: accuracy\n    max: 0.7\n",
            "line 6: field 'checks[1].id'",
            "'a' is used twice",
        ),
        (
            HEAD + "checks:\n  - id: g\n    attack: gradient\n    metric: auc\n    max: 0.7\n",
            "line 6: field 'checks[0].attack'",
            "needs the model's weights",
        ),
        (
            "name: x\nsensitivity: strictly_confidential\nrelease: model\n" + CHECK,
            "line 4: field 'checks'",
            "white-box",
        ),
        (
            HEAD + "checks:\n  - id: a\n    attack: loss\n    metric: tpr_at_fpr\n    max: 0.7\n    delta: 0.001\n",
            "line 7: field 'checks[0].metric'",
            "needs 'fpr'",
        ),
        (
            HEAD + "checks:\n  - id: a\n    attack: loss\n    metric: auc\n    maxx: 0.7\n",
            "line 8: unknown key 'maxx' in 'checks[0]'",
            "(did you mean 'max'?)",
        ),
        (
            "nmae: x\nsensitivity: internal\nrelease: api\n" + CHECK,
            "line 1: unknown key 'nmae'",
            "(did you mean 'name'?)",
        ),
        (
            HEAD + "attacks:\n  loss: {}\n  shadow:\n    modls: 4\n" + CHECK,
            "line 7: field 'attacks.shadow.modls'",
            "unknown option 'modls' (did you mean 'models'?)",
        ),
        (
            HEAD + "attacks:\n  shadow:\n    models: 3\n" + CHECK,
            "line 6: field 'attacks.shadow.models'",
            "must be even",
        ),
        (
            HEAD + "checks:\n  - id: a\n    attack: loss\n    metric: accuracyy\n    max: 0.7\n",
            "line 7: field 'checks[0].metric'",
            "got 'accuracyy' (did you mean 'accuracy'?)",
        ),
    ],
)
def test_semantic_errors_name_the_line_of_the_key(tmp_path, body, where, needle):
    _bad(_validate(tmp_path, body), f"p.yaml: {where}", needle)


def test_unknown_config_key_suggests_the_close_one(tmp_path):
    (tmp_path / "privgate.toml").write_text("modle = 'model.pt'\n")
    _bad(run_cli("check", cwd=tmp_path), "privgate.toml: unknown key 'modle' (did you mean 'model'?)")
    (tmp_path / "privgate.toml").unlink()
    (tmp_path / "pyproject.toml").write_text("[tool.privgate]\nnonmember = 'n.npz'\n")
    _bad(run_cli("check", cwd=tmp_path), "unknown key 'tool.privgate.nonmember' (did you mean 'nonmembers'?)")


# --------------------------------------------------------------------------- entry points


@pytest.mark.parametrize(
    "flag, spec, needle",
    [
        ("--members", "os:abort", "data factory 'os:abort': 'os' is a module of Python's standard library"),
        ("--recipe", "builtins:exit", "recipe 'builtins:exit': 'builtins' is a module of Python's standard library"),
        (
            "--recipe",
            "subprocess:call",
            "recipe 'subprocess:call': 'subprocess' is a module of Python's standard library",
        ),
        (
            "--nonmembers",
            "shutil:rmtree",
            "data factory 'shutil:rmtree': 'shutil' is a module of Python's standard library",
        ),
        ("--members", "numpy:load", "data factory 'numpy:load': 'numpy' is an installed package"),
        ("--recipe", "privgate.cli:main", "recipe 'privgate.cli:main': 'privgate' is privgate itself"),
        (
            "--members",
            "evil:abort",
            "data factory 'evil:abort': 'abort' is defined in module 'posix', not in your project's 'evil'",
        ),
        ("--recipe", "evil:os.abort", "recipe 'evil:os.abort': 'os.abort' is defined in module 'posix'"),
        ("--members", "evil:__builtins__", "'__builtins__' is a Python internal attribute"),
        ("--members", "evil:members", "data factory 'evil:members': module 'evil' has no attribute 'members'"),
        (
            "--members",
            "code:members",
            "data factory 'code:members': your module 'code' has the name of a module of Python's standard "
            "library; rename it",
        ),
    ],
)
def test_foreign_entry_points_are_refused_before_they_are_called(case, tmp_path, flag, spec, needle):
    (tmp_path / "evil.py").write_text("import os\nfrom os import abort\n")
    (tmp_path / "code.py").write_text("def members():\n    raise SystemExit(9)\n")
    keep = tmp_path / "keep"
    keep.mkdir()
    (keep / "file.txt").write_text("mine")
    args = {"--members": str(case.members), "--nonmembers": str(case.nonmembers), flag: spec}
    r = run_cli(
        "check", str(case.safe_ts), "--policy", "internal", *[a for kv in args.items() for a in kv], cwd=tmp_path
    )
    err = _bad(r, needle)  # exit 2: not killed by abort (-6), not exit()'s code
    assert err.startswith(
        "error: recipe" if flag == "--recipe" else "error: data factory"
    )  # a data factory is not a "recipe"
    assert (keep / "file.txt").read_text() == "mine"


def test_project_data_factory_and_recipe_still_load(case, tmp_path):
    m, n = np.load(case.members), np.load(case.nonmembers)
    (tmp_path / "audit_data.py").write_text(
        textwrap.dedent(
            f"""
        import numpy as np

        def members():
            d = np.load({str(case.members)!r})
            return d["x"], d["y"]

        NONMEMBERS = (np.load({str(case.nonmembers)!r})["x"], np.load({str(case.nonmembers)!r})["y"])
        """
        )
    )
    r = run_cli(
        "check",
        str(case.safe_ts),
        "--policy",
        "internal",
        "--members",
        "audit_data:members",
        "--nonmembers",
        "audit_data:NONMEMBERS",
        "--json",
        "r.json",
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    data = json.loads((tmp_path / "r.json").read_text())["data"]
    got = [{k: part[k] for k in ("source", "n")} for part in (data["members"], data["nonmembers"])]
    assert got == [
        {"source": "audit_data:members", "n": len(m["y"])},
        {"source": "audit_data:NONMEMBERS", "n": len(n["y"])},
    ]
    assert all(len(part["sha256"]) == 64 for part in (data["members"], data["nonmembers"]))


# --------------------------------------------------------------------------- CSV


def _csv(path, rows, header):
    path.write_text(",".join(header) + "\n" + "".join(",".join(str(v) for v in r) + "\n" for r in rows))


@pytest.mark.parametrize(
    "bad_row, needle",
    [
        (lambda r: r[:3] + ["abc"] + r[4:], "line 5, column 'f3': 'abc' is not a number"),
        (lambda r: r[:3] + [""] + r[4:], "line 5, column 'f3': '' is not a number"),
        (lambda r: r[:-1], "line 5 has 20 values but the header has 21 columns"),
        (lambda r: r[:7] + ["inf"] + r[8:], "line 5, column 'f7': 'inf' is not a finite number"),
        (lambda r: r[:-1] + ["1.5"], "line 5, column 'label': '1.5' is not a class label"),
        (lambda r: r[:-1] + ["-1"], "line 5, column 'label': '-1' is not a class label"),
    ],
)
def test_csv_errors_name_the_line_and_the_column(case, tmp_path, bad_row, needle):
    d = np.load(case.members)
    header = [f"f{i}" for i in range(20)] + ["label"]
    rows = [[f"{v:.5g}" for v in x] + [str(int(y))] for x, y in zip(d["x"], d["y"])]
    rows[3] = bad_row(rows[3])  # data row 4 is line 5 of the file (line 1 is the header)
    m = tmp_path / "m.csv"
    _csv(m, rows, header)
    _bad(_check(case, members=m), f"m.csv: {needle}")


def test_csv_label_column_suggestion(case, tmp_path):
    d = np.load(case.members)
    m = tmp_path / "m.csv"
    _csv(m, [list(x) + [int(y)] for x, y in zip(d["x"], d["y"])], [f"f{i}" for i in range(20)] + ["labels"])
    _bad(_check(case, members=m), "m.csv: no label column 'label' in the CSV header", "(did you mean 'labels'?)")


# =========================================================================== issue 26: hostile strings and files
# Every case as an attacker would run it: the CLI in a subprocess, the outputs parsed back as their readers do.


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
            import io

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

    exe = Path(sys.executable).with_name("privgate")
    args = [str(exe), "check", str(case.safe_ts), "--policy", "internal", "--members", str(case.members)]
    r = subprocess.run(
        [*args, "--nonmembers", str(case.nonmembers)],
        cwd=tmp_path, preexec_fn=limit, capture_output=True, text=True, timeout=120,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    assert r.returncode == 4, (r.returncode, r.stderr[-800:])
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
