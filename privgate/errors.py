"""Errors at privgate's boundary.

Every problem with a user's input (a file, a YAML field, a CLI flag) is a
:class:`PrivgateError` whose message is one sentence naming the thing at fault.
The CLI prints it without a traceback and exits with code 2.
"""

from __future__ import annotations


class PrivgateError(Exception):
    """Bad input: one clear sentence naming the file, field or flag at fault."""

    exit_code = 2


class PolicyError(PrivgateError):
    """A policy that cannot be found, parsed or validated."""


class ConfigError(PrivgateError):
    """A project configuration (pyproject.toml / privgate.toml) that is wrong."""


class TargetError(PrivgateError):
    """A model checkpoint that cannot be loaded safely or does not fit the data."""


class DataError(PrivgateError):
    """Audit data that is missing, malformed or unsound (e.g. overlapping sets)."""


class RecipeError(PrivgateError):
    """A training recipe that cannot be imported or does not build a model."""
