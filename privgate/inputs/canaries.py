"""Canaries: random secrets a team inserts into its training text to measure memorisation later.

Canary exposure: Carlini, Liu, Erlingsson, Kos & Song (2019), arXiv 1802.08232.

The rest (design, limits, derivations): docs/internals-inputs.md.
"""

from __future__ import annotations

import json
import math
import secrets as _secrets
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict

from privgate.errors import DataError, shown
from privgate.inputs.text import char_limit, json_line, unicode_text
from privgate.inputs.textfile import read_limited

#: Largest canary file read (16 MiB).
MAX_CANARY_BYTES = 16 << 20
#: Most canaries one file may hold by default (``--max-canaries``, config key ``max_canaries``).
MAX_CANARIES = 1000
#: Largest randomness space, in bits (log2 |R|): exposures are computed in floating point.
MAX_SPACE_BITS = 1000

#: The default alphabet: decimal digits, as in the paper's "my social security number is ..." canaries.
DIGITS = "0123456789"

#: The default prefix; ``{i}`` is the canary's number, so every canary has its own context.
DEFAULT_TEMPLATE = "canary {i}: the secret number is "

FIELDS = ("prefix", "secret", "alphabet")


class Canary(BaseModel):
    """One canary: ``prefix`` + ``secret``, the secret a string over ``alphabet`` (validated by the loader)."""

    model_config = ConfigDict(frozen=True)

    prefix: str
    secret: str
    alphabet: str

    @property
    def space(self) -> int:
        """|R| = |alphabet| ** len(secret): how many secrets the canary could have had."""
        return len(self.alphabet) ** len(self.secret)

    @property
    def space_bits(self) -> float:
        """log2 |R|, the largest exposure the canary can show."""
        return len(self.secret) * math.log2(len(self.alphabet))


def validate_canary(row: object, where: str) -> Canary:
    """A :class:`Canary` from one parsed row, or a :class:`DataError` naming ``where`` (file and line)."""
    if not isinstance(row, dict):
        raise DataError(f"{where}: expected a JSON object with fields {', '.join(FIELDS)}, got {shown(row, 60)}.")
    for name in FIELDS:
        if name not in row:
            raise DataError(f"{where}: the canary has no field '{name}' (each needs {', '.join(FIELDS)}).")
        if not isinstance(row[name], str):
            raise DataError(f"{where}: field '{name}' must be a string, got {shown(row[name], 60)}.")
        unicode_text(row[name], where, f"field '{name}'")
    prefix, secret, alphabet = row["prefix"], row["secret"], row["alphabet"]
    if not prefix:
        raise DataError(f"{where}: the prefix is empty; a canary's secret needs a prefix to follow.")
    if not alphabet:
        raise DataError(f'{where}: the alphabet is empty; give the characters a secret may use, e.g. "{DIGITS}".')
    repeated = sorted({c for c in alphabet if alphabet.count(c) > 1})
    if repeated:
        raise DataError(f"{where}: the alphabet {shown(alphabet, 60)} repeats {shown(''.join(repeated), 30)}.")
    if not secret:
        raise DataError(f"{where}: the secret is empty.")
    outside = sorted({c for c in secret if c not in alphabet})
    if outside:
        raise DataError(
            f"{where}: the secret {shown(secret, 60)} uses {shown(''.join(outside), 30)}, "
            f"not in its alphabet {shown(alphabet, 60)}."
        )
    bits = len(secret) * math.log2(len(alphabet))
    if bits > MAX_SPACE_BITS:
        raise DataError(
            f"{where}: the secret's {len(secret):,} characters over an alphabet of {len(alphabet):,} make "
            f"2^{bits:,.0f} candidates, more than the 2^{MAX_SPACE_BITS} privgate ranks a secret among; use a "
            "shorter secret."
        )
    return Canary(prefix=prefix, secret=secret, alphabet=alphabet)


