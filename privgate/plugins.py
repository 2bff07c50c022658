"""What other packages register with privgate: kinds of target, attacks and harden tasks, as entry points.

A package declares them in its ``pyproject.toml`` (``[project.entry-points."privgate.kinds"]``,
``"privgate.attacks"``, ``"privgate.harden_tasks"``), as privgate's own language-model package does, so no lower
layer names a higher one. They are read once, on the first lookup that needs them: a run that looks none up never
reads the installed packages' metadata.
"""

from __future__ import annotations

from functools import cache


@cache
def registered(group: str) -> dict[str, str]:
    """``{name: "module:attr"}`` of the installed entry points of ``group`` (read once per process)."""
    from importlib import metadata  # tens of milliseconds: paid by the first lookup, not by importing privgate

    return {ep.name: ep.value for ep in metadata.entry_points(group=group)}


__all__ = ["registered"]
