"""Hostile outputs, configs and saved reports, tried as an attacker would (issue 36, second round).

A pull request controls privgate.toml, the policy, saved reports and the working tree. Every case runs the CLI in
a subprocess where the CLI's behaviour is the point (exit 2 and one sentence, what is left on disk, no hang); the
content of reports is checked in process (``tests/inproc.py``) and rendered as GitHub does (cmark-gfm, GitHub's own
Markdown library, with its autolink extension).
"""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
from pathlib import Path

import cmarkgfm
import inproc
import pytest
from cases import run_cli
from cmarkgfm.cmark import Options
from test_hostile_input import _bad

from privgate import PrivgateError
from privgate.cli.report import DEFAULT_REPORT_MIB
from privgate.report import render
from privgate.report.loading import MAX_REPORT_BYTES, parse_report, read_report

POLICY = (
    "name: team\nsensitivity: internal\nrelease: api\n\n# the checks\nchecks:\n"
    "  - {id: auc-bound, attack: loss, metric: auc, max: 0.51}\n"
    "  - id: advantage-bound\n    attack: loss\n    metric: advantage\n    max: 0.01\n"
)


@pytest.fixture(scope="module")
def saved(case, tmp_path_factory) -> Path:
    """A folder with a policy file (checks on lines 7 and 8) and the JSON report of a failing check against it,
    built in process (the CLI's r.json)."""
    d = tmp_path_factory.mktemp("saved")
    (d / "p.yaml").write_text(POLICY)
    report = inproc.check(case.leaky_ts, str(d / "p.yaml"), case.members, case.nonmembers)
    assert report.verdict == "fail", report.summary
    (d / "r.json").write_text(inproc.render(report, "json")["json"])
    return d


def _report(saved: Path) -> dict:
    return json.loads((saved / "r.json").read_text())


def _state(path: Path) -> tuple:
    """What a path is and holds, without following a link: (is a link, its target, its content or None)."""
    if path.is_symlink():
        return True, os.readlink(path), None
    return False, None, path.read_bytes() if path.is_file() else None


# --------------------------------------------------------------------------- item 4: outputs through links


def test_an_output_that_is_a_link_is_refused_and_the_link_and_its_target_kept(saved, tmp_path):
    """Before: report render --html out.html, with out.html a link to another file, exited 0 and out.html became
    a regular file (the guard looked at the link's target, the atomic rename replaced the link); a working tree
    can commit such a link, so writing through it would send a report anywhere the runner may write."""
    outside = tmp_path / "outside.txt"
    outside.write_text("the user's own file\n")
    (tmp_path / "out.html").symlink_to(outside)
    (tmp_path / "dangling.md").symlink_to(tmp_path / "nowhere" / "x.md")
    before = {p: _state(p) for p in (outside, tmp_path / "out.html", tmp_path / "dangling.md")}
    r = run_cli("report", "render", str(saved / "r.json"), "--html", "out.html", cwd=tmp_path)
    _bad(r, "out.html: the HTML report (--html) is a symbolic link (to ", "never replaces a link", "nothing was")
    r = run_cli("diff", str(saved / "r.json"), str(saved / "r.json"), "--markdown", "dangling.md", cwd=tmp_path)
    _bad(r, "dangling.md: the comparison's markdown (--markdown) is a symbolic link (to ")
    r = run_cli("audit", "ldp", "--epsilon", "1", "--json", "out.html", cwd=tmp_path)
    _bad(r, "out.html: the JSON report (--json) is a symbolic link (to ")
    assert {p: _state(p) for p in before} == before
    assert not (tmp_path / "nowhere").exists()


