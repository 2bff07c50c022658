"""Text records for language-model audits: ``.jsonl``, ``.txt`` and ``.csv``, checked at the door.

The rest (design, limits, derivations): docs/internals-inputs.md.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from privgate.errors import DataError

#: Largest text file privgate reads by default, in MiB (``--max-text-mib``, config key ``max_text_mib``).
MAX_MIB = 512
MAX_BYTES = MAX_MIB << 20
#: Most records one text file may hold by default (``--max-records``, config key ``max_records``).
MAX_RECORDS = 100_000
FORMATS = (".jsonl", ".txt", ".csv")
#: Characters of a record a report shows (the exposed members, the extracted ones).
SHOWN_CHARS = 200
#: A lone UTF-16 surrogate: what a JSON escape such as ``"\\ud800"`` decodes to; no Unicode text holds one.
_SURROGATE = re.compile("[\ud800-\udfff]")

#: A generous bound on the characters one token covers (English BPE averages about 4; long runs of spaces or
#: dashes rarely reach 16): a record is cut to context × this many characters before it is tokenised.
MAX_CHARS_PER_TOKEN = 32


def char_limit(context: int) -> int:
    """The most characters of a record worth tokenising for a model of ``context`` tokens."""
    return context * MAX_CHARS_PER_TOKEN


@dataclass(frozen=True)
class TextSet:
    """Records of text (and labels for classifiers) from one file.

    Attributes:
        texts: the records, in file order.
        labels: integer labels (classifiers), else ``None``.
        source: the file.
        role: ``members``, ``non-members`` or ``population``.
        lines: the line of each record in the file (1-based), for messages.
        clipped: the records (indices) cut to ``max_chars`` characters when read.
    """

    texts: list[str]
    labels: np.ndarray | None
    source: str
    role: str
    lines: list[int] = field(default_factory=list)
    clipped: tuple[int, ...] = ()

    def __len__(self) -> int:
        return len(self.texts)

    def sha256(self) -> str:
        h = hashlib.sha256()
        for t in self.texts:
            h.update(t.encode("utf-8") + b"\0")
        return h.hexdigest()


def shorten(text: str) -> str:
    """``text`` cut to :data:`SHOWN_CHARS` characters (a report shows records, not whole documents)."""
    return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 1] + "…"


def _mib(n: int) -> str:
    return f"{n >> 20:,} MiB" if n % (1 << 20) == 0 else f"{n / (1 << 20):,.1f} MiB"


def _read(p: Path, role: str, max_bytes: int = MAX_BYTES) -> str:
    """The UTF-8 text of the regular file ``p``; one larger than ``max_bytes`` is refused before it is read."""
    from privgate.inputs.textfile import open_regular

    if not p.exists():
        raise DataError(f"{p}: {role} file not found.")
    too_big = (
        f"{p}: the {role} file is larger than {_mib(max_bytes)}, the most privgate reads; raise the limit with "
        "--max-text-mib N (config key max_text_mib) if this is the right file."
    )
    with open_regular(p, f"the {role} file", DataError) as f:  # a FIFO or a device behind the name: refused
        if os.fstat(f.fileno()).st_size > max_bytes:
            raise DataError(too_big)
        data = f.read(max_bytes + 1)  # the file may have grown since
    if len(data) > max_bytes:
        raise DataError(too_big)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DataError(f"{p}: the {role} file is not UTF-8 text (byte {exc.start}).") from None


def json_line(line: str, where: str) -> object:
    """One JSON Lines row parsed; invalid or too deeply nested JSON is a :class:`DataError` naming ``where``."""
    try:
        return json.loads(line)
    except json.JSONDecodeError as exc:
        raise DataError(f"{where}: not valid JSON ({exc.msg} at column {exc.colno}).") from None
    except RecursionError:  # e.g. 10^5 nested brackets: Python's parser gives up
        raise DataError(f"{where}: the JSON is nested too deeply to parse (a row is one flat object).") from None


def unicode_text(value: str, where: str, what: str) -> str:
    """``value`` when it is Unicode text; a lone surrogate (from a JSON escape such as ``"\\ud800"``) is refused.

    A tokenizer, ``str.encode`` and every report writer would fail on it later; here it is one sentence.
    """
    bad = _SURROGATE.search(value)
    if bad is not None:
        raise DataError(
            f"{where}: {what} holds a lone surrogate ({ascii(bad.group())} at character {bad.start() + 1}), which is "
            "not Unicode text (a JSON escape such as \\ud800 must be one half of a pair)."
        )
    return value


def _too_many(p: Path, role: str, n: int, limit: int) -> DataError:
    return DataError(
        f"{p}, line {n}: the {role} file holds more than {limit:,} records, the limit; raise it with --max-records N "
        "(config key max_records) to audit them all."
    )


def _label(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        try:
            as_int = int(str(value).strip())
        except ValueError:
            raise DataError(f"{where}: label {str(value)[:40]!r} is not a class index (0, 1, 2, …).") from None
        if as_int < 0 or str(as_int) != str(value).strip():
            raise DataError(f"{where}: label {str(value)[:40]!r} is not a class index (0, 1, 2, …).")
        return as_int
    return value


def _jsonl(
    p: Path, text: str, role: str, text_field: str, labelled: bool, limit: int | None
) -> tuple[list[str], list[int], list[int]]:
    texts, labels, lines = [], [], []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        if len(texts) == limit:
            raise _too_many(p, role, n, limit)
        row = json_line(line, f"{p}, line {n}")
        if not isinstance(row, dict):
            raise DataError(f"{p}, line {n}: expected a JSON object with field '{text_field}'.")
        if text_field not in row:
            raise DataError(f"{p}, line {n}: no field '{text_field}' (fields: {', '.join(sorted(row))[:200]}).")
        if not isinstance(row[text_field], str):
            raise DataError(f"{p}, line {n}: field '{text_field}' is not a string.")
        texts.append(unicode_text(row[text_field], f"{p}, line {n}", f"field '{text_field}'"))
        lines.append(n)
        if labelled:
            if "label" not in row:
                raise DataError(f"{p}, line {n}: no field 'label' (a text classifier's audit data needs labels).")
            labels.append(_label(row["label"], f"{p}, line {n}"))
    return texts, labels, lines


def _csv(
    p: Path, text: str, role: str, column: str, labelled: bool, limit: int | None
) -> tuple[list[str], list[int], list[int]]:
    reader = csv.reader(io.StringIO(text, newline=""))
    previous = csv.field_size_limit(len(text) + 1)  # a record may be as long as the file (it is cut after)
    try:
        return _csv_rows(p, reader, role, column, labelled, limit)
    except csv.Error as exc:
        raise DataError(f"{p}, line {reader.line_num}: not valid CSV ({exc}).") from None
    finally:
        csv.field_size_limit(previous)


def _csv_rows(
    p: Path, reader: Any, role: str, column: str, labelled: bool, limit: int | None
) -> tuple[list[str], list[int], list[int]]:
    header = next(reader, None)
    if not header:
        raise DataError(f"{p}: the {role} file is empty.")
    if column not in header:
        raise DataError(f"{p}: no column '{column}' (columns: {', '.join(header)[:200]}).")
    if labelled and "label" not in header:
        raise DataError(f"{p}: no column 'label' (a text classifier's audit data needs labels).")
    ti, li = header.index(column), header.index("label") if labelled else -1
    texts, labels, lines = [], [], []
    for row in reader:
        n = reader.line_num
        if not row:
            continue
        if len(texts) == limit:
            raise _too_many(p, role, n, limit)
        if len(row) != len(header):
            raise DataError(f"{p}, line {n}: {len(row)} fields, the header has {len(header)}.")
        texts.append(row[ti])
        lines.append(n)
        if labelled:
            labels.append(_label(row[li], f"{p}, line {n}"))
    return texts, labels, lines


def _txt(p: Path, text: str, role: str, limit: int | None) -> tuple[list[str], list[int]]:
    texts, lines = [], []
    for n, line in enumerate(text.splitlines(), 1):
        if line.strip():
            if len(texts) == limit:
                raise _too_many(p, role, n, limit)
            texts.append(line)
            lines.append(n)
    return texts, lines


def load_texts(
    path: str | Path,
    role: str,
    *,
    text_field: str = "text",
    text_column: str | None = None,
    labelled: bool = False,
    max_records: int | None = MAX_RECORDS,
    max_bytes: int = MAX_BYTES,
    max_chars: int | None = None,
) -> TextSet:
    """Read one file of records (module docstring); bad input is one :class:`DataError` naming the file and line.

    Args:
        max_records: the most records the file may hold (more: refused at the first record past it; ``None``: no
            limit).
        max_bytes: the largest file read (larger: refused before reading).
        max_chars: cut every record to this many characters (``None``: keep them whole); the records cut are
            :attr:`TextSet.clipped`.
    """
    p = Path(path)
    suffix = p.suffix.lower()
    if suffix not in FORMATS:
        raise DataError(f"{p}: {role} text must be .jsonl, .txt or .csv, not '{suffix or p.name}'.")
    raw = _read(p, role, max_bytes)
    if suffix == ".jsonl":
        texts, labels, lines = _jsonl(p, raw, role, text_field, labelled, max_records)
    elif suffix == ".csv":
        texts, labels, lines = _csv(p, raw, role, text_column or text_field, labelled, max_records)
    else:
        if labelled:
            raise DataError(f"{p}: a .txt file has no labels; give a text classifier's data as .jsonl or .csv.")
        (texts, lines), labels = _txt(p, raw, role, max_records), []
    del raw
    for t, n in zip(texts, lines):
        if not t.strip():
            raise DataError(f"{p}, line {n}: the record is empty.")
    if not texts:
        raise DataError(f"{p}: the {role} file holds no records.")
    clipped: tuple[int, ...] = ()
    if max_chars is not None:
        clipped = tuple(i for i, t in enumerate(texts) if len(t) > max_chars)
        for i in clipped:
            texts[i] = texts[i][:max_chars]
    return TextSet(texts, np.asarray(labels, dtype=np.int64) if labelled else None, str(p), role, lines, clipped)


def load_users(path: str | Path, field: str, role: str = "members", max_bytes: int | None = None) -> list[str]:
    """The user of every record of a ``.jsonl``/``.csv`` text file (records in the order :func:`load_texts` reads).

    Raises:
        DataError: a ``.txt`` file (no columns), a file larger than ``max_bytes`` (default
            :data:`MAX_BYTES`), invalid JSON, or a record without the field, naming the file and line.
    """
    p = Path(path)
    raw = _read(p, role, max_bytes or MAX_BYTES)
    if p.suffix.lower() == ".jsonl":
        users = []
        for n, line in enumerate(raw.splitlines(), 1):
            if not line.strip():
                continue
            row = json_line(line, f"{p}, line {n}")
            if not isinstance(row, dict) or row.get(field) is None or isinstance(row.get(field), (dict, list)):
                raise DataError(f"{p}, line {n}: no user in field '{field}' (--user-field names each record's user).")
            users.append(str(row[field]))
        return users
    if p.suffix.lower() == ".csv":
        reader = csv.reader(io.StringIO(raw, newline=""))
        header = next(reader, None) or []
        if field not in header:
            raise DataError(f"{p}: no column '{field}' for --user-field (columns: {', '.join(header)[:200]}).")
        i = header.index(field)
        users = []
        for row in reader:
            if not row:
                continue
            if not row[i].strip():
                raise DataError(f"{p}, line {reader.line_num}: the user column '{field}' is empty.")
            users.append(row[i])
        return users
    raise DataError(f"{p}: a {p.suffix or 'plain'} file has no user column; give .jsonl or .csv with --user-field.")


@dataclass(frozen=True)
class TextAudit:
    """Members and non-members (and an optional population) of a language-model audit, checked together.

    ``canaries``: the canaries file (``{prefix, secret, alphabet}`` rows, :mod:`privgate.inputs.canaries`)
    inserted into the training text, for ``canary_exposure``; ``max_canaries``: the most it may hold.
    """

    members: TextSet
    nonmembers: TextSet
    population: TextSet | None = None
    canaries: str | None = None
    max_canaries: int | None = None

    def __post_init__(self) -> None:
        seen = {t: n for t, n in zip(self.members.texts, self.members.lines)}
        for t, n in zip(self.nonmembers.texts, self.nonmembers.lines):
            if t in seen:
                raise DataError(
                    f"{self.nonmembers.source}, line {n}: the record is also a member ({self.members.source}, line "
                    f"{seen[t]}); an overlapping record makes every membership number wrong."
                )
        if self.population is not None:
            audit = {**{t: (self.nonmembers, n) for t, n in zip(self.nonmembers.texts, self.nonmembers.lines)}}
            audit.update({t: (self.members, n) for t, n in zip(self.members.texts, self.members.lines)})
            for t, n in zip(self.population.texts, self.population.lines):
                if t in audit:
                    other, m = audit[t]
                    raise DataError(
                        f"{self.population.source}, line {n}: the record is also in the audit data ({other.source}, "
                        f"line {m}); population text must be neither a member nor a non-member."
                    )

    def _sets(self) -> list[tuple[str, TextSet | None]]:
        return [("members", self.members), ("nonmembers", self.nonmembers), ("population", self.population)]

    def fingerprint(self) -> str:
        """SHA-256 over the members, non-members and population, as :meth:`privgate.inputs.data.AuditData.fingerprint`.

        Two reports with the same fingerprint audited the same records, so ``privgate diff`` can compare their
        numbers (:mod:`privgate.report.comparable`).
        """
        parts = [f"{role}:{s.sha256() if s is not None else '-'}" for role, s in self._sets()]
        return hashlib.sha256("|".join(parts).encode()).hexdigest()

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": "text"}
        for name, s in self._sets():
            if s is not None:
                out[name] = {"n": len(s), "source": s.source, "sha256": s.sha256()}
        out["sha256"] = self.fingerprint()
        return out


__all__ = [
    "FORMATS",
    "MAX_BYTES",
    "MAX_MIB",
    "MAX_CHARS_PER_TOKEN",
    "MAX_RECORDS",
    "SHOWN_CHARS",
    "TextAudit",
    "TextSet",
    "char_limit",
    "json_line",
    "load_texts",
    "load_users",
    "shorten",
    "unicode_text",
]
