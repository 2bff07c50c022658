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

from privgate.report.remediation_section import DPStatement, RemediationSection, capacity_rows, statement_rows

_JSON_BLOCK = re.compile(r"```json dp-statement\n(.*?)\n```", re.S)


def card_path(output: str | Path) -> Path:
    """Where the model card goes for a hardened model at ``output``: ``x.pt`` → ``x.card.md``."""
    p = Path(output)
    return p.with_name(f"{p.stem}.card.md")


def model_card(section: RemediationSection, *, model_file: str, verdict: str, summary: str) -> str:
    """The Markdown card of the hardened model ``section`` describes (it must carry a statement)."""
    st = section.statement
    if st is None:
        raise ValueError("a model card needs the remediation section's DP statement")
    lines = [
        f"# Model card: {Path(model_file).name}",
        "",
        f"Hardened by privgate with DP-SGD. Verdict of its audit: **{verdict}**.",
        "",
        summary,
        "",
        "## Differential privacy statement",
        "",
        st.line(),
        "",
        "| | |",
        "| --- | --- |",
        *[f"| {k} | {v.replace('|', '/')} |" for k, v in statement_rows(st)],
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
        "### Machine-readable",
        "",
        "```json dp-statement",
        json.dumps(st.model_dump(mode="json"), indent=2, ensure_ascii=False),
        "```",
        "",
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
    lines = [
        f"# Model card: {Path(model_file).name}",
        "",
        "Hardened by privgate's capacity search over the scikit-learn model's own settings. **No differential-"
        "privacy guarantee**: this is an empirical result, with no ε. Verdict of its audit: "
        f"**{verdict}**.",
        "",
        summary,
        "",
        "## What was done",
        "",
        "| | |",
        "| --- | --- |",
        *[f"| {k} | {v.replace('|', '/')} |" for k, v in capacity_rows(st)],
        "",
        "## What it does not promise",
        "",
        *[f"- {c}" for c in st.caveats],
        "",
        "## A DP guarantee instead",
        "",
        st.dp_alternative[:1].upper() + st.dp_alternative[1:] + ".",
        "",
        "### Machine-readable",
        "",
        "```json capacity-statement",
        json.dumps(st.model_dump(mode="json"), indent=2, ensure_ascii=False),
        "```",
        "",
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
