"""The attack registry: a name -> ``"module:Class"`` table, imported on first use.

Like Opacus' accountant registry, it is a dict and the functions over it:
:func:`register_attack` adds an entry, :func:`get_attack` imports the class the
first time it is asked for. The built-in entries come from the static
:data:`~privgate.attacks.catalogue.CATALOGUE`, so importing this module (as
validating a policy does) imports no attack module, no numpy and no torch.
Adding an attack is a file with its class and one line in the catalogue; the
gate never changes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from privgate.attacks.catalogue import BUILT_IN, CATALOGUE, PLANNED, ThreatModel
from privgate.lazy import load

if TYPE_CHECKING:
    from collections.abc import Iterator

    from privgate.attacks.base import Attack

#: name -> the class, or ``"module:Class"`` naming it until it is first used: the built-in attacks, and the other
#: packages' (:data:`~privgate.attacks.catalogue.CATALOGUE`) once a name not among them is looked up (:func:`_table`).
_ATTACKS: dict[str, str | type[Attack]] = {name: entry.where for name, entry in BUILT_IN.items()}
_JOINED = False


def _table() -> dict[str, str | type[Attack]]:
    """:data:`_ATTACKS` with every registered package's attacks joined (not replacing a registration)."""
    global _JOINED
    if not _JOINED:
        for name, entry in CATALOGUE.items():
            _ATTACKS.setdefault(name, entry.where)
        _JOINED = True
    return _ATTACKS


def register_attack(name: str, attack: str | type[Attack]) -> None:
    """Register ``attack`` (a class, or ``"module:Class"`` imported on first use) under ``name``."""
    _ATTACKS[name] = attack


def get_attack(name: str) -> type[Attack]:
    """The attack class registered as ``name``, imported on first use; KeyError if there is none."""
    attack = _ATTACKS[name] if name in _ATTACKS else _table()[name]
    if isinstance(attack, str):
        attack = _ATTACKS[name] = load(attack)
    return attack


def available_attacks() -> dict[str, type[Attack]]:
    """Registered attacks by name (imports every attack module)."""
    return {name: get_attack(name) for name in sorted(_table())}


def _built_in(name: str) -> bool:
    """Whether ``name`` is registered as the catalogue has it (its facts can be read without importing it)."""
    attack, entry = _ATTACKS.get(name) if name in _ATTACKS else _table().get(name), CATALOGUE.get(name)
    if entry is None or attack is None:
        return False
    return attack == entry.where or f"{attack.__module__}:{attack.__qualname__}" == entry.where


def threat_model_of(name: str) -> ThreatModel:
    """The access an attack needs: ``black-box``, ``label-only`` or ``white-box``; KeyError for an unknown name."""
    if _built_in(name):
        return CATALOGUE[name].threat_model
    return get_attack(name).threat_model if name in _ATTACKS or name in _table() else PLANNED[name]


class _Known:
    """Live view of every attack name a policy may use: implemented or planned."""

    def __contains__(self, name: object) -> bool:
        return name in _ATTACKS or name in PLANNED or name in _table()

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(set(_table()) | set(PLANNED)))


KNOWN_ATTACKS = _Known()

__all__ = ["KNOWN_ATTACKS", "PLANNED", "available_attacks", "get_attack", "register_attack", "threat_model_of"]
