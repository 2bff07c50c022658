"""The cache-key file is a regular file of at most 4 KiB, read without waiting; a loose one is used with a warning.

Issue 41 item 10: a FIFO as the key file (named, or at the default path) hung the run, ``/dev/zero`` read until
memory ran out (exit 4), and a key others can read, or reached through a symbolic link, was used silently. Each
run below stops at the model, which does not exist, after the key is read (privgate.cli.cache_settings): exit 2.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from cases import run_cli

KEY = "0123456789abcdef" * 4 + "\n"
NO_MODEL = "error: missing.pt: model file not found."


@pytest.fixture(scope="module", autouse=True)
def _started() -> None:
    """The suite's CLI server started (its imports take a while on a busy machine): the timeouts below time a run."""
    assert run_cli("--version").returncode == 0


def _check(cwd: Path, *flags: str, env: dict[str, str] | None = None):
    args = ["check", "missing.pt", "--policy", "internal", "--members", "m.npz", "--nonmembers", "n.npz", *flags]
    home = {"XDG_CONFIG_HOME": str(cwd / "config"), "XDG_CACHE_HOME": str(cwd / "cache")}
    return run_cli(*args, cwd=cwd, env={**home, **(env or {})}, timeout=60)  # a hang is a failure, not a wait


def _key(path: Path, mode: int = 0o600, text: str = KEY) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)
    return path


def _default_fifo(d: Path) -> None:
    (d / "config" / "privgate").mkdir(parents=True)
    os.mkfifo(d / "config" / "privgate" / "cache-key")


#: How the run names the key file: the flag, $PRIVGATE_CACHE_KEY_FILE, or nothing (the user's key file).
NAMED = {
    "flag": (["--cache-key-file", "key"], {}),
    "env": ([], {"PRIVGATE_CACHE_KEY_FILE": "key"}),
    "default": ([], {}),
}


@pytest.mark.parametrize(
    ("make", "how", "says"),
    [
        (lambda d: os.mkfifo(d / "key"), "flag", "key: the cache key file named by --cache-key-file is a FIFO"),
        (
            lambda d: os.symlink("/dev/zero", d / "key"),
            "env",
            "key: the cache key file named by --cache-key-file is a device or socket",
        ),
        (lambda d: _key(d / "key", text="k" * 5000), "flag", "named by --cache-key-file is larger than 4,096 bytes"),
        (_default_fifo, "default", "cache-key: the user's cache key file is a FIFO"),
    ],
)
def test_a_key_file_that_is_not_a_small_regular_file_is_exit_2_at_once(tmp_path, make, how, says):
    make(tmp_path)
    flags, env = NAMED[how]
    r = _check(tmp_path, *flags, env=env)
    err = " ".join(r.stderr.split())
    assert r.returncode == 2 and err.startswith("error:") and says in err and "Traceback" not in err, err


def test_a_key_others_may_read_or_behind_a_link_is_used_with_a_warning(tmp_path):
    loose = _key(tmp_path / "secrets" / "key", 0o644)
    os.symlink(loose, tmp_path / "link")
    r = _check(tmp_path, "--cache-key-file", "link")
    lines = [" ".join(line.split()) for line in r.stderr.strip().split("warning: ")[1:]]
    assert r.returncode == 2 and lines[-1].endswith(NO_MODEL), r.stderr  # the key was taken: the run went on
    assert lines[0] == (
        f"link (the cache key file named by --cache-key-file) is a symbolic link to {loose}; the key is read there: "
        "keep it in a private file outside any repository or shared folder"
    )
    assert lines[1].startswith(
        "link (the cache key file named by --cache-key-file) has mode 0644: whoever can read it can forge cache "
        "entries privgate trusts; make it private: chmod 600 link"
    )
    loose.chmod(0o600)  # private, named directly: nothing to warn about
    r = _check(tmp_path, "--cache-key-file", str(loose))
    assert r.returncode == 2 and " ".join(r.stderr.split()) == NO_MODEL, r.stderr
