"""A Hugging Face model folder as a target: a causal language model, or a sequence classifier over text.

The rest (design, limits, derivations): docs/internals-inputs.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from privgate.inputs.target import Target
from privgate.inputs.targets.hf import CLASSIFIER, LoadedLM
from privgate.inputs.targets.hf_classifier import TextClassifier


@dataclass
class HFTarget(Target):
    """A :class:`Target` loaded from a Hugging Face folder (module docstring).

    Attributes:
        lm: the loaded model and tokenizer (:class:`~privgate.inputs.targets.hf.LoadedLM`).
        reference: a causal language model's reference model (``None``: none).
        batch_size: records per forward pass.
    """

    lm: LoadedLM | None = None
    reference: LoadedLM | None = None
    batch_size: int = 32

    @property
    def kind(self) -> str:
        """``causal_lm`` or ``sequence_classifier``."""
        assert self.lm is not None
        return self.lm.kind

    def describe(self) -> dict[str, Any]:
        if self.kind == CLASSIFIER:
            return super().describe()
        lm = self.lm
        return {
            "path": lm.source,
            "format": "huggingface",
            "kind": lm.kind,
            "sha256": lm.sha256,
            "white_box": True,
            "parameters": sum(p.numel() for p in lm.model.parameters()),
            "context": lm.context,
            **lm.extra,
        }


def hf_target(lm: LoadedLM, *, reference: LoadedLM | None = None, batch_size: int = 32) -> HFTarget:
    """The target of a loaded folder: the classifier behind ``predict_proba`` over text, or the language model."""
    if lm.kind == CLASSIFIER:
        target = HFTarget(
            TextClassifier(lm, batch_size), lm.source, "huggingface", lm.sha256, lm=lm, batch_size=batch_size
        )
        target.extra.update({"kind": lm.kind, "context": lm.context, **lm.extra})
        return target
    return HFTarget(lm.model, lm.source, "huggingface", lm.sha256, lm=lm, reference=reference, batch_size=batch_size)


def load_hf_target(
    path: Any,
    *,
    base_model: Any = None,
    trust_checkpoint: bool = False,
    reference: Any = None,
    batch_size: int = 32,
) -> HFTarget:
    """The target of the folder ``path`` (:func:`privgate.inputs.targets.hf.load_model_dir`), and of its reference."""
    from privgate.inputs.targets.hf import load_model_dir

    lm = load_model_dir(path, base_model=base_model, trust_checkpoint=trust_checkpoint)
    return hf_target(lm, reference=reference, batch_size=batch_size)


__all__ = ["HFTarget", "hf_target", "load_hf_target"]
