"""The kinds of target the gate audits, each a file (:mod:`privgate.attacks.contexts.base` documents the protocol).

A target says what it is (:attr:`privgate.inputs.target.Target.kind`), decided once, when it is loaded; the
gate looks its kind up here and never asks again. Kinds are named as ``"module:Class"`` and imported on first
use, so auditing a table never imports a language model's code.
"""

from __future__ import annotations

import importlib
from typing import Any

#: Kind of target → the class that audits it.
KINDS = {
    "tabular": "privgate.attacks.contexts.tabular:TabularAudit",
    "sklearn": "privgate.attacks.contexts.sklearn:SklearnAudit",
    "sequence_classifier": "privgate.lm.classifier:ClassifierAudit",
    "causal_lm": "privgate.lm.audit:CausalLMAudit",
}


def kind_of(target: Any) -> str:
    """The kind of ``target`` (``tabular`` for any target that does not say)."""
    return str(getattr(target, "kind", "tabular"))


def audit_kind(target: Any) -> type:
    """The class that audits ``target``'s kind (:class:`privgate.attacks.contexts.base.AuditKind`)."""
    module, _, name = KINDS[kind_of(target)].partition(":")
    return getattr(importlib.import_module(module), name)


__all__ = ["KINDS", "audit_kind", "kind_of"]