def read_canaries(path: str | Path, max_canaries: int = MAX_CANARIES) -> list[tuple[int, Canary]]:
    """(line, canary) of every canary in a JSON Lines file (module docstring); blank lines are ignored.

    Raises:
        DataError: one sentence naming the file and line — unreadable file, invalid or too deeply
            nested JSON, a missing or non-string field, a lone surrogate, an empty or repeating alphabet,
            a secret with characters outside its alphabet, more than ``max_canaries`` canaries (refused
            at the first one past the limit), or a file with no canary.
    """
    p = Path(path)
    text = read_limited(p, "canary file", DataError, MAX_CANARY_BYTES)
    canaries = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{p}, line {number}"
        if len(canaries) == max_canaries:
            raise DataError(
                f"{where}: the canary file holds more than {max_canaries:,} canaries, the limit (each secret is ranked "
                "among thousands of scored candidates); raise it with --max-canaries N (config key max_canaries)."
            )
        canaries.append((number, validate_canary(json_line(line, where), where)))
    if not canaries:
        raise DataError(f"{p}: the canary file has no canaries (one JSON object a line).")
    return canaries


def load_canaries(path: str | Path, max_canaries: int = MAX_CANARIES) -> list[Canary]:
    """The canaries of a JSON Lines file, as :func:`read_canaries` validates them."""
    return [c for _, c in read_canaries(path, max_canaries)]


def make_canaries(
    n: int,
    *,
    length: int = 6,
    alphabet: str = DIGITS,
    prefix_template: str = DEFAULT_TEMPLATE,
    seed: int | None = None,
) -> list[Canary]:
    """``n`` fresh canaries with secrets drawn uniformly from ``alphabet ** length``.

    Args:
        n: how many (≥ 1).
        length: characters per secret (≥ 1).
        alphabet: the characters a secret uses (distinct, non-empty).
        prefix_template: each canary's prefix; ``{i}`` becomes its number (0, 1, ...), so a
            template without it gives every canary the same prefix.
        seed: seeds the draw (reproducible canaries); None draws from the operating
            system's randomness (:mod:`secrets`), which is what a real deployment wants —
            a secret an attacker could regenerate from a known seed is no secret.

    Raises:
        ValueError: a bad argument (the CLI checks its options before calling).
    """
    if n < 1:
        raise ValueError(f"n must be at least 1, got {n}")
    if length < 1:
        raise ValueError(f"length must be at least 1, got {length}")
    if not alphabet or len(set(alphabet)) != len(alphabet):
        raise ValueError(f"alphabet must be non-empty with distinct characters, got {alphabet!r}")
    if not prefix_template:
        raise ValueError("prefix_template must not be empty")
    entropy = _secrets.randbits(128) if seed is None else seed
    rng = np.random.default_rng(np.random.SeedSequence([entropy, 0xCA7A]))
    chars = np.asarray(list(alphabet))
    draws = rng.integers(0, len(alphabet), size=(n, length))
    return [
        Canary(prefix=prefix_template.replace("{i}", str(i)), secret="".join(chars[draws[i]]), alphabet=alphabet)
        for i in range(n)
    ]


def to_jsonl(canaries: Sequence[Canary]) -> str:
    """The canary file's text (module docstring): one JSON object a line."""
    return "".join(json.dumps(c.model_dump(), ensure_ascii=False) + "\n" for c in canaries)


def check_fits(rows: Sequence[tuple[str, Canary]], tokenizer: Any, context: int) -> None:
    """Refuse a canary whose prefix and secret do not fit the model's context (``rows``: (where, canary)).

    Checked before anything is scored: the characters first (nothing is tokenised past the bound of
    :func:`privgate.inputs.text.char_limit`), then the tokens of prefix + secret.
    """
    most = char_limit(context)
    for where, c in rows:
        chars = len(c.prefix) + len(c.secret)
        if chars > most:
            raise DataError(
                f"{where}: the canary's prefix and secret are {chars:,} characters, more than the model's context of "
                f"{context:,} tokens can hold ({most:,} characters at most); use a shorter prefix."
            )
        n = len(tokenizer([c.prefix + c.secret], add_special_tokens=True)["input_ids"][0])
        if n > context:
            raise DataError(
                f"{where}: the canary's prefix and secret are {n:,} tokens, more than the model's context of "
                f"{context:,}; use a shorter prefix."
            )


__all__ = [
    "DEFAULT_TEMPLATE",
    "DIGITS",
    "MAX_CANARIES",
    "Canary",
    "check_fits",
    "load_canaries",
    "make_canaries",
    "read_canaries",
    "to_jsonl",
    "validate_canary",
]
