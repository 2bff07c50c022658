"""Hostile outputs, configs and saved reports, tried as an attacker would (issue 36, second round).

A pull request controls privgate.toml, the policy, saved reports and the working tree. Every case runs the CLI in
a subprocess where the CLI's behaviour is the point (exit 2 and one sentence, what is left on disk, no hang); the
content of reports is checked in process (``tests/inproc.py``) and rendered as GitHub does (cmark-gfm, GitHub's own
Markdown library, with its autolink extension).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import inproc
import pytest
from cases import run_cli
from test_hostile_input import _bad


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


# --------------------------------------------------------------------------- item 7: nesting, raw control bytes


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
