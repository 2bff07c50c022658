"""What other packages register with privgate: kinds of target, attacks and harden tasks, as entry points.

A package declares them in its ``pyproject.toml`` (``[project.entry-points."privgate.kinds"]``,
``"privgate.attacks"``, ``"privgate.harden_tasks"``), as privgate's own language-model package does, so no lower
layer names a higher one. They are read once, on the first lookup that needs them: a run that looks none up never
reads the installed packages' metadata.
"""

from __future__ import annotations

import importlib
from functools import cache
from typing import Any


@cache
def registered(group: str) -> dict[str, str]:
    """``{name: "module:attr"}`` of the installed entry points of ``group`` (read once per process)."""
    from importlib import metadata  # tens of milliseconds: paid by the first lookup, not by importing privgate

    return {ep.name: ep.value for ep in metadata.entry_points(group=group)}


def load(spec: str) -> Any:
    """The object a ``"module:attr"`` spec names, its module imported now."""
    module, _, attr = spec.partition(":")
    return getattr(importlib.import_module(module), attr)


__all__ = ["load", "registered"]
