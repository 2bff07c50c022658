"""``privgate check`` options that say what loading the model may run: pickles, and the types a ``.skops`` file names.

A pickle (``.pkl``, ``.joblib``, a full ``nn.Module``) runs code from the file
when it is loaded, so it needs ``--trust-checkpoint``; a ``.skops`` file runs
only the names it holds, which must be on privgate's allow-list or classes
named with ``--trust-type`` (:mod:`privgate.inputs.targets.skops_trust`).
``--no-config-code`` refuses a config file's code, trust switches and servers
(:data:`privgate.inputs.config.CODE_KEYS`): for CI that gates a pull request's
files with secrets at hand (docs/ci.md).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

#: ``--no-config-code``: what a file may not decide, for commands that read a config file or a manifest.
NO_CONFIG_CODE = click.option(
    "--no-config-code",
    "no_config_code",
    is_flag=True,
    default=False,
    envvar="PRIVGATE_NO_CONFIG_CODE",
    show_envvar=True,
    help="Refuse (exit 2, naming the key) every recipe, module:function data factory, trust_* switch, Ray executor "
    "or endpoint URL a config file or manifest names: only the command line may name code. For CI that gates a "
    "pull request's model and data files where secrets are at hand (pull_request_target, workflow_run).",
)


def trust_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """Add ``--trust-checkpoint``, ``--trust-type`` and ``--no-config-code`` to a command."""
    f = NO_CONFIG_CODE(f)
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


__all__ = ["NO_CONFIG_CODE", "trust_options", "trust_settings"]
