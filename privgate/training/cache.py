"""The reference-model cache: trained models on disk, authenticated and verified on every load, never able to
change a verdict.

One ``torch.save`` per model, ``models/<ab>/<key>.pt``: the state with a SHA-256 digest (:func:`entry_digest`) and an
HMAC-SHA256 tag of it under a secret key (:func:`entry_tag`; Bellare, Canetti & Krawczyk 1996, RFC 2104). An entry
that fails its tag, key, digest or shapes is retrained and overwritten, with a warning
(:attr:`ModelCache.warnings`); an unwritable folder is skipped. Without a key (``secret=None``) entries serve this
process only. Writes are atomic; runs lock per ensemble (``fcntl``). Format and rationale: ``docs/attacks.md``
(the cache) and ``docs/threat-model.md`` ("The cache").
"""

from __future__ import annotations

import hashlib
import hmac
import io
import secrets
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from privgate.io.atomic import write_atomic
from privgate.options import MIN_CACHE_KEY_BYTES

try:  # POSIX only; elsewhere concurrent runs rely on write-then-rename idempotence
    import fcntl
except ImportError:  # pragma: no cover
    fcntl = None  # type: ignore[assignment]

if TYPE_CHECKING:  # torch is imported by the torch entries' reads and writes: scikit-learn's cache never imports it
    import torch

ENTRY_FORMAT = "privgate-model-cache"
#: 2: entries carry an HMAC tag (version 1 entries have none: they are refused and rewritten).
ENTRY_VERSION = 2
#: The key of a cache given none: random, this process's only (its entries serve this process alone).
_PROCESS_SECRET = secrets.token_bytes(32)


def entry_digest(key: str, state: Mapping[str, torch.Tensor]) -> str:
    """SHA-256 of ``key`` and of each tensor's name, dtype, shape and bytes, in name order."""
    import torch

    h = hashlib.sha256()
    h.update(f"{ENTRY_FORMAT}|{ENTRY_VERSION}|{key}|".encode())
    for name in sorted(state):
        t = state[name].detach().cpu().contiguous()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def entry_tag(secret: bytes, digest: str) -> str:
    """HMAC-SHA256 under ``secret`` of an entry's :func:`entry_digest` (which covers its key and tensors)."""
    return hmac.new(secret, f"{ENTRY_FORMAT}|{ENTRY_VERSION}|{digest}".encode(), hashlib.sha256).hexdigest()


def _reason(exc: OSError) -> str:
    return exc.strerror or exc.__class__.__name__


