"""Verbatim extraction: does greedy decoding from a record's first k tokens reproduce its next m tokens?

Carlini et al. 2021 (arXiv 2012.07805); the *discoverable memorisation* of Carlini et al. 2022 (arXiv 2202.07646),
as used by Nasr et al. 2023 (arXiv 2311.17035, §2). k and m fit the records unless set; shorter records are skipped
and counted, and a side with none testable gives ``None``, never 0. The metric is the excess rate Δ = r₁ − r₀ over
the non-members, with a Clopper-Pearson interval per rate, Newcombe's MOVER interval for Δ (Newcombe 1998; Zou &
Donner 2008) and a one-sided Fisher exact p-value. Details: ``docs/lm-leakage.md``,
``docs/internals-attacks-lm.md``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict

from privgate.lm.continuations import evaluating
from privgate.stats.binomial import clopper_pearson, cp_lower, cp_upper
from privgate.stats.difference import bounds

#: k and m for long records (and the most the adaptive lengths give); the fewest they give.
PREFIX, SUFFIX = 32, 16
MIN_PREFIX, MIN_SUFFIX = 4, 2
#: The adaptive lengths make k + m the token length of this quantile of the records: most of them are tested.
QUANTILE = 0.1


class Rate(BaseModel):
    """k extracted of n tested records, with its Clopper-Pearson interval; ``skipped`` were too short to test.

    ``rate`` is ``None`` when no record was tested (a rate of nothing has no value)."""

    model_config = ConfigDict(frozen=True)

    extracted: int
    tested: int
    skipped: int
    rate: float | None
    lo: float
    hi: float


class ExtractionReport(BaseModel):
    """Member and non-member extraction rates, the excess Δ = r₁ − r₀ with its interval, and which members.

    ``excess`` and ``p_value`` are ``None`` when no member or no non-member could be tested (``reason`` says why);
    ``adaptive`` says whether k and m were derived from the records' lengths, ``lengths`` their token lengths
    (min, 10th percentile, median, max over members and non-members)."""

    model_config = ConfigDict(frozen=True)

    members: Rate
    nonmembers: Rate
    excess: float | None
    lo: float
    hi: float
    p_value: float | None
    confidence: float
    prefix_tokens: int
    suffix_tokens: int
    extracted_members: list[int]
    extracted_nonmembers: list[int]
    adaptive: bool = False
    lengths: dict[str, int] = {}
    reason: str | None = None


@dataclass(frozen=True)
class _Proportion:
    """k/n with one-sided Clopper-Pearson bounds (the :class:`privgate.stats.difference.Bounded` protocol)."""

    k: int
    n: int

    @property
    def value(self) -> float:
        return self.k / self.n if self.n else 0.0

    def lower(self, a: float) -> float:
        return cp_lower(self.k, self.n, a)

    def upper(self, a: float) -> float:
        return cp_upper(self.k, self.n, a)


def _leading_specials(tokenizer: Any) -> list[int]:
    """The special tokens the tokenizer puts in front of a text (``<s>`` for Llama's, none for GPT-2's)."""
    full = list(tokenizer("a", add_special_tokens=True)["input_ids"])
    plain = list(tokenizer("a", add_special_tokens=False)["input_ids"])
    for off in range(len(full) - len(plain) + 1):
        if full[off : off + len(plain)] == plain:
            return full[:off]
    return []


def _plain(tokenizer: Any, texts: Sequence[str]) -> list[list[int]]:
    """Each record's tokens without the special tokens the tokenizer adds."""
    return [list(ids) for ids in tokenizer(list(texts), add_special_tokens=False)["input_ids"]] if texts else []


