"""Canary exposure: how far a language model prefers an inserted random secret over every other secret.

Carlini, Liu, Erlingsson, Kos & Song (2019), "The Secret Sharer", arXiv
1802.08232, §4. A canary is a prefix p followed by a secret s drawn uniformly
from the randomness space R (every string over its alphabet of its length,
:mod:`privgate.inputs.canaries`). The model's log-perplexity of a candidate r is

    Px(r) = −Σᵢ log₂ Pr(xᵢ | x₁ … xᵢ₋₁)   over the tokens of p + r,

and the secret's rank is its position when every candidate is sorted by Px
(rank 1 = the model's favourite). Then

    exposure(s) = log₂ |R| − log₂ rank(s)     (bits, in [0, log₂ |R|]).

A model that never saw s ranks it uniformly at random, so P(exposure ≥ x) =
2⁻ˣ: about 0 to a few bits (mean log₂ e ≈ 1.44). A model that memorised it
ranks it first: exposure = log₂ |R|. The tokens of p, shared by all candidates,
add the same constant to every Px, so only the candidate's tokens are scored:
here ``log_perplexity`` is the secret's part of Px, in bits.

**Ties.** rank = 1 + #{candidates with strictly lower Px}: a tie counts in the
secret's favour, the larger exposure (the cautious side for a privacy gate).

**Exact** (|R| ≤ ``max_exact``, 10⁵ by default): every candidate is scored.
The candidates are enumerated ``chunk`` (8,192) at a time — each chunk built,
tokenised, scored and dropped, the rank counted on the fly — so memory is
bounded by the chunk, never by |R| (holding all 10⁶ tokenised candidates of a
6-digit secret at once took 5.3 GB, and tokenising them 30 of the 48 seconds).
The prefix runs through the model once per chunk
(:mod:`privgate.lm.continuations`): its key/value cache is repeated over
``batch_size`` candidates per forward pass, and candidates that differ only
in their last token share one pass. The tokens every candidate shares come
from the secret's own chunk; should a later chunk share fewer (a tokenizer
merging the prefix's end with some first characters), the shared part is
shortened and all chunks are scored again, so every candidate is scored
alike. The rank is exact for the model as given: the interval has width 0.

**Extrapolated** (|R| > ``max_exact``): ``samples`` candidates (10⁴ by
default) are drawn uniformly (with replacement) from R and scored, in chunks
as above: the cost is that of ``samples`` candidates whatever |R| is.

* The point estimate is the paper's extrapolation (§4.3): a skew-normal
  distribution (Azzalini 1985) is fitted by maximum likelihood to the sampled
  Px and the fraction of R below the secret is read from its CDF F:
  rank ≈ 1 + F(Px(s))·(|R| − 1). It can resolve exposures far beyond log₂ of
  the sample size, but only as far as the skew-normal shape holds in the tail.
* The interval is distribution-free: with k of n sampled candidates scoring
  strictly below the secret, the fraction q of R\\{s} below it has the
  Clopper-Pearson interval [q_lo, q_hi] (Clopper & Pearson 1934), and since
  exposure = log₂ |R| − log₂(1 + q(|R| − 1)) falls with q,

      exposure ∈ [log₂|R| − log₂(1 + q_hi(|R| − 1)),  log₂|R| − log₂(1 + q_lo(|R| − 1))].

  Its coverage holds whatever the shape of the distribution. When no sampled
  candidate beats the secret (k = 0), q_lo = 0 and the upper end is log₂ |R|:
  the sample proves the secret is in the top q_hi ≈ −ln(α/2)/n of R, and no
  more. The point estimate is clipped into this interval (a fit that
  contradicts the sample is not reported), and the fit's own sampling spread —
  a bootstrap percentile interval over the sample (Efron 1979), ``bootstrap``
  resamples, refitted each time — is reported beside it as ``fit_lo``/``fit_hi``
  (model-based: it assumes the skew-normal shape). On a tiny LM with 10⁵
  candidates per canary (``benchmarks/lm/lm_exposure_extrapolation.py``, 1,000
  samples) the distribution-free interval held the exact exposure for 12 of
  12 canaries, while the fit fell short in the tail (an exact 14.6 bits read
  as 11.4) and its bootstrap interval missed the exact value for 5 of 12:
  decide on ``lo``/``hi``.

**Several canaries.** The report's largest exposure carries an interval that
holds jointly: each extrapolated canary's interval is at confidence
1 − α/m for the m extrapolated canaries (Bonferroni), so all of them — and
hence [max lo, max hi] for the largest exposure — hold with probability
≥ ``confidence``. Exact canaries have no sampling error.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict

from privgate.errors import DataError, shown
from privgate.inputs.canaries import Canary, check_fits
from privgate.lm.continuations import evaluating, score_continuations, shared_length, token_lists
from privgate.stats import skewnormal
from privgate.stats.binomial import bonferroni, clopper_pearson

#: Largest |R| enumerated exactly by default (five decimal digits); larger spaces are sampled.
MAX_EXACT = 10**5
#: Candidates sampled for the extrapolation by default.
SAMPLES = 10_000
#: Bootstrap resamples for the fit's interval by default.
BOOTSTRAP = 50
#: Candidates tokenised and scored together: memory is bounded by this, never by |R|.
CHUNK = 8192


class CanaryExposure(BaseModel):
    """One canary's exposure (module docstring).

    Attributes:
        index: the canary's position in the list measured.
        space: |R|, the candidates; ``space_bits`` = log₂ |R|, the largest exposure possible.
        method: ``exact`` (every candidate scored) or ``extrapolated`` (sampled).
        log_perplexity: the secret's part of Px, bits.
        rank: the secret's rank among all candidates (estimated when extrapolated).
        exposure, lo, hi: bits; [lo, hi] at ``confidence`` (Bonferroni-adjusted over the extrapolated
            canaries; 1.0 and lo = hi for an exact one).
        samples, below: extrapolated: candidates sampled, and how many scored strictly below the secret.
        fit, fit_lo, fit_hi: extrapolated: the skew-normal parameters and the fit's bootstrap interval.
    """

    model_config = ConfigDict(frozen=True)

    index: int
    prefix: str
    secret: str
    space: int
    space_bits: float
    method: Literal["exact", "extrapolated"]
    log_perplexity: float
    rank: float
    exposure: float
    lo: float
    hi: float
    confidence: float
    samples: int | None = None
    below: int | None = None
    fit_lo: float | None = None
    fit_hi: float | None = None
    fit: dict[str, float] | None = None


class ExposureReport(BaseModel):
    """Every canary's exposure and the largest, ``max_exposure`` (bits), with a joint interval [lo, hi] at
    ``confidence``; ``worst`` is the index of the canary with the largest exposure."""

    model_config = ConfigDict(frozen=True)

    canaries: list[CanaryExposure]
    max_exposure: float
    lo: float
    hi: float
    confidence: float
    worst: int


# --------------------------------------------------------------------------- candidates, in bounded chunks


def _name(canary: Canary, index: int) -> str:
    return f"canary {index} ({shown(canary.prefix + canary.secret, 60)})"


def _common(lists: Sequence[Sequence[int]], context: Sequence[int]) -> int:
    """How many leading tokens of ``context`` every list shares (each keeps at least one token of its own)."""
    n = len(context)
    for t in lists:
        n = min(n, len(t) - 1)
        while n > 0 and list(t[:n]) != list(context[:n]):
            n -= 1
    return n


def _stream(
    model: Any,
    tokenizer: Any,
    canary: Canary,
    index: int,
    chunks: Callable[[], Iterator[list[str]]],
    *,
    device: str,
    batch_size: int,
    context: int | None,
    keep: bool,
) -> tuple[float, int, np.ndarray | None]:
    """Score the candidates ``chunks()`` yields, one chunk at a time (the secret first in the first chunk).

    Returns the secret's Px, how many other candidates score strictly below it, and (``keep``) their Px in
    order. The tokens every candidate shares (the context the model runs once) come from the first chunk;
    when a later chunk shares fewer (a tokenizer that merges across the prefix's end for some candidates),
    the context is shortened and every chunk is scored again, so all candidates are scored alike.
    """
    shared: list[int] | None = None
    while True:
        mine, below, kept, again = 0.0, 0, [], False
        for i, chunk in enumerate(chunks()):
            lists = token_lists(tokenizer, [canary.prefix + s for s in chunk])
            if len({tuple(t) for t in lists}) < len(set(chunk)):
                raise DataError(
                    f"{_name(canary, index)}: the tokenizer gives different secrets the same tokens (are characters "
                    f"of the alphabet {shown(canary.alphabet, 40)} missing from its vocabulary?)."
                )
            longest = max(len(t) for t in lists)
            if context is not None and longest > context:
                raise DataError(
                    f"{_name(canary, index)}: a candidate secret takes {longest:,} tokens with its prefix, more than "
                    f"the model's context of {context:,}; use a shorter prefix or secret."
                )
            if shared is None:
                shared = list(lists[0][: shared_length(lists)])
            n = _common(lists, shared)
            if n < 1:
                raise DataError(
                    f"{_name(canary, index)}: the tokenizer gives its candidates no common first token to condition "
                    "on; use a longer prefix."
                )
            if n < len(shared):
                shared, again = shared[:n], True
                break
            px = score_continuations(model, shared, [t[n:] for t in lists], device=device, batch_size=batch_size)
            if i == 0:
                mine, px = float(px[0]), px[1:]
            below += int(np.sum(px < mine))
            if keep:
                kept.append(px)
        if not again:
            return mine, below, (np.concatenate(kept) if keep else None)


def _candidates(canary: Canary, digits: np.ndarray) -> list[str]:
    """The candidate strings of rows of alphabet positions."""
    return ["".join(row) for row in np.asarray(list(canary.alphabet))[digits]]


def _lexicographic(canary: Canary, start: int, stop: int) -> np.ndarray:
    """Alphabet positions of candidates ``start`` … ``stop − 1`` of R in ``itertools.product`` order."""
    base, rest = len(canary.alphabet), np.arange(start, stop, dtype=np.int64)
    digits = np.empty((stop - start, len(canary.secret)), dtype=np.int64)
    for k in range(len(canary.secret) - 1, -1, -1):
        digits[:, k], rest = rest % base, rest // base
    return digits


# --------------------------------------------------------------------------- exposure


def exposure_of_fraction(q: float, space: int) -> float:
    """log₂|R| − log₂(1 + q(|R| − 1)): the exposure of a secret beaten by a fraction q of the other candidates."""
    return max(0.0, math.log2(space) - math.log2(1.0 + q * (space - 1)))


def _exact(
    model: Any,
    tokenizer: Any,
    canary: Canary,
    index: int,
    *,
    device: str,
    batch_size: int,
    context: int | None,
    chunk: int,
) -> CanaryExposure:
    """Every candidate scored, ``chunk`` at a time in lexicographic order, the secret's chunk first."""
    base = len(canary.alphabet)
    size = (chunk // base) * base if base <= chunk else chunk  # whole groups that differ in the last character only
    at = sum(canary.alphabet.index(c) * base**k for k, c in enumerate(reversed(canary.secret)))
    home = at // size

    def chunks() -> Iterator[list[str]]:
        for k in [home, *(k for k in range(-(-canary.space // size)) if k != home)]:
            start = k * size
            cands = _candidates(canary, _lexicographic(canary, start, min(start + size, canary.space)))
            if k == home:
                cands.pop(at - start)
                cands.insert(0, canary.secret)
            yield cands

    mine, below, _ = _stream(
        model, tokenizer, canary, index, chunks, device=device, batch_size=batch_size, context=context, keep=False
    )
    rank = 1 + below
    e = math.log2(canary.space) - math.log2(rank)
    return CanaryExposure(
        index=index,
        prefix=canary.prefix,
        secret=canary.secret,
        space=canary.space,
        space_bits=canary.space_bits,
        method="exact",
        log_perplexity=mine,
        rank=float(rank),
        exposure=e,
        lo=e,
        hi=e,
        confidence=1.0,
    )


def _extrapolated(
    model: Any,
    tokenizer: Any,
    canary: Canary,
    index: int,
    *,
    device: str,
    batch_size: int,
    context: int | None,
    chunk: int,
    confidence: float,
    samples: int,
    bootstrap: int,
    seed: int,
) -> CanaryExposure:
    """``samples`` candidates drawn uniformly (with replacement), ``chunk`` at a time; the module docstring."""

    def chunks() -> Iterator[list[str]]:
        rng = np.random.default_rng(np.random.SeedSequence([seed, index, 0xE8]))
        for start in range(0, samples, chunk):
            draws = rng.integers(0, len(canary.alphabet), size=(min(chunk, samples - start), len(canary.secret)))
            yield ([canary.secret] if start == 0 else []) + _candidates(canary, draws)

    mine, below, sample = _stream(
        model, tokenizer, canary, index, chunks, device=device, batch_size=batch_size, context=context, keep=True
    )
    assert sample is not None
    q_lo, q_hi = clopper_pearson(below, samples, confidence)
    lo, hi = exposure_of_fraction(q_hi, canary.space), exposure_of_fraction(q_lo, canary.space)
    params = skewnormal.fit(sample)
    point = min(max(exposure_of_fraction(skewnormal.cdf(mine, params), canary.space), lo), hi)
    rng = np.random.default_rng(np.random.SeedSequence([seed, index, 0xB007]))
    boot = []
    for _ in range(bootstrap):  # each resample refitted from the full sample's fit (privgate.stats.skewnormal)
        refit = skewnormal.fit(rng.choice(sample, size=samples, replace=True), params)
        boot.append(exposure_of_fraction(skewnormal.cdf(mine, refit), canary.space))
    tail = (1 - confidence) / 2
    fit_lo, fit_hi = (float(np.quantile(boot, tail)), float(np.quantile(boot, 1 - tail))) if boot else (None, None)
    return CanaryExposure(
        index=index,
        prefix=canary.prefix,
        secret=canary.secret,
        space=canary.space,
        space_bits=canary.space_bits,
        method="extrapolated",
        log_perplexity=mine,
        rank=2.0 ** (canary.space_bits - point),
        exposure=point,
        lo=lo,
        hi=hi,
        confidence=confidence,
        samples=samples,
        below=below,
        fit_lo=fit_lo,
        fit_hi=fit_hi,
        fit=dict(zip(("shape", "loc", "scale"), params)),
    )


def measure_exposure(
    model: Any,
    tokenizer: Any,
    canaries: Sequence[Canary],
    *,
    device: str = "cpu",
    batch_size: int = 64,
    confidence: float = 0.95,
    seed: int = 0,
    max_exact: int = MAX_EXACT,
    samples: int = SAMPLES,
    bootstrap: int = BOOTSTRAP,
    context: int | None = None,
    chunk: int = CHUNK,
) -> ExposureReport:
    """The exposure of every canary and the largest (module docstring).

    Args:
        model: a ``transformers`` causal LM (moved to ``device``; scored in eval mode,
            its training flag restored after).
        tokenizer: its tokenizer (a fast one scores faster).
        canaries: from :func:`privgate.inputs.canaries.load_canaries`.
        device: ``"cpu"``, ``"cuda"``, ...
        batch_size: candidates per forward pass.
        confidence: joint confidence of the extrapolated intervals.
        seed: drives the candidates sampled for the extrapolation.
        max_exact: largest |R| scored exhaustively; larger spaces are extrapolated.
        samples: candidates sampled per extrapolated canary.
        bootstrap: resamples for the skew-normal fit's interval (0: none).
        context: the model's context in tokens: a canary (or a candidate) longer is refused before it is scored
            (:func:`check_fits`); ``None``: not checked.
        chunk: candidates tokenised and scored together (memory grows with it, never with |R|; the results do
            not depend on it).

    Raises:
        DataError: a canary the model cannot score (longer than ``context``; secrets its tokenizer cannot tell
            apart; no common first token).
    """
    if not canaries:
        raise ValueError("measure_exposure needs at least one canary")
    if samples < 1 or max_exact < 1 or chunk < 1:
        raise ValueError("samples, max_exact and chunk must be at least 1")
    if context is not None:
        check_fits([(_name(c, i), c) for i, c in enumerate(canaries)], tokenizer, context)
    m = sum(1 for c in canaries if c.space > max_exact)
    level = bonferroni(confidence, m)
    model.to(device)
    rows = []
    opts = {"device": device, "batch_size": batch_size, "context": context, "chunk": chunk}
    with evaluating(model):
        for i, c in enumerate(canaries):
            if c.space <= max_exact:
                rows.append(_exact(model, tokenizer, c, i, **opts))
            else:
                rows.append(
                    _extrapolated(
                        model,
                        tokenizer,
                        c,
                        i,
                        **opts,
                        confidence=level,
                        samples=samples,
                        bootstrap=bootstrap,
                        seed=seed,
                    )
                )
    worst = max(range(len(rows)), key=lambda j: rows[j].exposure)
    return ExposureReport(
        canaries=rows,
        max_exposure=rows[worst].exposure,
        lo=max(r.lo for r in rows),
        hi=max(r.hi for r in rows),
        confidence=confidence,
        worst=worst,
    )


__all__ = [
    "CHUNK",
    "MAX_EXACT",
    "CanaryExposure",
    "ExposureReport",
    "evaluating",
    "exposure_of_fraction",
    "measure_exposure",
    "score_continuations",
]
