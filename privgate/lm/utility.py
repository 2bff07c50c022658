"""The held-out utility of a DP fine-tune, and its floor: what differs between a causal LM and a sequence classifier.

For the ε search's language-model task (:class:`privgate.lm.harden.LMHardenTask`): a causal LM's utility is
held-out perplexity (:class:`HeldOutPerplexity`, lower is better) under ``remediation.max_perplexity`` /
``max_perplexity_ratio``, its interval a percentile bootstrap over records (Efron & Tibshirani 1993); a sequence
classifier's is held-out accuracy (:class:`HeldOutAccuracy`) with its Clopper-Pearson interval and the policy's
``utility`` floor, as for a tabular model (:func:`privgate.dp.utility.utility_floor`); its fine-tune's loss is the
record's cross-entropy on its label.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from privgate.dp.candidates import Candidate
from privgate.policy import Policy


@dataclass
class LMCandidate(Candidate):
    """A DP fine-tune: ``utility`` is its held-out perplexity, ``floor`` the ceiling (lower is better)."""

    @property
    def utility_ok(self) -> bool:
        return self.floor is None or self.utility <= self.floor

    @property
    def score(self) -> float:
        return -self.utility


def perplexity_ci(
    model: Any, tokenizer: Any, texts: list[str], *, context: int, confidence: float, seed: int
) -> tuple[float, list[float]]:
    """Held-out perplexity (all tokens pooled) and its percentile-bootstrap interval over records (2000 resamples).

    Scored where ``model`` is (:func:`privgate.lm.scoring.score_texts`).
    """
    from privgate.lm.scoring import score_texts

    s = score_texts(model, tokenizer, texts, context=context, moments=False)
    tot = np.array([float(v.sum()) for v in s.logprob])
    n_tok = s.n_tokens.astype(float)
    ppl = float(math.exp(-tot.sum() / max(n_tok.sum(), 1.0)))
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), 0x9E7]))
    idx = rng.integers(0, len(tot), size=(2000, len(tot)))
    boot = np.exp(-tot[idx].sum(1) / np.maximum(n_tok[idx].sum(1), 1.0))
    a = (1 - confidence) / 2
    return ppl, [float(np.quantile(boot, a)), float(np.quantile(boot, 1 - a))]


def perplexity_ceiling(policy: Policy, original: float) -> tuple[float | None, str]:
    """The ceiling on held-out perplexity and the rule that set it (the stricter of absolute and relative)."""
    rem = policy.remediation
    rules: list[tuple[float, str]] = []
    if rem.max_perplexity is not None:
        rules.append((float(rem.max_perplexity), f"remediation.max_perplexity = {rem.max_perplexity:g}"))
    if rem.max_perplexity_ratio is not None:
        rules.append(
            (
                original * rem.max_perplexity_ratio,
                f"remediation.max_perplexity_ratio = {rem.max_perplexity_ratio:g} × the audited model's {original:.4g}",
            )
        )
    if not rules:
        return None, "none (set remediation.max_perplexity or max_perplexity_ratio for a utility floor)"
    return min(rules)


def accuracy_ci(model: Any, tokenizer: Any, texts: list[str], labels: np.ndarray, *, context: int, confidence: float):
    """Held-out accuracy of a sequence classifier and its Clopper-Pearson interval (Clopper & Pearson 1934)."""
    from privgate import stats
    from privgate.inputs.targets.hf import CLASSIFIER, LoadedLM
    from privgate.inputs.targets.hf_classifier import TextClassifier

    clf = TextClassifier(LoadedLM(model, tokenizer, CLASSIFIER, "", "", context, {}))
    pred = clf.predict_log_proba(np.asarray(texts, dtype=object).reshape(-1, 1)).argmax(1)
    correct, n = int(np.sum(pred == np.asarray(labels))), len(labels)
    lo, hi = stats.clopper_pearson(correct, n, confidence)
    return correct / n, [lo, hi]


class HeldOutPerplexity:
    """A causal LM's held-out perplexity (module docstring); ``heldout`` is a :class:`~privgate.inputs.text.TextSet`.

    ``device`` is the run's: :meth:`utility` scores a model there and puts it back where it was.
    """

    metric = "perplexity"
    model_kind = "causal language model"
    candidate = LMCandidate

    def __init__(self, heldout: Any, context: int, confidence: float, seed: int, device: str = "cpu") -> None:
        self.heldout, self.context, self.confidence, self.seed = heldout, context, confidence, seed
        self.device = device

    def utility(self, model: Any, tokenizer: Any) -> tuple[float, list[float]]:
        """Held-out utility of ``model``, scored on the run's device (the model is put back after)."""
        from privgate.device import placed

        with placed(model, self.device):
            return self._utility(model, tokenizer)

    def _utility(self, model: Any, tokenizer: Any) -> tuple[float, list[float]]:
        return perplexity_ci(
            model, tokenizer, self.heldout.texts, context=self.context, confidence=self.confidence, seed=self.seed
        )

    def floor(self, policy: Policy, original: float) -> tuple[float | None, str]:
        return perplexity_ceiling(policy, original)

    def reason(self, reason: str, floor: float | None) -> str:
        """The search's reason in a language model's words: the floor is a perplexity ceiling."""
        if floor is None:
            return reason
        return reason.replace("utility is", "held-out perplexity is").replace("below the floor", "above the ceiling")


class HeldOutAccuracy(HeldOutPerplexity):
    """A sequence classifier's held-out accuracy, against the policy's ``utility`` floor (module docstring)."""

    metric = "accuracy"
    model_kind = "sequence classifier"
    candidate = Candidate

    def _utility(self, model: Any, tokenizer: Any) -> tuple[float, list[float]]:
        return accuracy_ci(
            model, tokenizer, self.heldout.texts, self.heldout.labels, context=self.context, confidence=self.confidence
        )

    def floor(self, policy: Policy, original: float) -> tuple[float | None, str]:
        from privgate.dp.utility import utility_floor

        return utility_floor(policy.utility, original)

    def reason(self, reason: str, floor: float | None) -> str:
        return reason.replace("utility is", "held-out accuracy is")


__all__ = ["HeldOutAccuracy", "HeldOutPerplexity", "LMCandidate", "accuracy_ci", "perplexity_ceiling", "perplexity_ci"]
