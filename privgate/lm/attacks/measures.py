"""Measurements of a causal language model that a policy bounds: canary exposure and verbatim extraction.

Registered as attacks so a check can name them, but they score no membership: each returns its one metric (an
:class:`~privgate.stats.Estimate` with its interval) from the context of :mod:`privgate.lm.audit`.
``canary_exposure`` gives ``exposure`` in bits, the largest over the canaries (Carlini et al. 2019, arXiv
1802.08232; :func:`privgate.lm.canary_exposure.measure_exposure`); ``extraction`` gives ``extraction_rate`` in
excess of the non-members' (Carlini et al. 2021, arXiv 2012.07805; Nasr et al. 2023, arXiv 2311.17035;
:func:`privgate.lm.extraction.measure_extraction`), inconclusive when no record of a side is long enough.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from privgate.attacks.base import Attack, AttackContext, AttackResult, AttackSkipped
from privgate.errors import shown
from privgate.inputs.canaries import MAX_CANARIES
from privgate.inputs.text import shorten

if TYPE_CHECKING:  # the canary measurement loads when it runs
    from privgate.lm.canary_exposure import ExposureReport


@dataclass
class MeasureInputs:
    """What a measurement needs (from the language model's context; attacks never see membership, measurements do)."""

    lm: Any  # privgate.inputs.targets.hf.LoadedLM
    members: list[str]
    nonmembers: list[str]
    canaries: str | None
    device: str
    seed: int
    confidence: float
    batch_size: int
    max_canaries: int = MAX_CANARIES


def _integer(key: str, v: Any, low: int, high: int) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or not low <= v <= high:
        raise ValueError(f"option {key} must be an integer from {low:,} to {high:,}, got {shown(v)}")
    return v


def measurement_confidence(policy: Any, name: str) -> float:
    """The confidence a measurement's interval needs: that of the most demanding check on it.

    A check of level L is decided at 1 − α_L / k_L (its policy's own error budget shared by its k_L checks,
    :mod:`privgate.decision`); a measurement has one candidate, so that is its interval's confidence. Without a
    check it is measured at the policy's confidence, for the report.
    """
    levels = [1.0 - p.own_alpha / max(1, len(p.checks)) for p in policy.chain() for c in p.checks if c.attack == name]
    return max(levels, default=policy.confidence)


class Measurement(Attack):
    """A registered name for a language-model metric, measured by :meth:`measure` on the language model's context.

    The gate runs it as any attack; its result has no scores but the estimate of the metric it ``measures``.
    """

    threat_model = "black-box"
    #: Never a candidate of a ``best`` membership check; a ``best`` check of its own metric still chooses it.
    diagnostic = True
    #: The policy metric it measures.
    measures: ClassVar[str]

    def run(self, ctx: AttackContext) -> AttackResult:
        """:meth:`measure` on a causal language model's context, at :func:`measurement_confidence`."""
        from privgate.lm.attacks.context import LMContext

        if not isinstance(ctx, LMContext) or ctx.scores is None:
            raise AttackSkipped(f"'{self.name}' measures causal language models; the target is not one")
        inputs = MeasureInputs(
            ctx.lm, ctx.members, ctx.nonmembers, ctx.canaries, ctx.run.device, ctx.seed,
            measurement_confidence(ctx.policy, self.name), ctx.batch_size,
        )  # fmt: skip
        if ctx.max_canaries is not None:
            inputs = dataclasses.replace(inputs, max_canaries=ctx.max_canaries)
        return self.measure(inputs)

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
    """Canary exposure in bits, the largest over the canaries (Carlini et al. 2019, arXiv 1802.08232).

    Options:
        max_exact: the largest randomness space |R| ranked exactly (every candidate scored; default 10^5).
        samples: candidates sampled for a larger space (the paper's extrapolation, §4; default 10,000).
    """

    name = "canary_exposure"
    measures = "exposure"

    def __init__(self, max_exact: int | None = None, samples: int | None = None, **options: Any) -> None:
        from privgate.lm.canary_exposure import MAX_EXACT, SAMPLES

        super().__init__(**options)
        self.options = {
            "max_exact": _integer("max_exact", MAX_EXACT if max_exact is None else max_exact, 1, 10**9),
            "samples": _integer("samples", SAMPLES if samples is None else samples, 100, 10**7),
        }

    def measure(self, inputs: MeasureInputs) -> AttackResult:
        from privgate import stats

        start = time.perf_counter()
        if inputs.canaries is None:
            raise AttackSkipped("no canaries were given (--canaries FILE)")
        try:
            from privgate.inputs.canaries import load_canaries
            from privgate.lm.canary_exposure import measure_exposure
        except ImportError:
            raise AttackSkipped("canary exposure is not available in this version of privgate") from None
        canaries = load_canaries(Path(inputs.canaries), inputs.max_canaries)
        rep = measure_exposure(
            inputs.lm.model,
            inputs.lm.tokenizer,
            canaries,
            device=inputs.device,
            batch_size=inputs.batch_size,
            confidence=inputs.confidence,
            seed=inputs.seed,
            max_exact=self.options["max_exact"],
            samples=self.options["samples"],
            context=inputs.lm.context,
        )
        rows = [c.model_dump() for c in rep.canaries]
        if not rows:
            raise AttackSkipped("the canaries file holds no canaries")
        sampled = [r for r in rows if r["method"] == "extrapolated"]
        est = stats.Estimate(
            "exposure",
            rep.max_exposure,
            rep.lo,
            rep.hi,
            rep.confidence,
            len(rows),
            0,
            # exact: every canary ranked among all its candidates, so the value has no sampling error (privgate diff)
            details={
                "worst": rep.worst,
                "canaries": len(rows),
                "exact": not sampled,
                "methods": {"exact": len(rows) - len(sampled), "extrapolated": len(sampled)},
            },
        )
        return self._result(start, est, {"canaries": rows}, self._notes(rep, rows, sampled, inputs.canaries))

    def _notes(
        self, rep: ExposureReport, rows: list[dict[str, Any]], sampled: list[dict[str, Any]], source: Any
    ) -> list[str]:
        """The report's sentences: the worst canary's exposure and how it was ranked, and the canaries sampled."""
        worst = rows[rep.worst]
        how = (
            f"ranked exactly among all {worst['space']:,} candidates"
            if worst["method"] == "exact"
            else f"extrapolated from {worst['samples']:,} of its {worst['space']:.3g} candidates, {worst['below']:,} "
            f"of them scoring below the secret: [{worst['lo']:.3g}, {worst['hi']:.3g}] bits at "
            f"{worst['confidence']:.4g} (distribution-free), skew-normal point {worst['exposure']:.3g}"
        )
        notes = [
            f"{len(rows)} canaries from {source}; the largest exposure is canary {rep.worst}'s "
            f"({rep.max_exposure:.3g} bits of {worst['space_bits']:.3g} possible), {how}"
        ]
        if sampled:
            notes.append(
                f"{len(sampled)} of {len(rows)} canaries have more than max_exact = {self.options['max_exact']:,} "
                f"candidates and were extrapolated from {self.options['samples']:,} sampled candidates each "
                "(Carlini et al. 2019, §4); raise the canary_exposure option max_exact to rank them exactly"
            )
        return notes


class Extraction(Measurement):
    """Verbatim extraction rate of members in excess of non-members (Carlini et al. 2021; Nasr et al. 2023).

    Options:
        prefix_tokens: the tokens of a record greedy decoding starts from (default: fitted to the records).
        suffix_tokens: the tokens it must then reproduce exactly (default: fitted; records shorter than both
            are not tested), :func:`privgate.lm.extraction.fitted_lengths`.
    """

    name = "extraction"
    measures = "extraction_rate"

    def __init__(self, prefix_tokens: int | None = None, suffix_tokens: int | None = None, **options: Any) -> None:
        super().__init__(**options)
        self.options = {
            key: None if v is None else _integer(key, v, 1, 4096)
            for key, v in (("prefix_tokens", prefix_tokens), ("suffix_tokens", suffix_tokens))
        }

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
        details = {
            "members": m.model_dump(),
            "nonmembers": n.model_dump(),
            "p_value": rep.p_value,
            "prefix_tokens": rep.prefix_tokens,
            "suffix_tokens": rep.suffix_tokens,
            "lengths_from_records": rep.adaptive,
            "record_tokens": rep.lengths,
        }
        lengths = (
            f"{rep.prefix_tokens} + {rep.suffix_tokens} tokens"
            + (" (fitted to the records' lengths)" if rep.adaptive else "")
            + (
                f"; the records have {rep.lengths['min']} to {rep.lengths['max']} tokens "
                f"(median {rep.lengths['median']})"
                if rep.lengths
                else ""
            )
        )
        skipped = m.skipped + n.skipped
        if rep.excess is None:
            est = stats.Estimate.unresolved(
                "extraction_rate", rep.reason or "nothing tested", rep.confidence, m.tested, n.tested
            )
            est = dataclasses.replace(est, details=details)
            notes = [f"not measured: {rep.reason}; prefix + suffix {lengths}; {skipped} records too short to test"]
        else:
            est = stats.Estimate(
                "extraction_rate", rep.excess, rep.lo, rep.hi, rep.confidence, m.tested, n.tested, details=details
            )
            notes = [
                f"greedy decoding from the first {rep.prefix_tokens} tokens reproduces the next {rep.suffix_tokens} "
                f"for {m.extracted} of {m.tested} members ({m.rate:.1%}) and {n.extracted} of {n.tested} non-members "
                f"({n.rate:.1%}); the metric is the difference; prefix + suffix {lengths}"
                + (f"; {skipped} records too short to test" if skipped else "")
            ]
        extras = {"extraction": rep.model_dump(exclude={"extracted_members", "extracted_nonmembers"})}
        extras["extracted"] = [{"member_index": i, "text": shorten(inputs.members[i])} for i in rep.extracted_members]
        return self._result(start, est, extras, notes)
