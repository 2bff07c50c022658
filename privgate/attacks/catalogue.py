"""Every attack privgate implements, as data: where its class lives and what a policy needs to know about it.

Policies are validated against this table (:mod:`privgate.policy.schema`): the names, the access each attack needs
(``black-box``, ``label-only``, ``white-box``) and which only look at the data. Nothing here imports an attack
module; :mod:`privgate.attacks.registry` imports a class when a run asks for it, and
``tests/test_attack_registry.py`` checks every entry against its class. :data:`PLANNED` (empty) holds attacks a
policy may name that this version does not implement: a check on one is ``inconclusive``, never dropped. Other
packages add theirs as ``privgate.attacks`` entry points (:mod:`privgate.plugins`; the language-model attacks so).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Literal

from privgate.lazy import load
from privgate.plugins import registered

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

#: name (as policies write it) -> entry: the attacks of this package.
BUILT_IN: dict[str, Entry] = {
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
}

#: The entry-point group other packages register attacks in: each names a ``{name: Entry}`` mapping.
GROUP = "privgate.attacks"


class _Catalogue(Mapping[str, Entry]):
    """:data:`BUILT_IN` and every registered package's entries (:mod:`privgate.plugins`), read on first lookup."""

    def __init__(self) -> None:
        self._entries: dict[str, Entry] | None = None

    def _all(self) -> dict[str, Entry]:
        if self._entries is None:
            entries = dict(BUILT_IN)
            for spec in registered(GROUP).values():
                for name, entry in load(spec).items():
                    entries.setdefault(name, entry)
            self._entries = entries
        return self._entries

    def __getitem__(self, name: str) -> Entry:
        entry = BUILT_IN.get(name)  # a built-in name reads no package's metadata
        return entry if entry is not None else self._all()[name]

    def __contains__(self, name: object) -> bool:
        return name in BUILT_IN or name in self._all()

    def __iter__(self) -> Iterator[str]:
        return iter(self._all())

    def __len__(self) -> int:
        return len(self._all())


#: name (as policies write it) -> entry, for every attack privgate knows.
CATALOGUE: Mapping[str, Entry] = _Catalogue()

#: Attacks a policy may name that this version does not implement, with their threat model.
PLANNED: dict[str, ThreatModel] = {}

__all__ = ["BUILT_IN", "CATALOGUE", "GROUP", "PLANNED", "Entry", "Family", "ThreatModel"]