def test_a_link_to_stdout_is_written_to_stdout_and_stays_a_link(saved, tmp_path):
    """/dev/stdout is how a user asks for the report on standard output. Before: with stdout a pipe it was
    refused (a FIFO), and with stdout a file, any link to /proc/self/fd/1 was replaced by a regular file. Now the
    report goes to the stream (pipe or file) after every file is written, and the link is left as it is."""
    want = render(read_report(saved / "r.json"), "markdown")
    args = ["--markdown", "/dev/stdout", "--json", "r2.json"]
    r = run_cli("report", "render", str(saved / "r.json"), *args, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout == want  # the report and nothing else: no "markdown report: /dev/stdout" line after it
    assert json.loads((tmp_path / "r2.json").read_text())["verdict"] == "fail"
    # the output a link in the working tree to /proc/self/fd/1 (stdout: a regular file in a forked run, cli_fork.py)
    (tmp_path / "fd1.md").symlink_to("/proc/self/fd/1")
    done = run_cli("report", "render", str(saved / "r.json"), "--markdown", "fd1.md", cwd=tmp_path)  # into a file
    assert done.returncode == 0, done.stderr
    assert os.readlink(tmp_path / "fd1.md") == "/proc/self/fd/1"
    assert done.stdout == want


@pytest.mark.parametrize(
    "key, value, flag",
    [
        ("json", "{outside}/stolen.json", "--json"),
        ("json", "../outside/stolen.json", "--json"),
        ("json", "linked/stolen.json", "--json"),
        ("cache_dir", "../outside", "--cache-dir or $PRIVGATE_CACHE_DIR"),
    ],
    ids=["absolute", "dot-dot", "through-a-link", "cache"],
)
def test_a_config_may_not_name_outputs_outside_its_folder(case, tmp_path, key, value, flag):
    """Before: a privgate.toml from a pull request saying json = "/any/outside/file" had that file overwritten with
    the report. Outputs a config names stay inside its folder once '..' and links are resolved; flags on the
    command line are the user's own."""
    outside, project = tmp_path / "outside", tmp_path / "project"
    outside.mkdir()
    project.mkdir()
    (outside / "stolen.json").write_text("the user's own file\n")
    (project / "linked").symlink_to(outside)
    (project / "privgate.toml").write_text(
        f"model = '{case.leaky_ts}'\npolicy = 'internal'\nmembers = '{case.members}'\n"
        f"nonmembers = '{case.nonmembers}'\n{key} = '{value.format(outside=outside)}'\n"
    )
    r = run_cli("check", cwd=project)
    _bad(
        r,
        f"privgate.toml: '{key}' names ",
        "outside the config's folder",
        "after resolving '..' and links",
        f"on the command line ({flag})",
    )
    assert (outside / "stolen.json").read_text() == "the user's own file\n"
    assert sorted(p.name for p in outside.iterdir()) == ["stolen.json"]


def test_a_pyproject_table_is_confined_alike_and_names_its_key(tmp_path):
    from privgate.inputs.config import load_config

    (tmp_path / "pyproject.toml").write_text("[tool.privgate]\njson = '/tmp/x.json'\n")
    with pytest.raises(PrivgateError, match=r"'tool\.privgate\.json' names '/tmp/x\.json', outside the config's"):
        load_config(tmp_path / "pyproject.toml")
    (tmp_path / "pyproject.toml").write_text("[tool.privgate]\njson = 'reports/r.json'\ncache_dir = '.'\n")
    assert load_config(tmp_path / "pyproject.toml").get("json") == "reports/r.json"


# --------------------------------------------------------------------------- item 8: privgate init


def _init(directory: Path, *args: str) -> subprocess.CompletedProcess:
    """``privgate init DIRECTORY`` with a short timeout: a run that waits on a FIFO fails here instead of hanging."""
    return run_cli("init", str(directory), *args, timeout=60)


def test_init_leaves_a_gitignore_that_is_no_regular_file_alone(tmp_path):
    """Before: a .gitignore that was a FIFO hung init; a link to /dev/zero read until memory ran out; a link to a
    file outside the project rewrote that file. Now each is exit 2 before anything is read or written."""
    outside = tmp_path / "outside.txt"
    outside.write_text("the user's own file\n")
    cases = {"fifo": None, "outside": outside, "zero": Path("/dev/zero")}
    for name, target in cases.items():
        project = tmp_path / name
        project.mkdir()
        if target is None:
            os.mkfifo(project / ".gitignore")
        else:
            (project / ".gitignore").symlink_to(target)
        before = _state(project / ".gitignore")
        r = _init(project)
        kind = "a FIFO (named pipe)" if target is None else f"a symbolic link (to {target})"
        _bad(r, f"{project / '.gitignore'}: is {kind}, not a regular file", "nothing was written", "--no-gitignore")
        assert _state(project / ".gitignore") == before and sorted(p.name for p in project.iterdir()) == [".gitignore"]
        if target is None:
            assert stat.S_ISFIFO(os.lstat(project / ".gitignore").st_mode)
    assert outside.read_text() == "the user's own file\n"
    # --no-gitignore: the policy and the workflow, the link untouched
    r = _init(tmp_path / "outside", "--no-gitignore")
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "outside" / "privacy-policy.yaml").is_file() and ".gitignore" not in r.stdout
    assert outside.read_text() == "the user's own file\n" and (tmp_path / "outside" / ".gitignore").is_symlink()


