"""The reference-model cache for scikit-learn models: fitted estimators, authenticated before they are read.

Each estimator is its pickle, ``models/<ab>/<key>.skl`` beside the torch cache (:mod:`privgate.training.cache`),
after a one-line JSON header holding the key, the SHA-256 of key and pickle, and an HMAC-SHA256 tag of that digest
under the cache's secret key (RFC 2104). Unpickling runs code, so an entry is unpickled only after its tag verifies
in constant time and its bytes hash to its digest; any other entry is refitted and rewritten, with the torch cache's
warnings. Without a key, entries serve this process only. Format: ``docs/internals-training-stats.md``.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import pickle
from pathlib import Path
from typing import Any

from privgate.io.atomic import write_atomic
from privgate.training.cache import ModelCache, _reason

ENTRY_FORMAT = "privgate-sklearn-cache"
ENTRY_VERSION = 1
#: The longest header line read before the pickle.
_HEADER_MAX = 4096


def entry_digest(key: str, payload: bytes) -> str:
    """SHA-256 of the entry's key and its pickle's bytes."""
    h = hashlib.sha256(f"{ENTRY_FORMAT}|{ENTRY_VERSION}|{key}|".encode())
    h.update(payload)
    return h.hexdigest()


class SklearnCache(ModelCache):
    """Fitted scikit-learn estimators by key; the folder, key, locks and warnings of :class:`ModelCache`."""

    redone = "the model was refitted"
    redone_all = "the models were refitted"

    def path(self, key: str) -> Path:
        return self.root / "models" / key[:2] / f"{key}.skl"

    def _tag(self, digest: str) -> str:
        return hmac.new(self._secret, f"{ENTRY_FORMAT}|{ENTRY_VERSION}|{digest}".encode(), hashlib.sha256).hexdigest()

    def load_model(self, key: str) -> Any:
        """The fitted estimator stored under ``key``, or None (a miss, or an entry refused: see :attr:`warnings`)."""
        p = self.path(key)
        try:
            if not p.is_file():
                return None
            raw = p.read_bytes()
        except OSError as exc:
            self._rejected(key, f"it cannot be read: {_reason(exc)}")
            return None
        head, sep, payload = raw.partition(b"\n")
        try:
            entry = json.loads(head.decode()) if sep and len(head) <= _HEADER_MAX else None
        except (UnicodeDecodeError, ValueError):
            entry = None
        if not isinstance(entry, dict) or entry.get("format") != ENTRY_FORMAT:
            self._rejected(key, "it is not a privgate cache entry")
            return None
        digest, tag = entry.get("sha256"), entry.get("tag")
        if entry.get("version") != ENTRY_VERSION or not isinstance(digest, str) or not isinstance(tag, str):
            self._refused.add(key)
            return None
        if not hmac.compare_digest(tag.encode(), self._tag(digest).encode()):
            self._refused.add(key)  # never unpickled: it was not written under this key
            return None
        if entry.get("key") != key:
            self._rejected(key, f"it holds the model of another key, {str(entry.get('key'))[:12]}")
            return None
        if entry_digest(key, payload) != digest:
            self._rejected(key, "its bytes do not match their SHA-256")
            return None
        try:
            return pickle.loads(payload)  # noqa: S301 - authenticated above: written under this cache's secret key
        except Exception as exc:  # noqa: BLE001 - a library upgrade that cannot read its own old pickle
            self._rejected(key, f"it cannot be unpickled: {exc.__class__.__name__}")
            return None

    def store_model(self, key: str, model: Any) -> bool:
        """Write ``model`` under ``key`` atomically; False (and a warning) when the cache cannot be written."""
        if not self._writable:
            return False
        payload = pickle.dumps(model, protocol=pickle.HIGHEST_PROTOCOL)
        digest = entry_digest(key, payload)
        head = {
            "format": ENTRY_FORMAT,
            "version": ENTRY_VERSION,
            "key": key,
            "sha256": digest,
            "tag": self._tag(digest),
        }
        try:
            write_atomic(self.path(key), json.dumps(head).encode() + b"\n" + payload)
        except OSError as exc:
            self._unusable(exc)
            return False
        return True


__all__ = ["ENTRY_FORMAT", "ENTRY_VERSION", "SklearnCache", "entry_digest"]
