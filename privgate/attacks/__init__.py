"""The attack registry: ``register_attack`` / ``get_attack`` / ``available_attacks``.

Every attack module ends with ``ATTACKS``, the :class:`~privgate.attacks.base.Attack`
subclasses it defines; :data:`MODULES` below lists the modules. Adding an attack
is adding a file with its ``ATTACKS`` and one line in :data:`MODULES`; the gate
never changes. Attack modules import torch, scipy and scikit-learn inside the
functions that use them, never at module level: validating a policy imports
this registry, and ``privgate policy list`` must not pay for torch.

:data:`PLANNED` holds attacks a policy may name that this version does not
implement (a policy written for a newer privgate): a check on one of them is
reported as unavailable (``inconclusive``), never silently dropped. Every
attack this version knows is implemented, so it is empty.
"""

from __future__ import annotations

from privgate.attacks import (
    attribute,
    blind,
    boundary,
    gradient,
    inversion,
    label_only,
    learned,
    lira,
    rmia,
    shadow,
    structural,
    threshold,
)
from privgate.attacks.base import Attack, AttackContext, AttackResult, AttackSkipped, ThreatModel
from privgate.lm.attacks import learned as lm_learned
from privgate.lm.attacks import lira as lm_lira
from privgate.lm.attacks import loss as lm_loss
from privgate.lm.attacks import measures as lm_measures
from privgate.lm.attacks import mink as lm_mink
from privgate.lm.attacks import reference as lm_reference
from privgate.lm.attacks import zlib as lm_zlib

#: The attack modules, each with its ``ATTACKS`` (those of causal language models live in :mod:`privgate.lm.attacks`).
MODULES = (
    threshold,
    learned,
    shadow,
    lira,
    rmia,
    label_only,
    boundary,
    blind,
    gradient,
    inversion,
    attribute,
    structural,
    lm_loss,
    lm_zlib,
    lm_reference,
    lm_mink,
    lm_learned,
    lm_lira,
    lm_measures,
)

_REGISTRY: dict[str, type[Attack]] = {}

#: Attacks a policy may name that this version does not implement, with their threat model.
PLANNED: dict[str, ThreatModel] = {}


def register_attack(cls: type[Attack]) -> type[Attack]:
    """Register an attack class under its ``name`` (usable as a decorator)."""
    _REGISTRY[cls.name] = cls
    return cls


def get_attack(name: str) -> type[Attack]:
    """The attack class registered as ``name``; KeyError if there is none."""
    return _REGISTRY[name]


def available_attacks() -> dict[str, type[Attack]]:
    """Registered attacks by name."""
    return dict(sorted(_REGISTRY.items()))


def threat_model_of(name: str) -> ThreatModel:
    """The access an attack needs: ``black-box``, ``label-only`` or ``white-box``."""
    return _REGISTRY[name].threat_model if name in _REGISTRY else PLANNED[name]


class _Known:
    """Live view of every attack name a policy may use: implemented or planned."""

    def __contains__(self, name: object) -> bool:
        return name in _REGISTRY or name in PLANNED

    def __iter__(self):
        return iter(sorted(set(_REGISTRY) | set(PLANNED)))


KNOWN_ATTACKS = _Known()

for _module in MODULES:
    for _cls in _module.ATTACKS:
        register_attack(_cls)

__all__ = [
    "KNOWN_ATTACKS",
    "MODULES",
    "PLANNED",
    "Attack",
    "AttackContext",
    "AttackResult",
    "AttackSkipped",
    "available_attacks",
    "get_attack",
    "register_attack",
    "threat_model_of",
]
