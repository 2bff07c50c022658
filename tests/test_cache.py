"""The reference-model cache cannot change a result: entries without a valid tag for the run's key and tampered
entries are caught and retrained, an unusable cache folder is skipped with a warning. (The forgery through the CLI,
and the CLI's folders and keys: test_cache_forgery.py.)"""

from __future__ import annotations

import errno
import io
import os

import numpy as np
import pytest
import torch
from torch import nn

from privgate import Recipe
from privgate.io import atomic
from privgate.training.cache import ModelCache, entry_digest, entry_tag
from privgate.training.engine import train_ensemble
from privgate.training.plan import model_seeds, paired_masks
from privgate.training.trained import TrainSettings

RECIPE = Recipe(
    lambda: nn.Sequential(nn.Linear(6, 12), nn.Tanh(), nn.Linear(12, 3)), epochs=3, batch_size=16, lr=1e-2, name="tiny"
)


def _data(n: int = 90) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return rng.normal(size=(n, 6)).astype(np.float32), rng.integers(0, 3, n)


def _train(cache_dir, key=None):  # noqa: ANN001, ANN202
    x, y = _data()
    masks, seeds = paired_masks(len(x), 4, 0), model_seeds(0, 4)
    return train_ensemble(RECIPE, x, y, masks, seeds, TrainSettings(cache_dir=cache_dir, cache_key=key))


def _same(a, b) -> bool:  # noqa: ANN001
    return all(torch.equal(sa[k], sb[k]) for sa, sb in zip(a.models, b.models) for k in sa)


@pytest.fixture
def clean(tmp_path):
    """A cache holding the four models, the ensemble as trained, and the entry files in model order."""
    first = _train(tmp_path)
    cache = ModelCache(tmp_path)
    files = [p for p in sorted((tmp_path / "models").rglob("*.pt"))]
    assert first.trained == 4 and len(files) == 4 and first.warnings == []
    by_key = {torch.load(p, weights_only=True)["key"]: p for p in files}
    assert all(cache.path(k) == p for k, p in by_key.items())
    return first, files


def test_an_entry_is_its_key_a_hash_a_tag_and_the_tensors(clean):
    first, files = clean
    entry = torch.load(files[0], weights_only=True)
    assert entry["format"] == "privgate-model-cache" and entry["version"] == 2 and len(entry["sha256"]) == 64
    assert entry["sha256"] == entry_digest(entry["key"], entry["state"]) and len(entry["tag"]) == 64
    again = _train(files[0].parents[2])
    assert (again.trained, again.cached, again.warnings) == (0, 4, []) and _same(first, again)


KEY_A, KEY_B = b"A" * 32, b"B" * 32


def test_entries_serve_only_runs_with_their_key(tmp_path):
    """Tagged under key A: read by runs with A; a run with key B (or none: a key of its process) refuses all four,
    retrains them with one warning that counts them, and rewrites them under B."""
    first = _train(tmp_path, KEY_A)
    entry = torch.load(next((tmp_path / "models").rglob("*.pt")), weights_only=True)
    assert entry["tag"] == entry_tag(KEY_A, entry["sha256"]) != entry_tag(KEY_B, entry["sha256"])
    assert (_train(tmp_path, KEY_A).trained, _train(tmp_path, KEY_A).warnings) == (0, [])
    other = _train(tmp_path, KEY_B)
    assert (other.trained, other.cached) == (4, 0) and _same(first, other)
    assert other.warnings == [
        f"4 cache entries in {tmp_path} had no valid tag for this run's cache key (written under another key, by an "
        "older privgate, or forged) and were not used: the models were retrained, and the entries rewritten with "
        "this key; runs that share a cache must share its key"
    ]
    assert (_train(tmp_path, KEY_B).trained, _train(tmp_path, KEY_B).warnings) == (0, [])
    assert _train(tmp_path, KEY_A).trained == 4 and _train(tmp_path).trained == 4


@pytest.mark.parametrize("how", ["forged", "untagged", "version 1"])
def test_an_entry_with_a_recomputed_digest_but_no_valid_tag_is_refused(clean, tmp_path, how):
    """Other weights under a digest anyone can recompute (the tag kept, or removed), or an entry as privgate wrote
    it before tags (version 1, no tag): not used, whatever its digest says."""
    first, files = clean
    entry = torch.load(files[2], weights_only=True)
    if how == "forged":
        entry["state"] = {k: torch.zeros_like(v) for k, v in entry["state"].items()}
        entry["sha256"] = entry_digest(entry["key"], entry["state"])
    elif how == "untagged":
        del entry["tag"]
    else:
        entry["version"] = 1
        del entry["tag"]
    torch.save(entry, files[2])
    again = _train(tmp_path)
    assert (again.trained, again.cached) == (1, 3) and _same(first, again)
    (warning,) = again.warnings
    assert warning.startswith(f"1 cache entry in {tmp_path} had no valid tag") and "the model was retrained" in warning
    assert _train(tmp_path).warnings == []  # rewritten with a valid tag


