"""Membership-inference and white-box attacks: one module per family, found through :mod:`privgate.attacks.registry`.

The registry (``register_attack`` / ``get_attack`` / ``available_attacks``)
names each attack's class as ``"module:Class"`` and imports it on first use;
what a policy needs to know about every attack (its threat model, whether it
needs the recipe) is the static :mod:`privgate.attacks.catalogue`. The protocol
(``Attack``, ``AttackContext``, ``AttackResult``) is in :mod:`privgate.attacks.base`.
Importing this package imports no attack module: the names below load on first
access (PEP 562), so validating a policy never pays for numpy or torch.
"""

from __future__ import annotations

from privgate.lazy import exports

_EXPORTS = {
    "Attack": "privgate.attacks.base",
    "AttackContext": "privgate.attacks.base",
    "AttackResult": "privgate.attacks.base",
    "AttackSkipped": "privgate.attacks.base",
    "ThreatModel": "privgate.attacks.catalogue",
    "CATALOGUE": "privgate.attacks.catalogue",
    "PLANNED": "privgate.attacks.catalogue",
    "KNOWN_ATTACKS": "privgate.attacks.registry",
    "available_attacks": "privgate.attacks.registry",
    "get_attack": "privgate.attacks.registry",
    "register_attack": "privgate.attacks.registry",
    "threat_model_of": "privgate.attacks.registry",
}


__getattr__, __dir__ = exports(__name__, _EXPORTS, globals())


__all__ = sorted(_EXPORTS)