def fitted_lengths(
    lengths: Sequence[int], prefix_tokens: int | None = None, suffix_tokens: int | None = None
) -> tuple[int, int]:
    """(k, m) for records of these token lengths (``docs/lm-leakage.md``); a length the caller set is kept."""
    most = int(np.quantile(np.asarray(lengths), QUANTILE, method="lower")) if len(lengths) else 0
    m = suffix_tokens if suffix_tokens is not None else min(SUFFIX, max(MIN_SUFFIX, most // 3))
    k = prefix_tokens if prefix_tokens is not None else min(PREFIX, max(MIN_PREFIX, most - m))
    return k, m


def _split(
    tokenizer: Any, plain: Sequence[Sequence[int]], k: int, m: int
) -> tuple[list[int], list[list[int]], list[list[int]]]:
    """(indices tested, prompts, targets): prompt = leading special tokens + first k tokens, target = next m."""
    lead = _leading_specials(tokenizer)
    kept, prompts, targets = [], [], []
    for i, ids in enumerate(plain):
        if len(ids) >= k + m:
            kept.append(i)
            prompts.append(list(lead) + list(ids[:k]))
            targets.append(list(ids[k : k + m]))
    return kept, prompts, targets


def extracted(
    model: Any,
    tokenizer: Any,
    texts: Sequence[str],
    *,
    k: int,
    m: int,
    device: str,
    batch_size: int,
    plain: Sequence[Sequence[int]] | None = None,
) -> tuple[list[int], int, int]:
    """(indices of the texts extracted, how many were tested, how many skipped as shorter than k + m tokens).

    Greedy decoding (``model.generate(do_sample=False)``) of m new tokens from
    each prompt, ``batch_size`` prompts at a time, left-padded with the
    tokenizer's pad token (its end-of-text token when it has none). The model
    must be in eval mode and on ``device``. ``plain``: the texts' tokens when already known (:func:`_plain`).
    """
    import torch

    kept, prompts, targets = _split(tokenizer, _plain(tokenizer, texts) if plain is None else plain, k, m)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    pad = 0 if pad is None else pad
    hits = []
    for start in range(0, len(prompts), batch_size):
        chunk = prompts[start : start + batch_size]
        width = max(len(p) for p in chunk)
        ids = torch.full((len(chunk), width), pad, dtype=torch.long)
        mask = torch.zeros((len(chunk), width), dtype=torch.long)
        for j, p in enumerate(chunk):  # left padding: the prompts end together, where generation starts
            ids[j, width - len(p) :] = torch.as_tensor(p)
            mask[j, width - len(p) :] = 1
        out = model.generate(
            input_ids=ids.to(device),
            attention_mask=mask.to(device),
            do_sample=False,
            max_new_tokens=m,
            pad_token_id=pad,
        )
        new = out[:, width:].cpu().numpy()
        for j in range(len(chunk)):
            target = targets[start + j]
            if new.shape[1] >= m and np.array_equal(new[j, :m], target):
                hits.append(kept[start + j])
    return hits, len(kept), len(texts) - len(kept)


def _rate(hits: list[int], tested: int, skipped: int, confidence: float) -> Rate:
    lo, hi = clopper_pearson(len(hits), tested, confidence)
    return Rate(
        extracted=len(hits),
        tested=tested,
        skipped=skipped,
        rate=len(hits) / tested if tested else None,
        lo=lo,
        hi=hi,
    )


def _lengths(lengths: Sequence[int]) -> dict[str, int]:
    if not lengths:
        return {}
    a = np.asarray(lengths)
    return {
        "min": int(a.min()),
        "p10": int(np.quantile(a, QUANTILE, method="lower")),
        "median": int(np.median(a)),
        "max": int(a.max()),
    }


def measure_extraction(
    model: Any,
    tokenizer: Any,
    members: Sequence[str],
    nonmembers: Sequence[str],
    *,
    prefix_tokens: int | None = None,
    suffix_tokens: int | None = None,
    device: str = "cpu",
    batch_size: int = 32,
    confidence: float = 0.95,
) -> ExtractionReport:
    """Extraction rates of members and non-members and their difference (module docstring).

    Args:
        model: a ``transformers`` causal LM (moved to ``device``; run in eval mode, its
            training flag restored after).
        tokenizer: its tokenizer.
        members, nonmembers: the records' text.
        prefix_tokens: k, the prompt's length in tokens (``None``: fitted to the records, :func:`fitted_lengths`).
        suffix_tokens: m, how many following tokens must be reproduced exactly (``None``: fitted).
        batch_size: prompts per ``generate`` call.
        confidence: two-sided confidence of every interval.
    """
    for name, v in (("prefix_tokens", prefix_tokens), ("suffix_tokens", suffix_tokens)):
        if v is not None and v < 1:
            raise ValueError(f"{name} must be at least 1")
    plain1, plain0 = _plain(tokenizer, members), _plain(tokenizer, nonmembers)
    lengths = [len(t) for t in plain1 + plain0]
    k, m = fitted_lengths(lengths, prefix_tokens, suffix_tokens)
    model.to(device)
    opts = {"k": k, "m": m, "device": device, "batch_size": batch_size}
    with evaluating(model):
        hits1, n1, s1 = extracted(model, tokenizer, members, plain=plain1, **opts)
        hits0, n0, s0 = extracted(model, tokenizer, nonmembers, plain=plain0, **opts)
    r1, r0 = _rate(hits1, n1, s1, confidence), _rate(hits0, n0, s0, confidence)
    reason = None
    if n1 and n0:
        from scipy.stats import fisher_exact

        lo, hi = bounds(_Proportion(len(hits0), n0), _Proportion(len(hits1), n1), (1 - confidence) / 2)
        table = [[len(hits1), n1 - len(hits1)], [len(hits0), n0 - len(hits0)]]
        p: float | None = float(fisher_exact(table, alternative="greater").pvalue)
        excess: float | None = len(hits1) / n1 - len(hits0) / n0
    else:  # nothing to compare: the difference is not measured
        lo, hi, p, excess = -1.0, 1.0, None, None
        reason = _untested(lengths, n1, n0, k, m)
    return ExtractionReport(
        members=r1,
        nonmembers=r0,
        excess=excess,
        lo=max(-1.0, lo),
        hi=min(1.0, hi),
        p_value=p,
        confidence=confidence,
        prefix_tokens=k,
        suffix_tokens=m,
        extracted_members=hits1,
        extracted_nonmembers=hits0,
        adaptive=prefix_tokens is None or suffix_tokens is None,
        lengths=_lengths(lengths),
        reason=reason,
    )


def _untested(lengths: list[int], n1: int, n0: int, k: int, m: int) -> str:
    """Why the difference is not measured: no member or no non-member is long enough for ``k + m`` tokens."""
    span = _lengths(lengths)
    untested = " and ".join(f"no {w}" for w, n in (("member", n1), ("non-member", n0)) if not n)
    lower = ""
    if k + m > MIN_PREFIX + MIN_SUFFIX:
        lower = "; set the extraction options prefix_tokens and suffix_tokens lower"
    return (
        f"{untested} is long enough to test: a test needs {k} + {m} = {k + m} tokens and the records have "
        f"{span.get('min', 0)} to {span.get('max', 0)}{lower}"
    )


__all__ = ["ExtractionReport", "Rate", "extracted", "fitted_lengths", "measure_extraction"]
