"""Measurements of a causal language model that a policy bounds: canary exposure and verbatim extraction.

They are registered as attacks so a policy can name them in a check, but they
do not score membership: each returns the one metric it measures (an
:class:`~privgate.stats.Estimate` with its interval) and the language-model
gate (:mod:`privgate.lm.gate`) runs them with what they need — the canaries
file, the members and non-members — through :meth:`Measurement.measure`.

* ``canary_exposure`` — metric ``exposure`` (bits), the largest over the
  canaries (Carlini et al. 2019, "The Secret Sharer", arXiv 1802.08232):
  exposure = log2 |R| − log2 rank of the inserted secret among all candidates;
  measured by :func:`privgate.lm.exposure.measure_exposure`.
* ``extraction`` — metric ``extraction_rate``: the fraction of members whose
  next ``suffix_tokens`` tokens greedy decoding reproduces exactly from their
  first ``prefix_tokens`` (Carlini et al. 2021, arXiv 2012.07805; Nasr et al.
  2023, arXiv 2311.17035), in excess of the same rate on non-members (a model
  that completes text it never saw is fluent, not leaking); measured by
  :func:`privgate.lm.extraction.measure_extraction`.
"""

from __future__ import annotations

import dataclasses
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


def as_dict(obj: Any) -> Any:
    """A report's dataclasses (and numpy values) as plain JSON-able values."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: as_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, dict):
        return {str(k): as_dict(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [as_dict(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, np.generic):
        return obj.item()
    return obj


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
            from privgate.lm.exposure import measure_exposure
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
        value, lo, hi, rows = exposure_bounds(rep)
        est = stats.Estimate("exposure", value, lo, hi, inputs.confidence, len(rows), 0, details={"canaries": rows})
        return self._result(start, est, {"canaries": rows}, [f"{len(rows)} canaries from {inputs.canaries}"])


def exposure_bounds(report: Any) -> tuple[float, float, float, list[dict[str, Any]]]:
    """(largest exposure, its interval, per-canary rows) of an exposure report.

    The largest exposure's interval is [max of the lower bounds, max of the upper bounds]: each canary's interval
    holds at the report's confidence, so these bound the maximum whenever all of them hold.
    """
    data = as_dict(report)
    rows = data.get("canaries") if isinstance(data, dict) else None
    if not rows:
        rows = next((v for v in data.values() if isinstance(v, list) and v and isinstance(v[0], dict)), [])
    vals = [float(r.get("exposure", r.get("bits", float("nan")))) for r in rows]
    los = [float(_bound(r, 0, v)) for r, v in zip(rows, vals)]
    his = [float(_bound(r, 1, v)) for r, v in zip(rows, vals)]
    if not vals:
        raise AttackSkipped("the canaries file holds no canaries")
    return max(vals), max(los), max(his), rows


def _bound(row: dict[str, Any], i: int, value: float) -> float:
    for key in ("ci", "interval", "exposure_ci"):
        if isinstance(row.get(key), (list, tuple)) and len(row[key]) == 2 and row[key][i] is not None:
            return row[key][i]
    return row.get(("lo", "hi")[i], value)


class Extraction(Measurement):
    """Verbatim extraction rate of members in excess of non-members (Carlini et al. 2021; Nasr et al. 2023).

    Options:
        prefix_tokens: the tokens of a record greedy decoding starts from.
        suffix_tokens: the tokens it must then reproduce exactly.
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
        facts = as_dict(rep)
        m, n = _rate(facts, "member"), _rate(facts, "nonmember")
        value = m[0] - n[0]
        lo, hi = m[1] - n[2], m[2] - n[1]
        est = stats.Estimate(
            "extraction_rate",
            value,
            lo,
            hi,
            inputs.confidence,
            m[3],
            n[3],
            details={"members": m[0], "members_ci": [m[1], m[2]], "nonmembers": n[0], "nonmembers_ci": [n[1], n[2]]},
        )
        extracted = facts.get("extracted", facts.get("extracted_members", []))
        notes = [
            f"greedy decoding from the first {self.options['prefix_tokens']} tokens reproduces the next "
            f"{self.options['suffix_tokens']} for {m[0]:.1%} of the members and {n[0]:.1%} of the non-members; "
            "the metric is the difference (each Clopper-Pearson interval at the policy's confidence)"
        ]
        return self._result(start, est, {"extraction": facts, "extracted": extracted}, notes)


def _rate(facts: dict[str, Any], who: str) -> tuple[float, float, float, int]:
    """(rate, lo, hi, n) of ``member`` or ``nonmember`` records in an extraction report's facts."""
    sub = next((v for k, v in facts.items() if k.rstrip("s").replace("_", "").replace("non", "non") == who), None)
    if isinstance(sub, dict):
        rate = float(sub.get("rate", sub.get("value")))
        ci = sub.get("ci") or [sub.get("lo", rate), sub.get("hi", rate)]
        return rate, float(ci[0]), float(ci[1]), int(sub.get("n", sub.get("total", 0)))
    rate = float(facts[f"{who}_rate"])
    ci = facts.get(f"{who}_ci", [rate, rate])
    return rate, float(ci[0]), float(ci[1]), int(facts.get(f"n_{who}s", facts.get(f"{who}_n", 0)))


ATTACKS = (CanaryExposure, Extraction)
