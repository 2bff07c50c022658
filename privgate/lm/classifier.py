"""A Hugging Face sequence classifier as a black-box target: ``predict_proba`` over records of text.

The classifier (``…ForSequenceClassification``) is wrapped as an estimator
whose rows are text records (an object array of shape ``[n, 1]``), so the
existing black-box family — loss, confidence, entropy, modified entropy,
correctness, the learned attack — runs on its logits through the ordinary gate
(:func:`privgate.gate.check_model`) with the same statistics. Attacks that perturb or
learn from numeric features (label-only noise, the tabular blind baseline) do
not apply to text and are reported as not run; white-box attacks are not
offered (the target exposes no torch module).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from privgate.inputs.targets.hf import LoadedLM
from privgate.inputs.targets.hf_classifier import TextClassifier
from privgate.inputs.text import TextAudit
from privgate.options import RunOptions
from privgate.policy import Policy
from privgate.report.model import Report

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


def audit_classifier(lm: LoadedLM, data: TextAudit, policy: Policy, *, options: RunOptions, batch_size: int) -> Report:
    """Audit a text classifier with the black-box family of ``policy`` (module docstring).

    The classifier runs on the run's device and is put back where it was afterwards.
    """
    from privgate.device import placed
    from privgate.gate import check_model
    from privgate.inputs.data import AuditData, Dataset
    from privgate.inputs.target import Target

    def rows(s: Any) -> Dataset:
        return Dataset(np.asarray(s.texts, dtype=object).reshape(-1, 1), np.asarray(s.labels), s.source)

    options = options.resolved()
    target = Target(TextClassifier(lm, batch_size), lm.source, "huggingface", lm.sha256)
    target.extra.update({"kind": lm.kind, "context": lm.context, **lm.extra})
    audit_data = AuditData(rows(data.members), rows(data.nonmembers), seed=options.seed)
    with placed(lm.model, options.device):
        report = check_model(target, audit_data, _text_policy(policy), options=options)
    skipped = [f"{why}: not run" for n, why in NOT_ON_TEXT.items() if n in policy.attacks_to_run()]
    exposed = report.exposed
    if exposed:  # the exposed members shown as their text (as for causal language models)
        from privgate.lm.gate import shorten

        exposed = {**exposed, "records": [dict(r) for r in exposed["records"]]}
        for rec in exposed["records"]:
            rec["text"] = shorten(data.members.texts[rec["member_index"]])
    update = {"warnings": [*report.warnings, *skipped], "data": data.describe(), "exposed": exposed}
    return report.model_copy(update=update)


__all__ = ["NOT_ON_TEXT", "audit_classifier"]
