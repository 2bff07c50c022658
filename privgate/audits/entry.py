"""The user's code an audit calls — a randomiser (``--mechanism``), a trainer (``--train``) — imported safely.

Both are ``module:function`` entry points imported only from the user's project
(:func:`privgate.inputs.entrypoints.import_entry`: never the standard library, an
installed package or privgate itself). This module imports no torch, so the CLI
refuses a bad entry point before the heavy libraries load.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from privgate.errors import PrivgateError, clip
from privgate.inputs.entrypoints import import_entry


class MechanismError(PrivgateError):
    """A ``--mechanism`` entry point that cannot be imported, fails, or returns the wrong thing."""


class TrainerError(PrivgateError):
    """A ``--train`` entry point that cannot be imported, fails, or does not return a model."""


def load_mechanism(spec: str, search_dirs: list[Path]) -> Callable[..., Any]:
    """``randomise(grads [K, d], epsilon, clip, generator) -> Tensor [K, d]`` from the user's project."""
    fn = import_entry(spec, search_dirs, "mechanism", MechanismError)
    if not callable(fn):
        raise MechanismError(
            f"mechanism {clip(repr(spec))}: is a {type(fn).__name__}, "
            "expected a function randomise(grads, epsilon, clip, generator)."
        )
    return fn


def load_trainer(spec: str, search_dirs: list[Path]) -> Callable[..., Any]:
    """``train(x, y, epsilon, delta, seed) -> torch.nn.Module`` from the user's project."""
    fn = import_entry(spec, search_dirs, "trainer", TrainerError)
    if not callable(fn):
        raise TrainerError(
            f"trainer {clip(repr(spec))}: is a {type(fn).__name__}, "
            "expected a function train(x, y, epsilon, delta, seed)."
        )
    return fn


__all__ = ["MechanismError", "TrainerError", "load_mechanism", "load_trainer"]
