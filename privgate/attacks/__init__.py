"""The attack registry: ``register_attack`` / ``get_attack`` / ``available_attacks``.

Adding an attack is adding a file with an :class:`~privgate.attacks.base.Attack`
subclass and one ``register_attack`` line below; the gate never changes.
Attack modules import torch, scipy and scikit-learn inside the functions that
use them, never at module level: validating a policy imports this registry,
and ``privgate policy list`` must not pay for torch (tests/test_cli.py checks).
Attacks that a policy may name but this version does not implement yet are in
:data:`PLANNED`: a check on one of them is reported as unavailable
(``inconclusive``), never silently dropped.
"""

from __future__ import annotations

from privgate.attacks.base import Attack, AttackContext, AttackResult, ThreatModel

_REGISTRY: dict[str, type[Attack]] = {}

#: Attacks a policy may name that are not implemented in this version, with their threat model.
PLANNED: dict[str, ThreatModel] = {
    "shadow": "black-box",
    "lira": "black-box",
    "rmia": "black-box",
    "label_only": "label-only",
    "gradient": "white-box",
    "inversion": "white-box",
    "attribute": "black-box",
}


def register_attack(cls: type[Attack]) -> type[Attack]:
    """Register an attack class under its ``name`` (usable as a decorator)."""
    _REGISTRY[cls.name] = cls
    PLANNED.pop(cls.name, None)
    return cls


def get_attack(name: str) -> type[Attack]:
    """The attack class registered as ``name``; KeyError if there is none."""
    return _REGISTRY[name]


def available_attacks() -> dict[str, type[Attack]]:
    """Implemented attacks by name."""
    return dict(sorted(_REGISTRY.items()))


class _Known:
    """Live view of every name a policy may use: implemented or planned."""

    def __contains__(self, name: object) -> bool:
        return name in _REGISTRY or name in PLANNED

    def __iter__(self):
        return iter(sorted(set(_REGISTRY) | set(PLANNED)))


KNOWN_ATTACKS = _Known()


def threat_model_of(name: str) -> ThreatModel:
    """The access an attack needs: ``black-box``, ``label-only`` or ``white-box``."""
    if name in _REGISTRY:
        return _REGISTRY[name].threat_model
    return PLANNED[name]


from privgate.attacks import threshold as _threshold  # noqa: E402  (registers the threshold attacks)

for _cls in _threshold.ATTACKS:
    register_attack(_cls)

from privgate.attacks import blind as _blind, label_only as _label_only, lira as _lira, rmia as _rmia, shadow as _shadow  # noqa: E402

for _mod in (_shadow, _lira, _rmia, _label_only, _blind):  # reference-model, label-only and blind attacks
    for _cls in _mod.ATTACKS:
        register_attack(_cls)

from privgate.attacks.attribute import AttributeAttack  # noqa: E402
from privgate.attacks.gradient import GradientAttack  # noqa: E402
from privgate.attacks.inversion import InversionAttack  # noqa: E402

register_attack(GradientAttack)
register_attack(InversionAttack)
register_attack(AttributeAttack)

__all__ = [
    "Attack",
    "AttackContext",
    "AttackResult",
    "KNOWN_ATTACKS",
    "PLANNED",
    "available_attacks",
    "get_attack",
    "register_attack",
    "threat_model_of",
]
