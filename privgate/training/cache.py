"""The reference-model cache: trained models on disk, verified on every load, never able to change a verdict.

Each model is one file, ``models/<ab>/<key>.pt`` under the cache folder, a
``torch.save`` of::

    {"format": "privgate-model-cache", "version": 1, "key": KEY, "sha256": DIGEST, "state": {name: tensor}}

where ``DIGEST`` is the SHA-256 of the key and of every tensor's name, dtype,
shape and raw bytes in name order (:func:`entry_digest`). On load the entry
must name the requested key (a valid entry copied or swapped under another
model's key is caught here), its tensors must hash to ``DIGEST`` (zeroed,
edited or bit-flipped weights are caught here) and have the model's shapes.
An entry that fails is not used: the model is retrained and the entry
overwritten, and :attr:`ModelCache.warnings` says so, for the report. The hash
detects corruption, copies and edits, not a forger who recomputes it: the cache
is as trustworthy as whoever can write to its folder.

The cache only saves time. A folder that cannot be created or written (read
only, disk full, a path through a file) is skipped with one warning and the
run goes on training without it. Writes are atomic (:mod:`privgate.io.atomic`).
Concurrent runs serialise the training of one ensemble with an ``fcntl`` lock.
"""

from __future__ import annotations

import hashlib
import io
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from privgate.io.atomic import write_atomic

try:  # POSIX only; elsewhere concurrent runs rely on write-then-rename idempotence
    import fcntl
except ImportError:  # pragma: no cover
    fcntl = None  # type: ignore[assignment]

ENTRY_FORMAT = "privgate-model-cache"
ENTRY_VERSION = 1


def entry_digest(key: str, state: Mapping[str, torch.Tensor]) -> str:
    """SHA-256 of ``key`` and of each tensor's name, dtype, shape and bytes, in name order."""
    h = hashlib.sha256()
    h.update(f"{ENTRY_FORMAT}|{ENTRY_VERSION}|{key}|".encode())
    for name in sorted(state):
        t = state[name].detach().cpu().contiguous()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def _reason(exc: OSError) -> str:
    return exc.strerror or exc.__class__.__name__


class ModelCache:
    """A folder of trained models, one verified file per key.

    Attributes:
        root: the cache folder.
        warnings: sentences for the report: entries that failed their integrity
            check, and a cache folder that could not be used.
    """

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.warnings: list[str] = []
        self._writable = True
        self._warned: set[str] = set()

    def path(self, key: str) -> Path:
        return self.root / "models" / key[:2] / f"{key}.pt"

    def _warn(self, topic: str, sentence: str) -> None:
        if topic not in self._warned:
            self._warned.add(topic)
            self.warnings.append(sentence)

    def _rejected(self, key: str, why: str) -> None:
        self._warn(
            key,
            f"cache entry {key[:12]} ({self.path(key)}) failed its integrity check ({why}); it was not used, "
            f"and the model was retrained",
        )

    def _unusable(self, exc: OSError) -> None:
        self._writable = False
        self._warn(
            "", f"the reference-model cache {self.root} cannot be used ({_reason(exc)}); models were trained without it"
        )

    def load(self, key: str, like: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor] | None:
        """The verified state for ``key``, or None (a miss, or an entry that failed its check: see :attr:`warnings`).

        Args:
            key: the model's cache key.
            like: a state_dict of the model being trained: names and shapes an entry must have.
        """
        p = self.path(key)
        try:
            if not p.is_file():
                return None
            raw = p.read_bytes()
        except OSError as exc:
            self._rejected(key, f"it cannot be read: {_reason(exc)}")
            return None
        try:
            entry: Any = torch.load(io.BytesIO(raw), map_location="cpu", weights_only=True)
        except Exception as exc:  # noqa: BLE001 - truncated, bit-flipped or foreign bytes
            self._rejected(key, f"it is not a readable tensor file: {exc.__class__.__name__}")
            return None
        why = self._verify(key, entry, like)
        if why:
            self._rejected(key, why)
            return None
        return dict(entry["state"])

    @staticmethod
    def _verify(key: str, entry: Any, like: Mapping[str, torch.Tensor]) -> str:
        """Empty when ``entry`` is this key's, unmodified, with the model's tensors; else what is wrong."""
        if (
            not isinstance(entry, dict)
            or entry.get("format") != ENTRY_FORMAT
            or not isinstance(entry.get("state"), dict)
        ):
            return "it is not a privgate cache entry"
        if entry.get("version") != ENTRY_VERSION:
            return f"entry format version {entry.get('version')!r}, expected {ENTRY_VERSION}"
        stored = entry.get("key")
        if stored != key:
            return f"it holds the model of another key, {str(stored)[:12]}, e.g. a copied or swapped file"
        state = entry["state"]
        if set(state) != set(like) or any(
            not isinstance(state[n], torch.Tensor) or state[n].shape != like[n].shape for n in like
        ):
            return "its tensors are not this model's"
        if entry.get("sha256") != entry_digest(key, state):
            return "its weights do not match their SHA-256"
        return ""

    def store(self, key: str, state: Mapping[str, torch.Tensor]) -> bool:
        """Write ``state`` under ``key`` atomically; False (and a warning) when the cache cannot be written."""
        if not self._writable:
            return False
        clean = {k: v.detach().cpu().clone() for k, v in state.items()}
        buf = io.BytesIO()
        torch.save(
            {
                "format": ENTRY_FORMAT,
                "version": ENTRY_VERSION,
                "key": key,
                "sha256": entry_digest(key, clean),
                "state": clean,
            },
            buf,
        )
        try:
            write_atomic(self.path(key), buf.getvalue())
        except OSError as exc:
            self._unusable(exc)
            return False
        return True

    @contextmanager
    def lock(self, name: str) -> Iterator[None]:
        """An exclusive advisory lock (``fcntl.flock``) while one ensemble trains; none if the folder is unusable."""
        if fcntl is None or not self._writable:
            yield
            return
        d = self.root / "locks"
        fh = None
        try:
            d.mkdir(parents=True, exist_ok=True)
            fh = open(d / f"{name}.lock", "a+b")  # noqa: SIM115 - closed below
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        except OSError as exc:
            if fh is not None:
                fh.close()
                fh = None
            self._unusable(exc)
        try:
            yield
        finally:
            if fh is not None:
                fcntl.flock(fh.fileno(), fcntl.LOCK_UN)
                fh.close()


__all__ = ["ModelCache", "entry_digest"]
