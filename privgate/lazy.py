"""Imported on first use: the one helper behind every ``"module:attr"`` name and every lazy package export.

A package's public names (PEP 562 ``__getattr__``), the report writers and printers, the registries' attack
classes and entry points all go through :func:`load`, so ``import privgate`` and light commands pay for nothing
they do not use.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def load(spec: str) -> Any:
    """The object a ``"module:attr"`` spec names, its module imported now."""
    module, sep, attr = spec.partition(":")
    if not sep or not module or not attr:
        raise ValueError(f"not a 'module:attr' name: {spec!r}")
    return getattr(importlib.import_module(module), attr)


def exports(
    package: str, names: Mapping[str, str], namespace: dict[str, Any]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package`` whose public ``names`` map to the modules defining them;
    a name is imported when first read and kept in the package's ``namespace`` (its ``globals()``)."""

    def __getattr__(name: str) -> Any:
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = namespace[name] = load(f"{module}:{name}")
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(names))

    return __getattr__, __dir__


__all__ = ["exports", "load"]
