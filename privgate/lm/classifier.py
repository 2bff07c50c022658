"""The sequence-classifier kind: a Hugging Face classifier audited as a black box over records of text.

The classifier is an estimator whose rows are text records
(:class:`privgate.inputs.targets.hf_classifier.TextClassifier`, shape ``[n, 1]``), so the black-box family runs on
its logits through the tabular kind (:mod:`privgate.attacks.contexts.tabular`) with the same statistics. Attacks
that perturb or learn from numeric features (label-only noise, the tabular blind baseline) are reported as not
run; white-box attacks are not offered (the target exposes no torch module).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from privgate.attacks.contexts.tabular import TabularAudit
from privgate.device import placed
from privgate.inputs.data import AuditData, Dataset
from privgate.inputs.text import TextAudit, shorten
from privgate.options import RunOptions
from privgate.policy import Policy
from privgate.report.model import AttackSummary

#: Attacks of a classifier policy that need numeric features (or weights): not run on a text classifier.
NOT_ON_TEXT = {
    "label_only": "'label_only' perturbs numeric inputs with noise; text records cannot be perturbed that way",
    "blind": "the blind baseline learns from numeric features; text records have none",
}


def _text_policy(policy: Policy) -> Policy:
    """``policy`` without the attacks that need numeric features (:data:`NOT_ON_TEXT`), every level of the chain."""
    parent = _text_policy(policy.parent) if policy.parent is not None else None
    attacks = {n: o for n, o in policy.own_attacks().items() if n not in NOT_ON_TEXT}
    out = policy.model_copy(update={"attacks": attacks})
    out._parent = parent
    out._source = policy.source
    return out


class ClassifierAudit(TabularAudit):
    """An audit of a sequence classifier: the tabular kind over ``[n, 1]`` rows of text (module docstring).

    Args:
        target: an :class:`~privgate.inputs.targets.hf_target.HFTarget` of kind ``sequence_classifier``; the
            classifier runs on the run's device and goes back where it was.
        data: the :class:`~privgate.inputs.text.TextAudit` (labelled records).
        policy: the policy as written; recipe: unused (reference models of a text classifier are not trained).
    """

    def __init__(self, target: Any, data: TextAudit, policy: Policy, recipe: Any, run: RunOptions) -> None:
        self.texts, self.written = data, policy
        self._placed = placed(target.lm.model, run.device)
        self._placed.__enter__()
        try:
            rows = AuditData(_rows(data.members), _rows(data.nonmembers), seed=run.seed)
            super().__init__(target, rows, _text_policy(policy), None, run)
        except BaseException:
            self._placed.__exit__(None, None, None)
            raise

    def __exit__(self, *exc: object) -> None:
        self._placed.__exit__(None, None, None)

    def exposed(self, section: dict[str, Any], run: RunOptions) -> dict[str, Any]:
        """The exposed members shown as their text (as for causal language models)."""
        section = super().exposed(section, run)
        for rec in section["records"]:
            rec["text"] = shorten(self.texts.members.texts[rec["member_index"]])
        return section

    def data_facts(self) -> dict[str, Any]:
        return self.texts.describe()

    def warnings(self, ran: dict[str, Any], summaries: list[AttackSummary]) -> list[str]:
        skipped = [f"{why}: not run" for n, why in NOT_ON_TEXT.items() if n in self.written.attacks_to_run()]
        return [*super().warnings(ran, summaries), *skipped]


def _rows(s: Any) -> Dataset:
    return Dataset(np.asarray(s.texts, dtype=object).reshape(-1, 1), np.asarray(s.labels), s.source)


__all__ = ["NOT_ON_TEXT", "ClassifierAudit"]
