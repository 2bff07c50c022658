"""Text records for language-model audits: ``.jsonl``, ``.txt`` and ``.csv``, checked at the door.

* ``.jsonl``: one JSON object per line, the text in field ``text`` (or the
  field named by ``text_field``), an integer ``label`` for classifiers;
* ``.txt``: one record per line (blank lines are skipped);
* ``.csv``: the text in column ``text`` (or ``text_column``), ``label`` for classifiers.

Checks as for tables: a record that is empty (or only whitespace) is refused
with its line number; records that appear both among the members and the
non-members are refused (an overlapping record makes every membership number
wrong). Records longer than the model's context are truncated when scored, and
the report says how many (:mod:`privgate.lm.scoring`).
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from privgate.errors import DataError

#: Largest text file privgate reads (512 MiB).
MAX_BYTES = 512 << 20
FORMATS = (".jsonl", ".txt", ".csv")


@dataclass(frozen=True)
class TextSet:
    """Records of text (and labels for classifiers) from one file.

    Attributes:
        texts: the records, in file order.
        labels: integer labels (classifiers), else ``None``.
        source: the file.
        role: ``members``, ``non-members`` or ``population``.
        lines: the line of each record in the file (1-based), for messages.
    """

    texts: list[str]
    labels: np.ndarray | None
    source: str
    role: str
    lines: list[int] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.texts)

    def sha256(self) -> str:
        h = hashlib.sha256()
        for t in self.texts:
            h.update(t.encode("utf-8") + b"\0")
        return h.hexdigest()


def _read(p: Path, role: str) -> str:
    if not p.is_file():
        raise DataError(f"{p}: {role} file not found.")
    with p.open("rb") as f:
        data = f.read(MAX_BYTES + 1)
    if len(data) > MAX_BYTES:
        raise DataError(f"{p}: the {role} file is larger than 512 MiB, the most privgate reads.")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DataError(f"{p}: the {role} file is not UTF-8 text (byte {exc.start}).") from None


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


def _jsonl(p: Path, text: str, role: str, text_field: str, labelled: bool) -> tuple[list[str], list[int], list[int]]:
    texts, labels, lines = [], [], []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except (json.JSONDecodeError, RecursionError):  # RecursionError: brackets nested thousands deep
            raise DataError(f"{p}, line {n}: not a JSON object.") from None
        if not isinstance(row, dict):
            raise DataError(f"{p}, line {n}: expected a JSON object with field '{text_field}'.")
        if text_field not in row:
            raise DataError(f"{p}, line {n}: no field '{text_field}' (fields: {', '.join(sorted(row))[:200]}).")
        if not isinstance(row[text_field], str):
            raise DataError(f"{p}, line {n}: field '{text_field}' is not a string.")
        texts.append(row[text_field])
        lines.append(n)
        if labelled:
            if "label" not in row:
                raise DataError(f"{p}, line {n}: no field 'label' (a text classifier's audit data needs labels).")
            labels.append(_label(row["label"], f"{p}, line {n}"))
    return texts, labels, lines


def _csv(p: Path, text: str, role: str, column: str, labelled: bool) -> tuple[list[str], list[int], list[int]]:
    reader = csv.reader(io.StringIO(text, newline=""))
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
        if len(row) != len(header):
            raise DataError(f"{p}, line {n}: {len(row)} fields, the header has {len(header)}.")
        texts.append(row[ti])
        lines.append(n)
        if labelled:
            labels.append(_label(row[li], f"{p}, line {n}"))
    return texts, labels, lines


def load_texts(
    path: str | Path, role: str, *, text_field: str = "text", text_column: str | None = None, labelled: bool = False
) -> TextSet:
    """Read one file of records (module docstring); bad input is one :class:`DataError` naming the file and line."""
    p = Path(path)
    suffix = p.suffix.lower()
    if suffix not in FORMATS:
        raise DataError(f"{p}: {role} text must be .jsonl, .txt or .csv, not '{suffix or p.name}'.")
    raw = _read(p, role)
    if suffix == ".jsonl":
        texts, labels, lines = _jsonl(p, raw, role, text_field, labelled)
    elif suffix == ".csv":
        texts, labels, lines = _csv(p, raw, role, text_column or text_field, labelled)
    else:
        if labelled:
            raise DataError(f"{p}: a .txt file has no labels; give a text classifier's data as .jsonl or .csv.")
        lines = [n for n, line in enumerate(raw.splitlines(), 1) if line.strip()]
        texts = [line for line in raw.splitlines() if line.strip()]
        labels = []
    for t, n in zip(texts, lines):
        if not t.strip():
            raise DataError(f"{p}, line {n}: the record is empty.")
    if not texts:
        raise DataError(f"{p}: the {role} file holds no records.")
    return TextSet(texts, np.asarray(labels, dtype=np.int64) if labelled else None, str(p), role, lines)


@dataclass(frozen=True)
class TextAudit:
    """Members and non-members (and an optional population) of a language-model audit, checked together."""

    members: TextSet
    nonmembers: TextSet
    population: TextSet | None = None

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


__all__ = ["FORMATS", "TextAudit", "TextSet", "load_texts"]
