"""Credentials sent to an endpoint, masked in every text a server's answer can put before a user.

The rest (design, limits, derivations): docs/internals-inputs.md.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterable
from urllib.parse import quote

#: Shortest text masked.
MIN_CHARS = 4
#: What a masked value reads as.
MASK = "***"
#: Authentication schemes (RFC 9110 §11, IANA's registry): a value's first word, not a secret.
SCHEMES = frozenset({"basic", "bearer", "digest", "negotiate", "token", "apikey", "hoba", "mutual", "scram-sha-256"})


def _basic(part: str) -> list[str]:
    """``user:password`` and its halves when ``part`` is base64 of text with a colon; else nothing."""
    try:
        text = base64.b64decode(part, validate=True).decode("utf-8")
    except (binascii.Error, ValueError):
        return []
    return [text, *text.split(":", 1)] if ":" in text else []


def secrets_of(values: Iterable[str]) -> set[str]:
    """Every text that would show one of ``values`` (module docstring), each at least :data:`MIN_CHARS` long."""
    found: set[str] = set()
    for value in values:
        whole = value.strip()
        parts = whole.split()
        texts = [whole, *(p for p in parts if p.lower() not in SCHEMES)]
        texts += [t for p in parts for t in _basic(p)]
        found.update(texts)
        found.update(quote(t, safe="") for t in texts)
    return {s for s in found if len(s) >= MIN_CHARS}


class Redactor:
    """Masks the credentials of one endpoint in a text: ``redact(text)``."""

    def __init__(self, values: Iterable[str]) -> None:
        found = sorted(secrets_of(values), key=len, reverse=True)  # longest first: a part never splits its whole
        self.pattern = re.compile("|".join(re.escape(s) for s in found), re.IGNORECASE) if found else None

    def __call__(self, text: str) -> str:
        return self.pattern.sub(MASK, text) if self.pattern is not None else text


__all__ = ["MASK", "MIN_CHARS", "Redactor", "secrets_of"]
