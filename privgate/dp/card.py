"""The model card written beside a hardened model: what it is, its verdict, and its DP statement.

A Markdown file (``MODEL.hardened.card.md`` beside ``MODEL.hardened.pt``),
written together with the model files and the reports, all or nothing. It
carries the DP statement twice: as a table for people, and as a fenced JSON
block (the typed :class:`~privgate.report.remediation_section.DPStatement`)
that :func:`read_statement` parses back. Following Ponomareva et al. 2023
("How to DP-fy ML", arXiv 2303.00654, §5.5) and the model-card practice of
Mitchell et al. 2019 (arXiv 1810.03993).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from privgate.report.remediation_section import DPStatement, RemediationSection, capacity_rows, statement_rows

_JSON_BLOCK = re.compile(r"```json dp-statement\n(.*?)\n```", re.S)


def card_path(output: str | Path) -> Path:
    """Where the model card goes for a hardened model at ``output``: ``x.pt`` → ``x.card.md``."""
    p = Path(output)
    return p.with_name(f"{p.stem}.card.md")


def _head(model_file: str, how: str, verdict: str, summary: str) -> list[str]:
    """A card's title, how the model was hardened with its audit's verdict, and the report's summary."""
    return [
        f"# Model card: {Path(model_file).name}",
        "",
        f"{how} Verdict of its audit: **{verdict}**.",
        "",
        summary,
        "",
    ]


def _table(rows: list[tuple[str, str]]) -> list[str]:
    """(field, value) rows as a two-column Markdown table (a ``|`` in a value would end its cell)."""
    return ["| | |", "| --- | --- |", *[f"| {k} | {v.replace('|', '/')} |" for k, v in rows]]


def _machine_readable(tag: str, statement: Any) -> list[str]:
    """The statement as the fenced JSON block (```` ```json TAG ````) a reader parses back."""
    data = json.dumps(statement.model_dump(mode="json"), indent=2, ensure_ascii=False)
    return ["### Machine-readable", "", f"```json {tag}", data, "```", ""]


def model_card(section: RemediationSection, *, model_file: str, verdict: str, summary: str) -> str:
    """The Markdown card of the hardened model ``section`` describes (it must carry a statement)."""
    st = section.statement
    if st is None:
        raise ValueError("a model card needs the remediation section's DP statement")
    lines = [
        *_head(model_file, "Hardened by privgate with DP-SGD.", verdict, summary),
        "## Differential privacy statement",
        "",
        st.line(),
        "",
        *_table(statement_rows(st)),
        "",
        "### Where each hyper-parameter came from",
        "",
        "| hyper-parameter | value | source |",
        "| --- | --- | --- |",
        *[f"| {h.name} | {h.shown()} | {h.source} |" for h in st.hyperparameters],
        "",
        "### What the ε does not cover",
        "",
        *[f"- {c}" for c in st.caveats],
        "",
        *_machine_readable("dp-statement", st),
    ]
    return "\n".join(lines)


def capacity_card(section: RemediationSection, *, model_file: str, verdict: str, summary: str) -> str:
    """The Markdown card of a scikit-learn model hardened by its capacity search: no DP statement, and why not.

    The machine-readable block (``json capacity-statement``) is the typed
    :class:`~privgate.report.remediation_section.CapacityStatement`; it has no ε, and says so.
    """
    st = section.capacity
    if st is None:
        raise ValueError("a capacity card needs the remediation section's capacity statement")
    how = (
        "Hardened by privgate's capacity search over the scikit-learn model's own settings. **No differential-"
        "privacy guarantee**: this is an empirical result, with no ε."
    )
    lines = [
        *_head(model_file, how, verdict, summary),
        "## What was done",
        "",
        *_table(capacity_rows(st)),
        "",
        "## What it does not promise",
        "",
        *[f"- {c}" for c in st.caveats],
        "",
        "## A DP guarantee instead",
        "",
        st.dp_alternative[:1].upper() + st.dp_alternative[1:] + ".",
        "",
        *_machine_readable("capacity-statement", st),
    ]
    return "\n".join(lines)


def read_statement(card: str) -> DPStatement:
    """The DP statement of a model card written by :func:`model_card`.

    Raises:
        ValueError: the card has no statement block.
    """
    m = _JSON_BLOCK.search(card)
    if m is None:
        raise ValueError("no DP statement block in this model card")
    return DPStatement.model_validate_json(m.group(1))


__all__ = ["capacity_card", "card_path", "model_card", "read_statement"]
