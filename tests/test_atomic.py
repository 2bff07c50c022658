"""Atomic output: one file or a set of files appears whole or not at all, and no temporary file is left."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys

import pytest

from privgate.io import atomic
from privgate.io.atomic import remove_stale, temp_name, write_atomic, write_together


def _leftovers(folder):
    return sorted(p.name for p in folder.rglob("*") if atomic.TEMP_MARK in p.name)


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_write_together_writes_every_file_and_replaces_old_ones(tmp_path):
    old = tmp_path / "model.pt"
    old.write_bytes(b"old model")
    written = write_together({old: b"new model", tmp_path / "deep" / "r.json": "{}\n"})
    assert written == [old, tmp_path / "deep" / "r.json"]
    assert old.read_bytes() == b"new model" and (tmp_path / "deep" / "r.json").read_text() == "{}\n"
    assert _leftovers(tmp_path) == []


def test_a_failed_rename_puts_everything_back(tmp_path, monkeypatch):
    """The second of three renames fails: the first is undone (old content back), nothing new remains."""
    first, second, third = tmp_path / "a.pt", tmp_path / "b.pt", tmp_path / "new" / "c.json"
    first.write_bytes(b"user's a")
    real_replace = os.replace
    calls = []

    def flaky(src, dst):  # noqa: ANN001, ANN202
        calls.append(dst)
        if str(dst) == str(second) and len([c for c in calls if str(c) == str(second)]) == 1:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_replace(src, dst)

    monkeypatch.setattr(atomic.os, "replace", flaky)
    with pytest.raises(OSError) as info:
        write_together({first: b"A", second: b"B", third: b"C"})
    monkeypatch.undo()
    assert info.value.errno == errno.ENOSPC and info.value.filename == str(second)
    assert first.read_bytes() == b"user's a"  # the replaced file is back
    assert not second.exists() and not third.exists() and not third.parent.exists()  # and the folder it made is gone
    assert _leftovers(tmp_path) == []


def test_a_failed_write_leaves_nothing_and_names_the_file(tmp_path, monkeypatch):
    target = tmp_path / "r.html"
    kept = tmp_path / "r.json"
    kept.write_text("previous report")
    real = atomic._write_temp

    def full(path, payload, mode):  # noqa: ANN001, ANN202
        if path == target:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(path, payload, mode)

    monkeypatch.setattr(atomic, "_write_temp", full)
    with pytest.raises(OSError) as info:
        write_together({kept: "new report", target: "<html>"})
    assert info.value.filename == str(target) and "No space left" in info.value.strerror
    assert kept.read_text() == "previous report" and not target.exists()
    assert _leftovers(tmp_path) == []


def test_an_interrupt_during_the_write_leaves_no_temporary_file(tmp_path, monkeypatch):
    def interrupted(fd):  # noqa: ANN001, ANN202
        raise KeyboardInterrupt

    monkeypatch.setattr(atomic.os, "fsync", interrupted)
    with pytest.raises(KeyboardInterrupt):
        write_together({tmp_path / "a": b"1", tmp_path / "b": b"2"})
    monkeypatch.undo()
    assert list(tmp_path.iterdir()) == []


def test_same_destination_twice_is_refused(tmp_path):
    with pytest.raises(ValueError, match="given twice"):
        write_together({tmp_path / "x": b"1", tmp_path / ".." / tmp_path.name / "x": b"2"})
    assert list(tmp_path.iterdir()) == []


def test_temporary_names_are_recognisable_and_stale_ones_are_removed(tmp_path):
    out = tmp_path / "report.json"
    name = temp_name(out).name
    assert name.startswith(".report.json.privgate-") and name.endswith(".tmp") and f"-{os.getpid()}-" in name
    dead = _dead_pid()
    stale = tmp_path / f".report.json.privgate-{dead}-0badc0de.tmp"
    stale.write_text("half a report")
    stale_dir = tmp_path / f".report.json.privgate-{dead}-feedf00d.tmp"  # a staging folder of a killed run
    (stale_dir / "inversion").mkdir(parents=True)
    (stale_dir / "inversion" / "x.png").write_bytes(b"png")
    mine = tmp_path / f".report.json.privgate-{os.getpid()}-12345678.tmp"  # a live process's: kept
    mine.write_text("in progress")
    other = tmp_path / f".other.json.privgate-{dead}-0badc0de.tmp"  # another output's: not this write's business
    other.write_text("x")
    user = tmp_path / ".report.json.tmp"  # not privgate's name: never touched
    user.write_text("user file")
    write_atomic(out, "{}")
    assert not stale.exists() and not stale_dir.exists()
    assert mine.exists() and other.exists() and user.exists() and out.read_text() == "{}"
    assert remove_stale(tmp_path / "other.json") == [other]


@pytest.mark.skipif(not hasattr(signal, "pthread_sigmask"), reason="POSIX signal masks")
def test_signals_are_held_while_the_files_are_renamed(tmp_path, monkeypatch):
    """A SIGINT arriving between two renames is delivered after the last one: the set is complete."""
    real_replace = os.replace
    seen = []

    def replace_and_signal(src, dst):  # noqa: ANN001, ANN202
        real_replace(src, dst)
        seen.append(dst)
        if len(seen) == 1:
            os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(atomic.os, "replace", replace_and_signal)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # xdist workers may ignore SIGINT
    try:
        with pytest.raises(KeyboardInterrupt):
            write_together({tmp_path / "a": b"1", tmp_path / "b": b"2"})
    finally:
        signal.signal(signal.SIGINT, previous)
        monkeypatch.undo()
    assert (tmp_path / "a").read_bytes() == b"1" and (tmp_path / "b").read_bytes() == b"2"
    assert _leftovers(tmp_path) == []


def test_write_new_never_replaces_anything(tmp_path, monkeypatch):
    target = tmp_path / "sub" / "new.txt"
    assert atomic.write_new(target, "first\n") == target
    assert target.read_text() == "first\n"
    with pytest.raises(FileExistsError):
        atomic.write_new(target, "second\n")
    assert target.read_text() == "first\n"
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    (tmp_path / "folder").mkdir()
    for taken in ("dangling", "folder"):
        with pytest.raises(FileExistsError):
            atomic.write_new(tmp_path / taken, "x")
    assert not (tmp_path / "nowhere").exists()

    def no_links(src, dst):  # a file system without hard links: the check-and-rename fallback
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(atomic.os, "link", no_links)
    atomic.write_new(tmp_path / "fallback.txt", b"bytes")
    assert (tmp_path / "fallback.txt").read_bytes() == b"bytes"
    with pytest.raises(FileExistsError):
        atomic.write_new(tmp_path / "fallback.txt", b"again")
    assert _leftovers(tmp_path) == []
