"""``privgate check`` options for language models (a Hugging Face model directory as MODEL, text data)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

#: (flag, parameter, config key, help), in the order ``--help`` shows them.
OPTIONS = (
    (
        "--text-field",
        "text_field",
        "text_field",
        "JSONL field holding a language model's text records (default 'text').",
    ),
    ("--text-column", "text_column", "text_column", "CSV column holding the text records (default: --text-field)."),
    (
        "--reference-model",
        "reference_model",
        "reference_model",
        "Reference model directory (e.g. the base before fine-tuning) for the reference_ratio attack.",
    ),
    (
        "--base-model",
        "base_model",
        "base_model",
        "Base model directory of a PEFT adapter (default: the adapter config's base_model_name_or_path).",
    ),
    (
        "--canaries",
        "canaries",
        "canaries",
        "Canaries JSONL ({prefix, secret, alphabet} rows) inserted before training: measures their exposure in bits.",
    ),
    (
        "--user-field",
        "user_field",
        "user_field",
        "JSONL field / CSV column naming each record's user: harden's DP fine-tuning protects users, not records.",
    ),
)


#: Limits on what the text inputs may cost (flag, parameter and config key, help), integers of at least 1; the
#: defaults are :class:`privgate.settings.TextOptions`'.
LIMITS = (
    (
        "--max-records",
        "max_records",
        "Most records one text file (members, non-members, population) may hold; more is refused before any is "
        "scored (default 100,000).",
    ),
    (
        "--max-text-mib",
        "max_text_mib",
        "Largest text file read, in MiB; a larger one is refused before it is read (default 512).",
    ),
    (
        "--max-canaries",
        "max_canaries",
        "Most canaries the --canaries file may hold; more is refused before any is scored (default 1,000).",
    ),
)


def text_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Add the language-model options to a command."""
    for flag, param, help_text in reversed(LIMITS):
        fn = click.option(flag, param, type=click.IntRange(min=1), help=help_text)(fn)
    for flag, param, _, help_text in reversed(OPTIONS):
        fn = click.option(flag, param, help=help_text)(fn)
    return fn


def text_settings(values: dict[str, Any], pick: Callable[[str, Any], Any]) -> Any:
    """The :class:`privgate.settings.TextOptions` from the flags, else the config keys of the same name."""
    from privgate.settings import TextOptions

    got = {param: pick(key, values.get(param)) for _, param, key, _ in OPTIONS}
    paths = {"reference_model", "base_model", "canaries"}
    limits = {param: pick(param, values.get(param)) for _, param, _ in LIMITS}
    return TextOptions(
        text_field=got["text_field"] or "text",
        text_column=got["text_column"],
        user_field=got["user_field"],
        **{k: got[k] for k in paths},
        **{k: v for k, v in limits.items() if v is not None},
    )


__all__ = ["LIMITS", "OPTIONS", "text_options", "text_settings"]
