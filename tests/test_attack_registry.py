"""The attack registry imports nothing until asked, and its static catalogue says what the classes say.

A policy is validated against :mod:`privgate.attacks.catalogue` (names, threat models) without importing
an attack module; :mod:`privgate.attacks.registry` imports a class on first use. These tests keep the
catalogue and the classes from drifting apart, and check the lazy loading as a user meets it: in a fresh
interpreter.
"""

from __future__ import annotations

import importlib
import inspect
import json
import pkgutil
import subprocess
import sys

import pytest

from privgate.attacks.base import Attack
from privgate.attacks.catalogue import CATALOGUE, PLANNED
from privgate.attacks.registry import KNOWN_ATTACKS, available_attacks, get_attack, register_attack, threat_model_of


def _declared_attacks() -> dict[str, type[Attack]]:
    """Every attack class defined in privgate.attacks and privgate.lm.attacks (a class that sets its own name)."""
    found: dict[str, type[Attack]] = {}
    for package in ("privgate.attacks", "privgate.lm.attacks"):
        for info in pkgutil.iter_modules(importlib.import_module(package).__path__, package + "."):
            module = importlib.import_module(info.name)
            for _, cls in inspect.getmembers(module, inspect.isclass):
                if issubclass(cls, Attack) and cls.__module__ == module.__name__ and "name" in vars(cls):
                    assert cls.name not in found, f"two classes named {cls.name!r}"
                    found[cls.name] = cls
    return found


def test_the_catalogue_lists_every_attack_class_with_its_own_facts():
    declared = _declared_attacks()
    assert set(CATALOGUE) == set(declared)
    for name, entry in CATALOGUE.items():
        cls = declared[name]
        assert entry.where == f"{cls.__module__}:{cls.__qualname__}", name
        assert (entry.threat_model, entry.needs_recipe, entry.diagnostic) == (
            cls.threat_model,
            cls.needs_recipe,
            cls.diagnostic,
        ), name
        assert entry.family == ("language-model" if cls.__module__.startswith("privgate.lm.") else "classifier"), name
        assert get_attack(name) is cls and threat_model_of(name) == cls.threat_model


def test_available_attacks_are_the_catalogue_and_planned_ones_are_known():
    assert list(available_attacks()) == sorted(CATALOGUE)
    assert set(KNOWN_ATTACKS) == set(CATALOGUE) | set(PLANNED)
    with pytest.raises(KeyError):
        get_attack("no_such_attack")


def test_a_registered_attack_is_imported_on_first_use(monkeypatch):
    """``register_attack(name, "module:Class")`` imports nothing until the attack is asked for."""
    from privgate.attacks import registry

    monkeypatch.setattr(registry, "_ATTACKS", dict(registry._ATTACKS))
    monkeypatch.delitem(sys.modules, "privgate.attacks.boundary", raising=False)
    register_attack("edge", "privgate.attacks.boundary:BoundaryAttack")
    assert "edge" in KNOWN_ATTACKS and "privgate.attacks.boundary" not in sys.modules
    assert threat_model_of("edge") == "label-only"  # not in the catalogue: read from the class, so imported
    assert get_attack("edge").__name__ == "BoundaryAttack"


PROBE = """
import json, sys
from privgate.policy import parse_policy
parse_policy({text!r})
print(json.dumps(sorted(m for m in sys.modules if m.startswith(("privgate.attacks", "privgate.lm")))))
"""
CHECKS = (
    "checks:\n  - {id: g, attack: gradient, metric: auc, max: 0.6}\n"
    "  - {id: l, attack: lm_loss, metric: auc, max: 0.6}\n"
)


@pytest.mark.parametrize(
    "attacks, imported",
    [
        # a white-box and a language-model attack, no options: validated from the catalogue alone
        ("{lira: {}, min_k: {}}", []),
        # options are checked by the attack's own class: only its module (and what it imports) is imported
        ("{boundary: {queries: 32}, lira: {}}", [f"privgate.attacks.{m}" for m in ("base", "boundary", "label_only")]),
    ],
)
def test_validating_a_policy_imports_only_the_attacks_whose_options_it_checks(attacks, imported):
    text = f"name: p\nsensitivity: confidential\nrelease: model\nattacks: {attacks}\n{CHECKS}"
    r = subprocess.run(
        [sys.executable, "-c", PROBE.format(text=text)], capture_output=True, text=True, timeout=120, check=True
    )
    registry = ["privgate.attacks", "privgate.attacks.catalogue", "privgate.attacks.registry"]
    registry += ["privgate.lm", "privgate.lm.catalogue"]  # the LM attacks' entries, registered as an entry point
    assert json.loads(r.stdout) == sorted(registry + imported)


def test_importing_a_language_model_attack_first_works():
    """The issue's reproduction: ``import privgate.lm.attacks.mink`` failed on a circle through privgate.attacks."""
    r = subprocess.run(
        [sys.executable, "-c", "import privgate.lm.attacks.mink as m; print(m.MinKPlusPlusAttack.name)"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip() == "min_k_pp"
