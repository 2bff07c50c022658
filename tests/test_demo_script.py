"""examples/demo.sh (`make demo`) as it schedules and reports, with a stand-in privgate that only logs and sleeps."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ("digits", "purchase", "digits_cnn", "mortgage", "clinical_notes")

# the stand-in: logs its folder, arguments, bytecode settings and start/end times; the digits steps take longest;
# exits as the real examples do (FAIL_IN makes one folder's steps exit 3 instead)
FAKE_PRIVGATE = r"""#!/usr/bin/env bash
d=$(basename "$PWD")
echo "start $d $(date +%s.%N) ${PYTHONDONTWRITEBYTECODE-unset} ${PYTHONPYCACHEPREFIX-unset} $*" >> "$LOG"
[ "$d" = digits ] && sleep 0.8 || sleep 0.05
echo "end $d $(date +%s.%N)" >> "$LOG"
echo "checked $d"
[ "$d" = "${FAIL_IN-}" ] && exit 3
case "$d" in
  digits) [[ "$*" == *--remediate* ]] && exit 0 || exit 1;;
  digits_cnn) exit 0;;
  clinical_notes) [[ "$*" == *"--policy internal"* ]] && exit 0 || exit 1;;
  *) exit 1;;
esac
"""


@pytest.fixture
def fake_repo(tmp_path):
    for name in EXAMPLES:
        (tmp_path / "examples" / name).mkdir(parents=True)
    shutil.copy(ROOT / "examples" / "demo.sh", tmp_path / "examples" / "demo.sh")
    bin_dir = tmp_path / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "privgate").write_text(FAKE_PRIVGATE)
    (bin_dir / "python").write_text('#!/usr/bin/env bash\necho "start build $(date +%s.%N)" >> "$LOG"\n')
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    return tmp_path


def _demo(repo: Path, **env: str) -> tuple[subprocess.CompletedProcess, list[list[str]]]:
    log = repo / "calls.log"
    environ = {**os.environ, "LOG": str(log), "PYTHONDONTWRITEBYTECODE": "1", **env}
    r = subprocess.run(
        ["bash", str(repo / "examples" / "demo.sh"), "venv"], capture_output=True, text=True, env=environ, timeout=60
    )
    return r, [line.split(" ", 5) for line in log.read_text().splitlines()]


@pytest.mark.skipif(sys.platform == "win32", reason="bash script")
def test_demo_lanes_take_the_next_example_and_print_every_step_in_order(fake_repo):
    r, calls = _demo(fake_repo)
    assert r.returncode == 0, r.stdout + r.stderr
    # every step's output whole, in step order, with its exit code and seconds
    codes = re.findall(r"──── exit code (\d+) \(expected (\d+)\), \d+ s", r.stdout)
    assert [a for a, b in codes] == ["1", "0", "1", "0", "1", "1", "1", "0"] and all(a == b for a, b in codes)
    heads = [line for line in r.stdout.splitlines() if line.startswith("════")]
    assert [h.split("(cd examples/")[-1].split(" ")[0] for h in heads if "(cd" in h] == [
        *["digits"] * 2,
        "purchase",
        "digits_cnn",
        *["mortgage"] * 2,
        *["clinical_notes"] * 2,
    ]
    assert "The demo took" in r.stdout
    # the interpreters keep their bytecode in the venv, whatever PYTHONDONTWRITEBYTECODE said
    runs = [c for c in calls if c[0] == "start" and c[1] != "build"]
    assert {(c[3], c[4]) for c in runs} == {("unset", str(fake_repo / "venv" / "pycache"))}
    # while one lane runs the two digits steps (the costliest), the other runs every other example
    t = {(c[0], c[1]): float(c[2]) for c in reversed(calls)}  # first start, first end of each folder
    last_digits_end = max(float(c[2]) for c in calls if c[:2] == ["end", "digits"])
    assert all(t[("start", d)] < last_digits_end for d in ("purchase", "digits_cnn", "mortgage", "clinical_notes"))


@pytest.mark.skipif(sys.platform == "win32", reason="bash script")
def test_demo_stops_on_an_unexpected_exit_code(fake_repo):
    r, _ = _demo(fake_repo, FAIL_IN="digits_cnn")
    assert r.returncode == 1
    assert "demo: step 4 exited 3, expected 0" in r.stderr
