"""Measurements of a causal language model that a policy bounds: canary exposure and verbatim extraction.

They are registered as attacks so a policy can name them in a check, but they
do not score membership: each returns the one metric it measures (an
:class:`~privgate.stats.Estimate` with its interval) and the language-model
gate (:mod:`privgate.lm.gate`) runs them with what they need — the canaries
file, the members and non-members — through :meth:`Measurement.measure`.

* ``canary_exposure`` — metric ``exposure`` (bits), the largest over the
  canaries (Carlini et al. 2019, "The Secret Sharer", arXiv 1802.08232):
  exposure = log2 |R| − log2 rank of the inserted secret among all candidates;
  measured by :func:`privgate.lm.canary_exposure.measure_exposure`.
* ``extraction`` — metric ``extraction_rate``: the fraction of members whose
  next ``suffix_tokens`` tokens greedy decoding reproduces exactly from their
  first ``prefix_tokens`` (Carlini et al. 2021, arXiv 2012.07805; Nasr et al.
  2023, arXiv 2311.17035), in excess of the same rate on non-members (a model
  that completes text it never saw is fluent, not leaking); measured by
  :func:`privgate.lm.extraction.measure_extraction`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from privgate.attacks.base import Attack, AttackContext, AttackResult, AttackSkipped
from privgate.errors import shown


@dataclass
class MeasureInputs:
    """What a measurement needs (the gate builds it; attacks never see membership, measurements do)."""

    lm: Any  # privgate.lm.loading.LoadedLM
    members: list[str]
    nonmembers: list[str]
    canaries: str | None
    device: str
    seed: int
    confidence: float
    batch_size: int


class Measurement(Attack):
    """A registered name for a language-model metric; run by the gate through :meth:`measure`."""

    threat_model = "black-box"
    #: Never a candidate of a ``best`` membership check; a ``best`` check of its own metric still chooses it.
    diagnostic = True
    #: The policy metric it measures.
    measures: ClassVar[str]

    def run(self, ctx: AttackContext) -> AttackResult:
        raise AttackSkipped(f"'{self.name}' measures causal language models; the target is not one")

    def measure(self, inputs: MeasureInputs) -> AttackResult:
        """The metric as ``extras['estimates'][measures]`` of an :class:`AttackResult` without scores."""
        raise NotImplementedError

    def _result(self, start: float, estimate: Any, extras: dict[str, Any], notes: list[str]) -> AttackResult:
        return AttackResult(
            attack=self.name,
            threat_model=self.threat_model,
            scores=np.zeros(0),
            seconds=time.perf_counter() - start,
            options=dict(self.options),
            notes=notes,
            extras={**extras, "estimates": {self.measures: estimate}},
        )


class CanaryExposure(Measurement):
    """Canary exposure in bits, the largest over the canaries (Carlini et al. 2019, arXiv 1802.08232)."""

    name = "canary_exposure"
    measures = "exposure"

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)

    def measure(self, inputs: MeasureInputs) -> AttackResult:
        from privgate import stats

        start = time.perf_counter()
        if inputs.canaries is None:
            raise AttackSkipped("no canaries were given (--canaries FILE)")
        try:
            from privgate.lm.canaries import load_canaries
            from privgate.lm.canary_exposure import measure_exposure
        except ImportError:
            raise AttackSkipped("canary exposure is not available in this version of privgate") from None
        canaries = load_canaries(Path(inputs.canaries))
        rep = measure_exposure(
            inputs.lm.model,
            inputs.lm.tokenizer,
            canaries,
            device=inputs.device,
            batch_size=inputs.batch_size,
            confidence=inputs.confidence,
            seed=inputs.seed,
        )
        rows = [c.model_dump() for c in rep.canaries]
        if not rows:
            raise AttackSkipped("the canaries file holds no canaries")
        est = stats.Estimate(
            "exposure",
            rep.max_exposure,
            rep.lo,
            rep.hi,
            rep.confidence,
            len(rows),
            0,
            # exact: every canary ranked among all its candidates, so the value has no sampling error (privgate diff)
            details={"worst": rep.worst, "canaries": len(rows), "exact": all(r["method"] == "exact" for r in rows)},
        )
        notes = [
            f"{len(rows)} canaries from {inputs.canaries}; the largest exposure is canary {rep.worst}'s "
            f"({rep.max_exposure:.3g} bits of {rows[rep.worst]['space_bits']:.3g} possible)"
        ]
        return self._result(start, est, {"canaries": rows}, notes)


class Extraction(Measurement):
    """Verbatim extraction rate of members in excess of non-members (Carlini et al. 2021; Nasr et al. 2023).

    Options:
        prefix_tokens: the tokens of a record greedy decoding starts from.
        suffix_tokens: the tokens it must then reproduce exactly (records shorter than both are not tested).
    """

    name = "extraction"
    measures = "extraction_rate"

    def __init__(self, prefix_tokens: int = 32, suffix_tokens: int = 16, **options: Any) -> None:
        super().__init__(**options)
        for key, v in (("prefix_tokens", prefix_tokens), ("suffix_tokens", suffix_tokens)):
            if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= 4096:
                raise ValueError(f"option {key} must be an integer from 1 to 4096, got {shown(v)}")
        self.options = {"prefix_tokens": prefix_tokens, "suffix_tokens": suffix_tokens}

    def measure(self, inputs: MeasureInputs) -> AttackResult:
        from privgate import stats

        start = time.perf_counter()
        try:
            from privgate.lm.extraction import measure_extraction
        except ImportError:
            raise AttackSkipped("verbatim extraction is not available in this version of privgate") from None
        rep = measure_extraction(
            inputs.lm.model,
            inputs.lm.tokenizer,
            inputs.members,
            inputs.nonmembers,
            prefix_tokens=self.options["prefix_tokens"],
            suffix_tokens=self.options["suffix_tokens"],
            device=inputs.device,
            batch_size=inputs.batch_size,
            confidence=inputs.confidence,
        )
        m, n = rep.members, rep.nonmembers
        est = stats.Estimate(
            "extraction_rate",
            rep.excess,
            rep.lo,
            rep.hi,
            rep.confidence,
            m.tested,
            n.tested,
            details={"members": m.model_dump(), "nonmembers": n.model_dump(), "p_value": rep.p_value},
        )
        notes = [
            f"greedy decoding from the first {rep.prefix_tokens} tokens reproduces the next {rep.suffix_tokens} "
            f"for {m.extracted} of {m.tested} members ({m.rate:.1%}) and {n.extracted} of {n.tested} non-members "
            f"({n.rate:.1%}); the metric is the difference"
            + (f"; {m.skipped + n.skipped} records too short to test" if m.skipped + n.skipped else "")
        ]
        extras = {"extraction": rep.model_dump(exclude={"extracted_members", "extracted_nonmembers"})}
        extras["extracted"] = [{"member_index": i, "text": _shorten(inputs.members[i])} for i in rep.extracted_members]
        return self._result(start, est, extras, notes)


def _shorten(text: str, chars: int = 200) -> str:
    return text if len(text) <= chars else text[: chars - 1] + "…"