def test_zeroed_weights_are_caught_and_retrained(clean, tmp_path):
    first, files = clean
    entry = torch.load(files[1], weights_only=True)
    entry["state"] = {k: torch.zeros_like(v) for k, v in entry["state"].items()}  # same key, same recorded hash
    torch.save(entry, files[1])
    again = _train(tmp_path)
    assert again.trained == 1 and again.cached == 3
    (warning,) = again.warnings
    assert f"cache entry {entry['key'][:12]}" in warning and "failed its integrity check" in warning
    assert "do not match their SHA-256" in warning and "retrained" in warning
    assert max(float((a[k] - b[k]).abs().max()) for a, b in zip(first.models, again.models) for k in a) < 1e-6
    assert _train(tmp_path).warnings == []  # the entry was overwritten with the retrained model


def test_swapped_entries_are_caught(clean, tmp_path):
    """A valid entry under another model's key: its hash matches its own tensors, but not the key asked for."""
    first, files = clean
    a, b = files[0].read_bytes(), files[2].read_bytes()
    files[0].write_bytes(b)
    files[2].write_bytes(a)
    again = _train(tmp_path)
    assert again.trained == 2 and len(again.warnings) == 2
    assert all("holds the model of another key" in w for w in again.warnings)
    assert max(float((x[k] - y[k]).abs().max()) for x, y in zip(first.models, again.models) for k in x) < 1e-6


@pytest.mark.parametrize("where", ["weights", "key", "truncated"])
def test_flipped_bytes_are_caught(clean, tmp_path, where):
    """One bit flipped in a weight (the file still loads: only the hash can tell) or in the stored key; a cut file."""
    first, files = clean
    raw = bytearray(files[3].read_bytes())
    if where == "weights":
        weight = torch.load(files[3], weights_only=True)["state"]["0.weight"]
        i = bytes(raw).find(weight.numpy().tobytes()) + 4 * 7 + 2  # a byte of the 8th weight
        assert i > 4 * 7 + 2
        raw[i] ^= 0x01
        changed = torch.load(io.BytesIO(bytes(raw)), weights_only=True)
        assert not torch.equal(changed["state"]["0.weight"], weight)  # loads fine, one weight differs
    elif where == "key":
        key = torch.load(files[3], weights_only=True)["key"]
        raw[bytes(raw).find(key.encode()) + 20] ^= 0x01
    else:
        raw = raw[: len(raw) * 2 // 3]
    files[3].write_bytes(bytes(raw))
    again = _train(tmp_path)
    assert again.trained == 1
    (warning,) = again.warnings
    assert "failed its integrity check" in warning
    if where == "weights":
        assert "do not match their SHA-256" in warning
    assert max(float((x[k] - y[k]).abs().max()) for x, y in zip(first.models, again.models) for k in x) < 1e-6


def test_old_format_entries_are_not_read(clean, tmp_path):
    """An entry as privgate wrote it before entries carried a hash: a bare state_dict."""
    _, files = clean
    entry = torch.load(files[0], weights_only=True)
    torch.save(entry["state"], files[0])
    again = _train(tmp_path)
    assert again.trained == 1 and "not a privgate cache entry" in again.warnings[0]


def test_a_cache_folder_that_cannot_be_created_is_skipped(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    ens = _train(blocker / "cache")
    assert ens.trained == 4 and ens.cached == 0
    (warning,) = ens.warnings
    assert f"reference-model cache {blocker / 'cache'} cannot be used" in warning and "trained without it" in warning
    reference = _train(None)
    assert _same(ens, reference)


def test_a_full_disk_is_skipped_with_a_warning(tmp_path, monkeypatch):
    def full(path, payload, mode):  # noqa: ANN001, ANN202
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(atomic, "_write_temp", full)
    ens = _train(tmp_path)
    monkeypatch.undo()
    assert ens.trained == 4 and len(ens.models) == 4
    (warning,) = ens.warnings  # one warning, not one per model
    assert "No space left on device" in warning
    assert not list(tmp_path.rglob("*.pt")) and not list(tmp_path.rglob("*.tmp"))
    assert _same(ens, _train(None))


@pytest.mark.skipif(os.geteuid() == 0 if hasattr(os, "geteuid") else True, reason="root writes through chmod 0o555")
def test_a_read_only_cache_is_read_but_not_written(tmp_path):
    first = _train(tmp_path)
    extra = paired_masks(90, 6, 0)
    for d in [tmp_path, *tmp_path.rglob("*")]:
        if d.is_dir():
            d.chmod(0o555)
    try:
        x, y = _data()
        ens = train_ensemble(RECIPE, x, y, extra, model_seeds(0, 6), TrainSettings(cache_dir=tmp_path))
    finally:
        for d in [tmp_path, *tmp_path.rglob("*")]:
            if d.is_dir():
                d.chmod(0o755)
    assert (ens.trained, ens.cached) == (2, 4) and "cannot be used" in ens.warnings[0]
    assert all(torch.equal(a[k], b[k]) for a, b in zip(first.models, ens.models[:4]) for k in a)
