"""Close-match suggestions for misspelt names: ``maxx`` → "did you mean 'max'?".

Used wherever a user's key or name is checked against a known set (policy
fields, attack names and options, config keys), with :func:`difflib.get_close_matches`
(Ratcliff/Obershelp similarity, cutoff 0.6 — the standard library's default).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

from privgate.errors import shown


def close_match(word: object, choices: Iterable[str]) -> str | None:
    """The known name closest to ``word``, or None when nothing is close (or ``word`` is not a string)."""
    if not isinstance(word, str) or len(word) > 200:
        return None
    found = difflib.get_close_matches(word, sorted(set(choices)), n=1)
    return found[0] if found else None


def did_you_mean(word: object, choices: Iterable[str]) -> str:
    """`` (did you mean 'max'?)`` when a choice is close to ``word``, else an empty string."""
    match = close_match(word, choices)
    return f" (did you mean {shown(match)}?)" if match is not None else ""


__all__ = ["close_match", "did_you_mean"]