class ModelCache:
    """A folder of trained models, one authenticated and verified file per key.

    Attributes:
        root: the cache folder.
        redone: what happens instead of using a failed entry, for the warnings ("the model was retrained").
    """

    redone = "the model was retrained"
    redone_all = "the models were retrained"

    def __init__(self, root: str | Path, secret: bytes | None = None) -> None:
        """
        Args:
            root: the cache folder.
            secret: the key entries are tagged with (at least
                :data:`privgate.options.MIN_CACHE_KEY_BYTES` bytes); ``None``: a random key of this
                process, so entries serve this process only.
        """
        if secret is not None and (not isinstance(secret, bytes) or len(secret) < MIN_CACHE_KEY_BYTES):
            raise ValueError(f"a cache key must be at least {MIN_CACHE_KEY_BYTES} bytes")
        self.root = Path(root)
        self._secret = _PROCESS_SECRET if secret is None else secret
        self._messages: list[str] = []
        self._refused: set[str] = set()
        self._writable = True
        self._warned: set[str] = set()

    def __repr__(self) -> str:  # never the secret
        return f"{type(self).__name__}({str(self.root)!r})"

    @property
    def warnings(self) -> list[str]:
        """Sentences for the report: entries that failed their integrity check, one for every entry refused for
        want of a valid tag (with their number), and a cache folder that could not be used."""
        n = len(self._refused)
        if not n:
            return list(self._messages)
        one = n == 1
        rewritten = (
            f", and the {'entry' if one else 'entries'} rewritten with this key"
            if self._writable
            else " (the cache cannot be written, so nothing was rewritten)"
        )
        return [
            *self._messages,
            f"{'1 cache entry' if one else f'{n} cache entries'} in {self.root} had no valid tag for this run's cache "
            f"key (written under another key, by an older privgate, or forged) and {'was' if one else 'were'} not "
            f"used: {self.redone if one else self.redone_all}{rewritten}; runs that share a cache must share its key",
        ]

    def path(self, key: str) -> Path:
        return self.root / "models" / key[:2] / f"{key}.pt"

    def _warn(self, topic: str, sentence: str) -> None:
        if topic not in self._warned:
            self._warned.add(topic)
            self._messages.append(sentence)

    def _rejected(self, key: str, why: str) -> None:
        self._warn(
            key,
            f"cache entry {key[:12]} ({self.path(key)}) failed its integrity check ({why}); it was not used, "
            f"and {self.redone}",
        )

    def _unusable(self, exc: OSError) -> None:
        self._writable = False
        self._warn(
            "", f"the reference-model cache {self.root} cannot be used ({_reason(exc)}); models were trained without it"
        )

    def load(self, key: str, like: Mapping[str, torch.Tensor] | None) -> dict[str, torch.Tensor] | None:
        """The verified state for ``key``, or None (a miss, or an entry that failed: see :attr:`warnings`).

        Args:
            key: the model's cache key.
            like: a state_dict of the model being trained: names and shapes an entry must have (None: a
                training function's model, whose architecture is known once one is trained, and checked then).
        """
        p = self.path(key)
        try:
            if not p.is_file():
                return None
            raw = p.read_bytes()
        except OSError as exc:
            self._rejected(key, f"it cannot be read: {_reason(exc)}")
            return None
        import torch

        try:
            entry: Any = torch.load(io.BytesIO(raw), map_location="cpu", weights_only=True)
        except Exception as exc:  # noqa: BLE001 - truncated, bit-flipped or foreign bytes
            self._rejected(key, f"it is not a readable tensor file: {exc.__class__.__name__}")
            return None
        if not self._authentic(entry):
            self._refused.add(key)
            return None
        why = self._verify(key, entry, like)
        if why:
            self._rejected(key, why)
            return None
        return dict(entry["state"])

    def _authentic(self, entry: Any) -> bool:
        """Whether ``entry`` carries this cache's tag of the digest it records (anything else is refused; an entry
        that is no cache entry at all is left to :meth:`_verify`)."""
        if not isinstance(entry, dict) or entry.get("format") != ENTRY_FORMAT:
            return True
        digest, tag = entry.get("sha256"), entry.get("tag")
        if entry.get("version") != ENTRY_VERSION or not isinstance(digest, str) or not isinstance(tag, str):
            return False
        return hmac.compare_digest(tag.encode(), entry_tag(self._secret, digest).encode())

    @staticmethod
    def _verify(key: str, entry: Any, like: Mapping[str, torch.Tensor] | None) -> str:
        """Empty when ``entry`` is this key's, unmodified, with the model's tensors; else what is wrong."""
        import torch

        if (
            not isinstance(entry, dict)
            or entry.get("format") != ENTRY_FORMAT
            or not isinstance(entry.get("state"), dict)
        ):
            return "it is not a privgate cache entry"
        stored = entry.get("key")
        if stored != key:
            return f"it holds the model of another key, {str(stored)[:12]}, e.g. a copied or swapped file"
        state = entry["state"]
        if not all(isinstance(t, torch.Tensor) for t in state.values()) or (
            like is not None and (set(state) != set(like) or any(state[n].shape != like[n].shape for n in like))
        ):
            return "its tensors are not this model's"
        if entry.get("sha256") != entry_digest(key, state):
            return "its weights do not match their SHA-256"
        return ""

    def store(self, key: str, state: Mapping[str, torch.Tensor]) -> bool:
        """Write ``state`` under ``key`` atomically; False (and a warning) when the cache cannot be written."""
        if not self._writable:
            return False
        import torch

        clean = {k: v.detach().cpu().clone() for k, v in state.items()}
        buf = io.BytesIO()
        digest = entry_digest(key, clean)
        torch.save(
            {
                "format": ENTRY_FORMAT,
                "version": ENTRY_VERSION,
                "key": key,
                "sha256": digest,
                "tag": entry_tag(self._secret, digest),
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


__all__ = ["ModelCache", "entry_digest", "entry_tag"]