def test_init_refuses_a_dangling_link_where_it_would_write_and_a_huge_gitignore(tmp_path):
    (tmp_path / "privacy-policy.yaml").symlink_to(tmp_path / "elsewhere.yaml")
    r = _init(tmp_path, "--no-gitignore")
    _bad(r, "privacy-policy.yaml: already exists; privgate init never overwrites files")
    assert not (tmp_path / "elsewhere.yaml").exists()
    big = tmp_path / "big"
    big.mkdir()
    with open(big / ".gitignore", "wb") as f:
        f.truncate(3 << 20)  # sparse: 3 MiB that cost no disk
    _bad(_init(big), ".gitignore: is larger than 1 MiB")
    assert sorted(p.name for p in big.iterdir()) == [".gitignore"]


# --------------------------------------------------------------------------- item 9: rendering opens nothing


def test_rendering_opens_no_path_a_saved_report_names(saved, tmp_path):
    """Before: report render --sarif opened the policy.source a report named, so a crafted report learnt whether
    /…/creds.yaml existed and on which line an 'id:' sat in it; the members' source was looked up too. Now the
    lines come from the report (recorded when check parsed the policy) and paths are text: a report naming files
    that exist renders exactly as one naming files that do not."""
    rep = _report(saved)
    assert rep["policy"]["check_lines"] == {"auc-bound": 7, "advantage-bound": 8}  # recorded at check time
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "creds.yaml").write_text("user: x\ncheck:\n  - id: auc-bound\n  - id: advantage-bound\n")
    (secret / "rows.npz").write_bytes(b"x")
    rep["policy"]["source"] = str(secret / "creds.yaml")
    rep["data"]["members"]["source"] = str(secret / "rows.npz")
    (tmp_path / "crafted.json").write_text(json.dumps(rep))
    r = run_cli("report", "render", "crafted.json", "--sarif", "there.sarif", "--markdown", "there.md", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    for f in secret.iterdir():
        f.unlink()
    r = run_cli("report", "render", "crafted.json", "--sarif", "gone.sarif", "--markdown", "gone.md", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "there.sarif").read_bytes() == (tmp_path / "gone.sarif").read_bytes()
    assert (tmp_path / "there.md").read_bytes() == (tmp_path / "gone.md").read_bytes()
    sarif = json.loads((tmp_path / "gone.sarif").read_text())
    where = {
        res["properties"]["check"]: res["locations"][0]["physicalLocation"]
        for res in sarif["runs"][0]["results"]
        if res["ruleId"] != "privgate/exposed_record"
    }
    assert where["auc-bound"]["region"] == {"startLine": 7} and where["advantage-bound"]["region"] == {"startLine": 8}
    assert where["auc-bound"]["artifactLocation"]["uri"] == "secret/creds.yaml"


def test_the_sarif_of_check_and_of_report_render_are_the_same(saved):
    """The check-time SARIF (rendered from the report in memory) equals the one rendered from the saved report
    later: nothing depends on the file system at render time."""
    in_memory = inproc.render(read_report(saved / "r.json"), "sarif")["sarif"]
    os.rename(saved / "p.yaml", saved / "p.yaml.moved")
    try:
        again = render(parse_report((saved / "r.json").read_text()), "sarif")
    finally:
        os.rename(saved / "p.yaml.moved", saved / "p.yaml")
    assert again == in_memory
    regions = [res["locations"][0]["physicalLocation"].get("region") for res in json.loads(again)["runs"][0]["results"]]
    assert {"startLine": 7} in regions


# --------------------------------------------------------------------------- item 10: Markdown autolinks, mentions

#: What GitHub would turn into links or mentions: e-mail autolinks (bare, mailto:, xmpp:), URLs, @users and teams.
LINKY = "foo@evil.example mailto:x@evil.example xmpp:y@evil.example/r @octocat @org/team www.evil.example http://e.x"
#: GitHub's @mention (html-pipeline's MentionFilter): "@" after a non-word character or the start, then a name.
MENTION = re.compile(r"(?:^|\W)@[a-z0-9][a-z0-9-]*", re.IGNORECASE)


def _github(markdown: str) -> str:
    """The HTML GitHub's Markdown library (cmark-gfm with its extensions, autolink included) makes of ``markdown``."""
    return cmarkgfm.github_flavored_markdown_to_html(markdown, options=Options.CMARK_OPT_UNSAFE)


def _no_link_no_mention(markdown: str) -> None:
    html = _github(markdown)
    assert "<a " not in html and "<img" not in html, re.findall(r"<a [^>]*>[^<]*</a>", html)
    text = re.sub(r"<code>.*?</code>", "", html)  # GitHub makes no mention inside code
    assert not MENTION.search(re.sub(r"<[^>]+>", " ", text)), MENTION.findall(text)


def test_check_and_diff_markdown_link_no_address_and_mention_no_one(saved):
    """Before: foo@evil.example, mailto:/xmpp: addresses and @user passed into the Markdown GitHub renders in
    pull-request comments: cmark-gfm made them mailto:/xmpp: links, GitHub notified @octocat and @org/team."""
    from privgate.report.diff import diff_reports
    from privgate.report.diffview import render_diff_markdown

    d = _report(saved)
    d["summary"] = d["policy"]["name"] = LINKY
    d["warnings"] = [LINKY]
    for i, c in enumerate(d["checks"]):
        c["reason"], c["id"] = LINKY, f"{LINKY} {i}"
    d["policy"]["check_lines"] = {c["id"]: 7 for c in d["checks"]}
    rep = parse_report(json.dumps(d))
    md = render(rep, "markdown")
    assert md.count("foo@\u2060evil.example") >= 3  # shown, with an invisible word joiner after the "@"
    _no_link_no_mention(md)
    d["privgate_version"], d["environment"]["seed"] = "@octocat", 7  # differences the diff's notes name
    new = parse_report(json.dumps(d))
    diff = render_diff_markdown(diff_reports(rep, new, {}, base_name=LINKY, new_name="@octocat"))
    assert "@\u2060evil.example" in diff  # the check ids, in the reasons
    _no_link_no_mention(diff)


def test_markdown_of_every_report_string_stays_text(saved, tmp_path):
    """Before: a crafted harden report's DP search name and caveats, and a claim audit's target path, went into
    the Markdown raw (the path inside single backticks): a link and an image came through."""
    from privgate import LdpAuditSettings, RunOptions, api

    evil = "` [click](http://evil.example) ![i](http://evil.example/i.png) " + LINKY
    d = _report(saved)
    d["remediation"] = {"status": "hardened", "statement": {"search": evil, "caveats": [evil]}}
    _no_link_no_mention(render(parse_report(json.dumps(d)), "markdown"))
    settings = LdpAuditSettings(epsilons=(2.0,), trials=50, adversaries=("input_perturbation",))
    ldp = api.audit_ldp(settings, RunOptions(seed=0))
    d = json.loads(render(ldp, "json"))
    d["target"] = {"path": evil, "format": evil}
    d["environment"]["seed"] = evil
    _no_link_no_mention(render(parse_report(json.dumps(d)), "markdown"))


# --------------------------------------------------------------------------- item 7: nesting, raw control bytes


def test_deeply_nested_saved_reports_are_one_sentence(saved, tmp_path):
    """Before: 10^5 brackets were exit 4 (RecursionError) in report render and diff; 900 levels, which json
    parses, broke the writers later (exit 4 after the files were planned)."""
    (tmp_path / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    want = "deep.json: not a privgate JSON report (nested more than 64 levels deep)"
    _bad(run_cli("report", "render", "deep.json", "--markdown", "x.md", cwd=tmp_path), want)
    _bad(run_cli("diff", str(saved / "r.json"), "deep.json", "--json", "x.json", cwd=tmp_path), want)
    d = _report(saved)
    d["attacks"][0]["extras"]["nested"] = json.loads("[" * 900 + "]" * 900)
    (tmp_path / "deep900.json").write_text(json.dumps(d))
    with pytest.raises(PrivgateError, match=r"deep900\.json: not a privgate JSON report \(nested more than 64"):
        read_report(tmp_path / "deep900.json")
    d["attacks"][0]["extras"]["nested"] = json.loads("[" * 50 + "]" * 50)  # deep, but not hostile: read
    (tmp_path / "deep50.json").write_text(json.dumps(d))
    assert read_report(tmp_path / "deep50.json").verdict == "fail"
    assert not (tmp_path / "x.md").exists() and not (tmp_path / "x.json").exists()


@pytest.mark.parametrize("char, name", [("\x1b", "ESC"), ("\x00", "NUL"), ("\x07", "BEL")])
def test_a_raw_control_byte_in_a_policy_or_a_manifest_is_one_sentence(tmp_path, char, name):
    """Before: a raw ESC, NUL or BEL anywhere in a policy or a federation manifest, even in a comment, was exit 4
    (PyYAML's ReaderError), while the escaped form ("\\e") was already exit 2 naming its line."""
    (tmp_path / "p.yaml").write_text(
        f"name: x\nsensitivity: internal\nrelease: api  # a comment {char}[31m\n"
        "checks:\n  - {id: a, attack: loss, metric: auc, max: 0.7}\n"
    )
    want = f"p.yaml: line 3: the file holds the control character {char!r} (U+{ord(char):04X})"
    _bad(run_cli("policy", "validate", "p.yaml", cwd=tmp_path), want, "comments included")
    (tmp_path / "federation.yaml").write_text(
        f"rounds: 2\nnonmembers: n.npz\n# {name}: {char}\nnodes:\n"
        "  - {name: a, data: a.npz, checkpoints: 'm{round}.pt'}\n"
    )
    _bad(run_cli("fl", "audit", "federation.yaml", cwd=tmp_path), "federation.yaml: line 3: the file holds the control")


def test_the_other_json_readers_refuse_deep_nesting_in_one_sentence(tmp_path):
    """Siblings: text data, canaries and a language model's config.json parse JSON the same way (exit 4 before)."""
    from privgate.errors import DataError, TargetError
    from privgate.inputs.canaries import load_canaries
    from privgate.inputs.targets.hf_folder import read_json
    from privgate.inputs.text import load_texts, load_users

    deep = tmp_path / "deep.jsonl"
    deep.write_text("[" * 100_000 + "]" * 100_000 + "\n")
    deeply = r"deep\.jsonl, line 1: the JSON is nested too deeply to parse"
    with pytest.raises(DataError, match=deeply):
        load_texts(deep, "members")
    with pytest.raises(DataError, match=deeply):
        load_users(deep, "user")
    with pytest.raises(DataError, match=deeply):
        load_canaries(deep)
    (tmp_path / "config.json").write_text(deep.read_text())
    with pytest.raises(TargetError, match=r"config\.json: is JSON nested too deeply"):
        read_json(tmp_path / "config.json")


# --------------------------------------------------------------------------- item 11: size of saved reports


def test_a_huge_saved_report_is_refused_before_it_is_read(saved, tmp_path):
    """Before: a 333 MB saved report was read and parsed whole (over 120 s with a real structure). Now its size is
    checked first against 64 MiB; the sentence names the limit and how to raise it (the action's baseline goes
    through privgate diff, where $PRIVGATE_MAX_REPORT_MIB reaches it)."""
    with open(tmp_path / "huge.json", "wb") as f:
        f.truncate(333 << 20)  # sparse: costs no disk, and nothing is read
    r = run_cli("report", "render", "huge.json", "--html", "x.html", cwd=tmp_path)
    _bad(r, "huge.json: the saved report is 333 MiB, larger than the 64 MiB privgate reads", "--max-report-mib")
    d = _report(saved)
    d["attacks"][0]["extras"]["pad"] = "x" * (2 << 20)
    (tmp_path / "big.json").write_text(json.dumps(d))
    r = run_cli("diff", str(saved / "r.json"), "big.json", cwd=tmp_path, env={"PRIVGATE_MAX_REPORT_MIB": "1"})
    _bad(r, "big.json: the saved report is 2.", "larger than the 1 MiB privgate reads", "$PRIVGATE_MAX_REPORT_MIB")
    r = run_cli("report", "outputs", "big.json", "--max-report-mib", "3", cwd=tmp_path)
    assert r.returncode == 0 and "verdict=fail" in r.stdout, r.stderr
    assert not (tmp_path / "x.html").exists()
    assert DEFAULT_REPORT_MIB << 20 == MAX_REPORT_BYTES  # the flag's default is the reader's limit
