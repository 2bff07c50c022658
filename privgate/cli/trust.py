"""``privgate check`` options that say what loading the model may run: pickles, and the types a ``.skops`` file names.

A pickle (``.pkl``, ``.joblib``, a full ``nn.Module``) runs code from the file
when it is loaded, so it needs ``--trust-checkpoint``; a ``.skops`` file runs
only the names it holds, which must be on privgate's allow-list or classes
named with ``--trust-type`` (:mod:`privgate.inputs.targets.skops_trust`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click


def trust_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """Add ``--trust-checkpoint`` and ``--trust-type`` to a command."""
    f = click.option(
        "--trust-type",
        "trust_types",
        multiple=True,
        metavar="MODULE.NAME",
        help="A class a .skops model may name beyond privgate's allow-list (your own transformer, a library's "
        "estimator, a function of your own code in a FunctionTransformer); repeatable; loading it imports its "
        "module. Else the config's 'trust_types'.",
    )(f)
    return click.option(
        "--trust-checkpoint",
        is_flag=True,
        default=None,
        help="Allow loading pickled checkpoints (this runs code from the file).",
    )(f)


def trust_settings(flags: dict[str, Any], pick: Callable[[str, Any], Any], cfg: Any) -> dict[str, Any]:
    """``trust_checkpoint`` and ``trust_types`` of the settings: the flags, else the config's keys."""
    return {
        "trust_checkpoint": bool(pick("trust_checkpoint", flags["trust_checkpoint"])),
        "trust_types": tuple(flags["trust_types"] or cfg.get("trust_types") or ()),
    }


__all__ = ["trust_options", "trust_settings"]
