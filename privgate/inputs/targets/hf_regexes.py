"""Regular expressions a model folder brings: the ones that can backtrack catastrophically are refused.

ReDoS: Davis et al. (2018); star height: Weideman et al. (2016), arXiv 1604.06877.

The rest (design, limits, derivations): docs/internals-inputs.md.
"""

from __future__ import annotations

import re
from typing import Any

try:  # Python >= 3.11
    from re import _constants as _sre  # type: ignore[attr-defined]
    from re import _parser as _parse  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - Python 3.10
    import sre_constants as _sre  # type: ignore[no-redef]
    import sre_parse as _parse  # type: ignore[no-redef]

#: Oniguruma escapes of one character that Python's parser lacks (``\p{L}`` and ``\x{HHHH}`` are handled apart).
_ONE_CHAR = set("hHRXO")
#: Oniguruma's zero-width escapes that Python's parser lacks.
_ZERO_WIDTH = set("GKyY")
_REPEATS = {_sre.MAX_REPEAT, _sre.MIN_REPEAT, getattr(_sre, "POSSESSIVE_REPEAT", _sre.MAX_REPEAT)}
_BACKREFS = {_sre.GROUPREF, _sre.GROUPREF_EXISTS, getattr(_sre, "GROUPREF_IGNORE", _sre.GROUPREF)}
#: The longest pattern looked at (tokenizers' are a few hundred characters).
MAX_PATTERN = 10_000


def _class_end(pattern: str, i: int) -> int:
    """The index after the character class opening at ``pattern[i]`` (Oniguruma nests classes: ``[^a[bc]]``)."""
    depth, i = 1, i + 1
    if pattern[i : i + 1] == "^":
        i += 1
    if pattern[i : i + 1] == "]":  # a ']' first is a literal
        i += 1
    while i < len(pattern) and depth:
        c = pattern[i]
        i += 2 if c == "\\" else 1
        depth += (c == "[") - (c == "]")
    return i


def _python_syntax(pattern: str) -> str:
    """``pattern`` (Oniguruma syntax) in a form Python's parser reads with the same shape of loops and branches.

    A character class, a property (``\\p{L}``) or a code point (``\\x{263A}``) stands for one character, so each
    becomes ``x``: which characters they hold does not matter to :func:`_scan`.
    """
    out, i = [], 0
    while i < len(pattern):
        c = pattern[i]
        if c == "[":
            out.append("x")
            i = _class_end(pattern, i)
        elif c == "\\" and pattern[i + 1 : i + 2] in ("p", "P", "x") and pattern[i + 2 : i + 3] == "{":
            close = pattern.find("}", i)
            out.append("x")
            i = close + 1 if close > 0 else len(pattern)
        elif c == "\\":
            nxt = pattern[i + 1 : i + 2]
            out.append("x" if nxt in _ONE_CHAR else "" if nxt in _ZERO_WIDTH else "\\Z" if nxt == "z" else c + nxt)
            i += 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _scan(items: Any) -> tuple[bool, str | None]:
    """(whether ``items`` can match one string in more than one way, the problem if a loop holds such a part)."""
    ambiguous = False
    for op, av in items:
        if op in _REPEATS:
            lo, hi, body = av
            loops = hi == _sre.MAXREPEAT or hi > 1
            inner, problem = _scan(body)
            if problem:
                return True, problem
            if loops and inner:
                return True, "a repetition holds another repetition or an alternation, as (a+)+ or (a|aa)+ do"
            ambiguous = ambiguous or lo != hi or inner
        elif op is _sre.BRANCH:
            ambiguous = True
            for alt in av[1]:
                _, problem = _scan(alt)
                if problem:
                    return True, problem
        elif op in _BACKREFS:
            return True, "it has a backreference"
        elif op is _sre.SUBPATTERN:
            inner, problem = _scan(av[-1])
            if problem:
                return True, problem
            ambiguous = ambiguous or inner
        elif op in (_sre.ASSERT, _sre.ASSERT_NOT) or op is getattr(_sre, "ATOMIC_GROUP", None):
            body = av[1] if op in (_sre.ASSERT, _sre.ASSERT_NOT) else av
            inner, problem = _scan(body)
            if problem:
                return True, problem
            ambiguous = ambiguous or inner
    return ambiguous, None


def backtracking_problem(pattern: str, *, oniguruma: bool) -> str | None:
    """Why ``pattern`` may backtrack catastrophically (module docstring), or ``None`` when it cannot.

    Args:
        pattern: the regular expression.
        oniguruma: the pattern is in Oniguruma's syntax (``tokenizers``), else Python's (``re``, PEFT).
    """
    if len(pattern) > MAX_PATTERN:
        return f"it is longer than {MAX_PATTERN:,} characters"
    try:
        parsed = _parse.parse(_python_syntax(pattern) if oniguruma else pattern)
    except (re.error, RecursionError, OverflowError, ValueError):
        return "privgate cannot parse it to tell whether it backtracks catastrophically"
    try:
        return _scan(parsed)[1]
    except RecursionError:
        return "it is nested too deeply"


def tokenizer_patterns(components: Any) -> list[str]:
    """Every regular expression in a ``tokenizers`` component's JSON (``{"pattern": {"Regex": …}}``, nested)."""
    found: list[str] = []
    stack = [components]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            pattern = node.get("pattern")
            if isinstance(pattern, dict) and isinstance(pattern.get("Regex"), str):
                found.append(pattern["Regex"])
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return found


#: PEFT adapter settings that PEFT matches as Python regular expressions against module names.
PEFT_REGEX_FIELDS = ("target_modules", "exclude_modules", "layers_pattern", "rank_pattern", "alpha_pattern")


def peft_patterns(adapter: dict[str, Any]) -> list[tuple[str, str]]:
    """(field, pattern) of every regular expression in a PEFT ``adapter_config.json`` (:data:`PEFT_REGEX_FIELDS`).

    ``target_modules`` and ``exclude_modules`` are regular expressions when they are a string (a list names
    module suffixes); ``layers_pattern`` is one or a list; the keys of ``rank_pattern`` and ``alpha_pattern`` are.
    """
    out: list[tuple[str, str]] = []
    for field in PEFT_REGEX_FIELDS:
        value = adapter.get(field)
        if field in ("rank_pattern", "alpha_pattern"):
            keys = list(value) if isinstance(value, dict) else []
        elif field == "layers_pattern":
            keys = [value] if isinstance(value, str) else [v for v in value if isinstance(v, str)] if value else []
        else:
            keys = [value] if isinstance(value, str) else []
        out.extend((field, k) for k in keys)
    return out


__all__ = ["MAX_PATTERN", "PEFT_REGEX_FIELDS", "backtracking_problem", "peft_patterns", "tokenizer_patterns"]
