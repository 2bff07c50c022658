"""Verbatim extraction: does greedy decoding from a record's first k tokens reproduce its next m tokens?

Definition (Carlini et al. 2021, "Extracting Training Data from Large Language
Models", arXiv 2012.07805; stated as *discoverable memorisation* by Carlini et
al. 2022, "Quantifying Memorization Across Neural Language Models", arXiv
2202.07646, and used in that form by Nasr et al. 2023, "Scalable Extraction of
Training Data from (Production) Language Models", arXiv 2311.17035, §2): a
record x is *extracted* when greedy decoding from its first k tokens x₁…x_k
generates exactly x_{k+1}…x_{k+m}. (Nasr et al.'s stronger *extractable*
memorisation asks an attacker to find a prompt without knowing the record;
prompting with the record's own prefix is the test an auditor who holds the
training data can run.) Records
with fewer than k + m tokens cannot be tested; they are skipped and counted.
Tokens are the tokenizer's own, without the special tokens it adds (a
leading ``<s>`` is kept in front of the k-token prompt when the tokenizer adds
one, as the model saw it in training).

**Members against non-members.** A fluent model completes a formulaic
record (a date, a boilerplate sentence) it never saw; that is generalisation,
not leakage. The same test therefore runs on non-members of the same
distribution, and the metric is the **excess extraction rate**

    Δ = r₁ − r₀,   r₁ = k₁/n₁ (members extracted),  r₀ = k₀/n₀ (non-members "extracted").

Each rate has its exact Clopper-Pearson interval (Clopper & Pearson 1934) at
``confidence``. Δ's interval is Newcombe's construction for a difference of
independent proportions (Newcombe 1998, Stat. Med. 17:873, "method 10";
the MOVER of Zou & Donner 2008, doi:10.1002/sim.3095) with the Clopper-Pearson
intervals [l₁, u₁], [l₀, u₀] as its components instead of Wilson's:

    L = Δ − √((r₁ − l₁)² + (u₀ − r₀)²),   U = Δ + √((u₁ − r₁)² + (r₀ − l₀)²),

which keeps the exact intervals' behaviour at rates of 0 and 1, where
extraction rates live (a Wald interval collapses to a point there). Beside
it, the one-sided Fisher exact test (Fisher 1935) of H₀: r₁ ≤ r₀ gives a
p-value for "members are extracted more often".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict

from privgate.lm.canary_exposure import evaluating
from privgate.stats.binomial import clopper_pearson, cp_lower, cp_upper
from privgate.stats.difference import bounds


class Rate(BaseModel):
    """k extracted of n tested records, with its Clopper-Pearson interval; ``skipped`` were too short to test."""

    model_config = ConfigDict(frozen=True)

    extracted: int
    tested: int
    skipped: int
    rate: float
    lo: float
    hi: float


class ExtractionReport(BaseModel):
    """Member and non-member extraction rates, the excess Δ = r₁ − r₀ with its interval, and which members."""

    model_config = ConfigDict(frozen=True)

    members: Rate
    nonmembers: Rate
    excess: float
    lo: float
    hi: float
    p_value: float
    confidence: float
    prefix_tokens: int
    suffix_tokens: int
    extracted_members: list[int]
    extracted_nonmembers: list[int]


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


def _split(tokenizer: Any, texts: Sequence[str], k: int, m: int) -> tuple[list[int], list[list[int]], list[list[int]]]:
    """(indices tested, prompts, targets): prompt = leading special tokens + first k tokens, target = next m."""
    lead = _leading_specials(tokenizer)
    plain = tokenizer(list(texts), add_special_tokens=False)["input_ids"]
    kept, prompts, targets = [], [], []
    for i, ids in enumerate(plain):
        if len(ids) >= k + m:
            kept.append(i)
            prompts.append(list(lead) + list(ids[:k]))
            targets.append(list(ids[k : k + m]))
    return kept, prompts, targets


def extracted(
    model: Any, tokenizer: Any, texts: Sequence[str], *, k: int, m: int, device: str, batch_size: int
) -> tuple[list[int], int, int]:
    """(indices of the texts extracted, how many were tested, how many skipped as shorter than k + m tokens).

    Greedy decoding (``model.generate(do_sample=False)``) of m new tokens from
    each prompt, ``batch_size`` prompts at a time, left-padded with the
    tokenizer's pad token (its end-of-text token when it has none). The model
    must be in eval mode and on ``device``.
    """
    import torch

    kept, prompts, targets = _split(tokenizer, texts, k, m)
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
        rate=len(hits) / tested if tested else 0.0,
        lo=lo,
        hi=hi,
    )


def measure_extraction(
    model: Any,
    tokenizer: Any,
    members: Sequence[str],
    nonmembers: Sequence[str],
    *,
    prefix_tokens: int = 32,
    suffix_tokens: int = 32,
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
        prefix_tokens: k, the prompt's length in tokens.
        suffix_tokens: m, how many following tokens must be reproduced exactly.
        batch_size: prompts per ``generate`` call.
        confidence: two-sided confidence of every interval.
    """
    if prefix_tokens < 1 or suffix_tokens < 1:
        raise ValueError("prefix_tokens and suffix_tokens must be at least 1")
    model.to(device)
    opts = {"k": prefix_tokens, "m": suffix_tokens, "device": device, "batch_size": batch_size}
    with evaluating(model):
        hits1, n1, s1 = extracted(model, tokenizer, members, **opts)
        hits0, n0, s0 = extracted(model, tokenizer, nonmembers, **opts)
    r1, r0 = _rate(hits1, n1, s1, confidence), _rate(hits0, n0, s0, confidence)
    if n1 and n0:
        from scipy.stats import fisher_exact

        lo, hi = bounds(_Proportion(len(hits0), n0), _Proportion(len(hits1), n1), (1 - confidence) / 2)
        table = [[len(hits1), n1 - len(hits1)], [len(hits0), n0 - len(hits0)]]
        p = float(fisher_exact(table, alternative="greater").pvalue)
    else:  # nothing to compare: the difference is unknown
        lo, hi, p = -1.0, 1.0, 1.0
    return ExtractionReport(
        members=r1,
        nonmembers=r0,
        excess=r1.rate - r0.rate,
        lo=max(-1.0, lo),
        hi=min(1.0, hi),
        p_value=p,
        confidence=confidence,
        prefix_tokens=prefix_tokens,
        suffix_tokens=suffix_tokens,
        extracted_members=hits1,
        extracted_nonmembers=hits0,
    )


__all__ = ["ExtractionReport", "Rate", "extracted", "measure_extraction"]
