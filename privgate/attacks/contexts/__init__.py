"""The kinds of target the gate audits, each a file (:mod:`privgate.attacks.contexts.base` documents the protocol).

A target says what it is (:attr:`privgate.inputs.target.Target.kind`), decided once, when it is loaded; the
gate looks its kind up here and never asks again. Kinds are named as ``"module:Class"`` and imported on first
use, so auditing a table never imports a language model's code; other packages add theirs as ``privgate.kinds``
entry points (:mod:`privgate.plugins`), as :mod:`privgate.lm` adds its two.
"""

from __future__ import annotations

from typing import Any

from privgate.lazy import load
from privgate.plugins import registered

#: Kind of target → the class that audits it (the kinds privgate's attacks package audits itself).
KINDS = {
    "tabular": "privgate.attacks.contexts.tabular:TabularAudit",
    "sklearn": "privgate.attacks.contexts.sklearn:SklearnAudit",
}
#: The entry-point group other packages register kinds in.
GROUP = "privgate.kinds"


def kinds() -> dict[str, str]:
    """Every kind of target and the ``"module:Class"`` that audits it: :data:`KINDS` and the registered ones."""
    return {**registered(GROUP), **KINDS}


def kind_of(target: Any) -> str:
    """The kind of ``target`` (``tabular`` for any target that does not say)."""
    return str(getattr(target, "kind", "tabular"))


def audit_kind(target: Any) -> type:
    """The class that audits ``target``'s kind (:class:`privgate.attacks.contexts.base.AuditKind`)."""
    kind = kind_of(target)
    where = KINDS.get(kind) or kinds().get(kind)  # a built-in kind reads no package's metadata
    if where is None:
        raise KeyError(
            f"no audit registered for targets of kind {kind!r} ({GROUP} entry points: is privgate installed?)"
        )
    return load(where)


__all__ = ["GROUP", "KINDS", "audit_kind", "kind_of", "kinds"]
