"""Every attack privgate implements, as data: where its class lives and what a policy needs to know about it.

Policies are validated against this table (:mod:`privgate.policy.schema`): the names, the access each attack needs
(``black-box``, ``label-only``, ``white-box``) and which only look at the data. Nothing here imports an attack
module; :mod:`privgate.attacks.registry` imports a class when a run asks for it, and
``tests/test_attack_registry.py`` checks every entry against its class. :data:`PLANNED` (empty) holds attacks a
policy may name that this version does not implement: a check on one is ``inconclusive``, never dropped.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

ThreatModel = Literal["black-box", "label-only", "white-box"]
#: What an attack reads: a classifier's outputs on feature rows, or a causal language model's tokens on text records.
Family = Literal["classifier", "language-model"]


@dataclass(frozen=True)
class Entry:
    """One attack, as a policy sees it.

    Attributes:
        where: its class, ``"module:Class"``.
        threat_model: the access it needs.
        family: the kind of target it attacks.
        needs_recipe: it trains reference models, so it needs the recipe.
        diagnostic: it looks at the data only, never at the model (the blind baseline) or measures a metric of its
            own (canary exposure, extraction): reported, but never deciding a ``best`` check.
    """

    where: str
    threat_model: ThreatModel
    family: Family = "classifier"
    needs_recipe: bool = False
    diagnostic: bool = False


_T = "privgate.attacks."
_LM = "privgate.lm.attacks."

#: name (as policies write it) -> entry.
CATALOGUE: dict[str, Entry] = {
    "loss": Entry(_T + "threshold:LossAttack", "black-box"),
    "confidence": Entry(_T + "threshold:ConfidenceAttack", "black-box"),
    "true_class_confidence": Entry(_T + "threshold:TrueClassConfidenceAttack", "black-box"),
    "entropy": Entry(_T + "threshold:EntropyAttack", "black-box"),
    "modified_entropy": Entry(_T + "threshold:ModifiedEntropyAttack", "black-box"),
    "correctness": Entry(_T + "threshold:CorrectnessAttack", "label-only"),
    "learned": Entry(_T + "learned:LearnedAttack", "black-box"),
    "learned_reference": Entry(_T + "learned:LearnedReferenceAttack", "black-box", needs_recipe=True),
    "shadow": Entry(_T + "shadow:ShadowAttack", "black-box", needs_recipe=True),
    "lira": Entry(_T + "lira:LiRAAttack", "black-box", needs_recipe=True),
    "rmia": Entry(_T + "rmia:RMIAAttack", "black-box", needs_recipe=True),
    "label_only": Entry(_T + "label_only:LabelOnlyAttack", "label-only"),
    "boundary": Entry(_T + "boundary:BoundaryAttack", "label-only"),
    "blind": Entry(_T + "blind:BlindAttack", "black-box", diagnostic=True),
    "gradient": Entry(_T + "gradient:GradientAttack", "white-box"),
    "inversion": Entry(_T + "inversion:InversionAttack", "white-box"),
    "attribute": Entry(_T + "attribute:AttributeAttack", "black-box"),
    "structural": Entry(_T + "structural:StructuralAttack", "white-box"),
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

#: Attacks a policy may name that this version does not implement, with their threat model.
PLANNED: dict[str, ThreatModel] = {}

__all__ = ["CATALOGUE", "PLANNED", "Entry", "Family", "ThreatModel"]
