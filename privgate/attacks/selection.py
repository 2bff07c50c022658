"""Which membership-inference attacks a check built in code runs when it names none: what its bounds need.

A bound on ``accuracy``, ``auc``, ``advantage``, ``tpr_at_fpr`` or ``epsilon_lb`` bounds what an attacker with the
model's outputs can infer: ``best`` runs the black-box attacks (with a recipe, the reference-model ones too; with
population data, the blind baseline beside them). Label-only attacks learn no more, so they are left out, and the
white-box ones too unless asked: ``all`` runs every membership attack that fits the target, or the caller names
them.
"""

from __future__ import annotations

from typing import Any

from privgate.attacks.catalogue import CATALOGUE, Family, ThreatModel

#: Registered attacks that are not membership inference: ``attribute`` needs a declared sensitive column,
#: ``inversion`` reconstructs classes (``assert_inversion_below``).
NOT_MEMBERSHIP = ("attribute", "inversion")
#: The threat models each scope runs.
SCOPES: dict[str, tuple[ThreatModel, ...]] = {
    "best": ("black-box",),
    "all": ("black-box", "label-only", "white-box"),
}


def membership_attacks(
    scope: str = "best",
    *,
    recipe: bool = False,
    white_box: bool = False,
    population: bool = False,
    family: Family | None = None,
) -> dict[str, dict[str, Any]]:
    """``{name: {}}`` of the registered membership attacks of ``scope`` (module docstring) that can run.

    Args:
        scope: ``best`` (black-box) or ``all`` (every threat model).
        recipe: there is a recipe (attacks that train reference models can run).
        white_box: the target's weights are available.
        population: there is population data (the blind baseline, a diagnostic, can run).
        family: the kind of target (``classifier``, ``language-model``): attacks of another family are left out;
            None keeps every family.
    """
    from privgate.attacks import available_attacks

    threats = SCOPES[scope]
    out: dict[str, dict[str, Any]] = {}
    for name, cls in available_attacks().items():
        entry = CATALOGUE.get(name)
        if (
            name in NOT_MEMBERSHIP
            or cls.threat_model not in threats
            or (cls.threat_model == "white-box" and not white_box)
            or (cls.needs_recipe and not recipe)
            or (cls.diagnostic and not population)
            or (family is not None and entry is not None and entry.family != family)
        ):
            continue
        out[name] = {}
    return out


__all__ = ["NOT_MEMBERSHIP", "SCOPES", "membership_attacks"]
