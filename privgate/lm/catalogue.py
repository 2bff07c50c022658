"""The language-model attacks, as the attack catalogue has them (:mod:`privgate.attacks.catalogue`).

Registered as the ``privgate.attacks`` entry point ``lm`` (``pyproject.toml``); importing this module imports no
attack, no torch and no transformers.
"""

from __future__ import annotations

from privgate.attacks.catalogue import Entry

_LM = "privgate.lm.attacks."

#: name (as policies write it) -> entry.
ENTRIES: dict[str, Entry] = {
    "lm_loss": Entry(_LM + "loss:LMLossAttack", "black-box", "language-model"),
    "zlib": Entry(_LM + "zlib:ZlibAttack", "black-box", "language-model"),
    "reference_ratio": Entry(_LM + "reference:ReferenceRatioAttack", "black-box", "language-model"),
    "min_k": Entry(_LM + "mink:MinKAttack", "black-box", "language-model"),
    "min_k_pp": Entry(_LM + "mink:MinKPlusPlusAttack", "black-box", "language-model"),
    "lm_learned": Entry(_LM + "learned:LMLearnedAttack", "black-box", "language-model"),
    "lm_lira": Entry(_LM + "lira:LMLiRAAttack", "black-box", "language-model", needs_recipe=True),
    "lm_rmia": Entry(_LM + "lira:LMRMIAAttack", "black-box", "language-model", needs_recipe=True),
    "canary_exposure": Entry(_LM + "measures:CanaryExposure", "black-box", "language-model", diagnostic=True),
    "extraction": Entry(_LM + "measures:Extraction", "black-box", "language-model", diagnostic=True),
}

__all__ = ["ENTRIES"]
