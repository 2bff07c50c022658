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


def text_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Add the language-model options to a command."""
    for flag, param, _, help_text in reversed(OPTIONS):
        fn = click.option(flag, param, help=help_text)(fn)
    return fn


def text_settings(values: dict[str, str | None], pick: Callable[[str, Any], Any]) -> Any:
    """The :class:`privgate.lm.api.TextOptions` from the flags, else the config keys of the same name."""
    from privgate.lm.api import TextOptions

    got = {param: pick(key, values.get(param)) for _, param, key, _ in OPTIONS}
    paths = {"reference_model", "base_model", "canaries"}
    return TextOptions(
        text_field=got["text_field"] or "text",
        text_column=got["text_column"],
        user_field=got["user_field"],
        **{k: got[k] for k in paths},
    )


__all__ = ["OPTIONS", "text_options", "text_settings"]
