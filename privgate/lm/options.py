"""How a language model and its text data are read (a field of :class:`privgate.settings.CheckSettings`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TextOptions:
    """How a language model and its text data are read.

    Attributes:
        text_field: the JSONL field holding the text (default ``text``).
        text_column: the CSV column holding the text (default: ``text_field``).
        reference_model: a reference model directory (e.g. the base before fine-tuning) for ``reference_ratio``.
        base_model: the base model directory of a PEFT adapter (default: the adapter config's).
        canaries: a canaries JSONL file (``{prefix, secret, alphabet}`` rows) for ``canary_exposure``.
        batch_size: records per forward pass.
        user_field: the JSONL field / CSV column naming each record's user: DP fine-tuning (harden) is then
            user-level (:mod:`privgate.lm.userlevel`); the membership evaluation stays per record.
        max_records: the most records one text file may hold (more: refused before they are scored).
        max_text_mib: the largest text file read, in MiB (larger: refused before it is read).
        max_canaries: the most canaries the canaries file may hold (more: refused before any is scored).
    """

    text_field: str = "text"
    text_column: str | None = None
    reference_model: str | None = None
    base_model: str | None = None
    canaries: str | None = None
    batch_size: int = 32
    user_field: str | None = None
    max_records: int = 100_000  # privgate.lm.text.MAX_RECORDS
    max_text_mib: int = 512  # privgate.lm.text.MAX_MIB
    max_canaries: int = 1000  # privgate.lm.canaries.MAX_CANARIES


__all__ = ["TextOptions"]
