"""The vocabulary of the game of Matsumoto et al. 2022 (arXiv 2206.09122), without torch:
adversary and distinguisher names and the black-box rules.

The CLI validates ``--adversary`` and ``--distinguisher`` against these names
before anything heavy is imported; :mod:`privgate.audits.ldp_adversaries`
implements the crafters and :mod:`privgate.audits.ldp_game` the rules.
"""

from __future__ import annotations

from typing import Literal

ADVERSARIES = (
    "benign",
    "input_perturbation",
    "parameter_retrogression",
    "gradient_flip",
    "collusion",
    "dummy_gradient",
)
DISTINGUISHERS = ("black_box", "white_box")

Rule = Literal["eq4", "eq6", "eq7"]

#: The black-box rule of each adversary (Matsumoto et al. 2022, Table 1).
BLACK_BOX_RULE: dict[str, Rule] = {
    "benign": "eq6",
    "input_perturbation": "eq4",
    "parameter_retrogression": "eq4",
    "gradient_flip": "eq4",
    "collusion": "eq4",
    "dummy_gradient": "eq7",
}

RULE_TEXT = {
    "eq4": "Eq. 4: g₁ iff f(x₁; θ_{t+1}) ≤ f(x₁; θ_t)",
    "eq6": "Eq. 6: g₁ iff |Δf(x₁)| ≥ |Δf(x₂)|",
    "eq7": "Eq. 7: g₁ iff Σᵢ sgn(θ_{t+1} − θ_t)ᵢ ≤ 0 (the step moves θ against g₁ = λ·1)",
    "eq5": "Eq. 5: g₁ iff cos(ĝ, g₁) ≥ cos(ĝ, g₂)",
}


__all__ = ["ADVERSARIES", "BLACK_BOX_RULE", "DISTINGUISHERS", "RULE_TEXT", "Rule"]
