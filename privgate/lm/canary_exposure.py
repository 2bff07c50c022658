"""Canary exposure: how far a language model prefers an inserted random secret over every other secret.

Carlini, Liu, Erlingsson, Kos & Song (2019), "The Secret Sharer", arXiv
1802.08232, §4. A canary is a prefix p followed by a secret s drawn uniformly
from the randomness space R (every string over its alphabet of its length,
:mod:`privgate.lm.canaries`). The model's log-perplexity of a candidate r is

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

**Exact** (|R| ≤ ``max_exact``, 10⁶ by default): every candidate is scored. The
prefix runs through the model once; its key/value cache is repeated over a
batch of candidates (``batch_size`` sequences per forward pass), so each
candidate costs a forward pass over its own tokens only, and candidates that
differ only in their last token share one pass (|alphabet| times fewer passes
when each character is a token). The rank is exact for
the model as given: the interval has width 0.

**Extrapolated** (|R| > ``max_exact``): ``samples`` candidates are drawn
uniformly (with replacement) from R and scored.

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
  candidates per canary (``benchmarks/lm_exposure_extrapolation.py``, 1,000
  samples) the distribution-free interval held the exact exposure for 12 of
  12 canaries, while the fit fell short in the tail (an exact 14.6 bits read
  as 11.4) and its bootstrap interval missed the exact value for 4 of 12:
  decide on ``lo``/``hi``.

**Several canaries.** The report's largest exposure carries an interval that
holds jointly: each extrapolated canary's interval is at confidence
1 − α/m for the m extrapolated canaries (Bonferroni), so all of them — and
hence [max lo, max hi] for the largest exposure — hold with probability
≥ ``confidence``. Exact canaries have no sampling error.
"""

from __future__ import annotations

import contextlib
import itertools
import math
from collections.abc import Iterator, Sequence
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict

from privgate.errors import DataError, shown
from privgate.lm.canaries import Canary
from privgate.stats.binomial import bonferroni, clopper_pearson

#: Largest |R| enumerated exactly by default.
MAX_EXACT = 10**6
#: Candidates sampled for the extrapolation by default.
SAMPLES = 10_000
#: Bootstrap resamples for the fit's interval by default.
BOOTSTRAP = 50
_LN2 = math.log(2.0)


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


# --------------------------------------------------------------------------- model plumbing


@contextlib.contextmanager
def evaluating(model: Any) -> Iterator[None]:
    """``model`` in eval mode, no gradients, for the block; its training flag is put back after."""
    import torch

    was_training = bool(getattr(model, "training", False))
    model.eval()
    try:
        with torch.inference_mode():
            yield
    finally:
        model.train(was_training)


def _token_lists(tokenizer: Any, texts: Sequence[str]) -> list[list[int]]:
    """Each text's token ids, special tokens included, as ``tokenizer(texts)["input_ids"]`` gives them.

    A fast tokenizer's Rust backend is called directly: the same ids without the
    per-text dictionaries ``__call__`` builds (a third of the time for 10⁶ candidates).
    """
    backend = getattr(tokenizer, "backend_tokenizer", None) if getattr(tokenizer, "is_fast", False) else None
    if backend is not None and backend.truncation is None and backend.padding is None:
        return [e.ids for e in backend.encode_batch(list(texts), add_special_tokens=True)]
    return tokenizer(list(texts), add_special_tokens=True)["input_ids"]


def _shared_length(lists: Sequence[Sequence[int]]) -> int:
    """How many leading tokens every list shares (at most the shortest length − 1: each keeps ≥ 1 token)."""
    first = lists[0]
    n = min(len(t) for t in lists) - 1
    for t in lists:
        while n > 0 and list(t[:n]) != list(first[:n]):
            n -= 1
    return n


def score_continuations(
    model: Any, context: Sequence[int], continuations: Sequence[Sequence[int]], *, device: str, batch_size: int
) -> np.ndarray:
    """−Σ log₂ Pr(token | context, earlier tokens) of each continuation, in bits (its log-perplexity part).

    The context runs through the model once; its key/value cache is repeated
    over ``batch_size`` sequences per forward pass. Continuations that differ
    only in their last token share one sequence (the last position's
    distribution scores each of them), and continuations of unequal length are
    batched by length (no padding). The model must be in eval mode
    and on ``device`` (see :func:`evaluating`); no gradients are kept.
    """
    import torch

    with torch.inference_mode():
        return _scored(model, context, continuations, device=device, batch_size=batch_size)


def _scored(
    model: Any, context: Sequence[int], continuations: Sequence[Sequence[int]], *, device: str, batch_size: int
) -> np.ndarray:
    import torch

    ctx = torch.as_tensor([list(context)], dtype=torch.long, device=device)
    name = cache_argument(model)
    out = model(input_ids=ctx, use_cache=True)
    first = torch.log_softmax(out.logits[0, -1].float(), dim=-1).double().cpu().numpy()
    prefix_cache = getattr(out, name)
    scores = np.empty(len(continuations), dtype=np.float64)
    by_length: dict[int, list[int]] = {}
    for i, c in enumerate(continuations):
        by_length.setdefault(len(c), []).append(i)
    for length, rows in sorted(by_length.items()):
        toks = np.asarray([list(continuations[i]) for i in rows], dtype=np.int64)
        total = first[toks[:, 0]]
        if length > 1:
            # candidates that differ only in their last token share one forward pass: the last
            # position's distribution scores all of them (10 digits: a tenth of the passes)
            heads, inv = np.unique(toks[:, :-1], axis=0, return_inverse=True)
            inv = inv.reshape(-1)
            order = np.argsort(inv, kind="stable")
            starts = np.searchsorted(inv[order], np.arange(len(heads) + 1))
            for a in range(0, len(heads), batch_size):
                b = min(a + batch_size, len(heads))
                x = torch.as_tensor(heads[a:b], device=device)
                mask = torch.ones((b - a, ctx.shape[1] + length - 1), dtype=torch.long, device=device)
                cache = _repeated(prefix_cache, b - a)
                logits = model(input_ids=x, attention_mask=mask, use_cache=True, **{name: cache}).logits
                logp = torch.log_softmax(logits.float(), dim=-1)
                inner = logp[:, :-1].gather(-1, x[:, 1:, None])[..., 0].double().sum(-1)
                these = order[starts[a] : starts[b]]
                local = torch.as_tensor(inv[these] - a, device=device)
                last = logp[local, -1, torch.as_tensor(toks[these, -1], device=device)]
                total[these] += (inner[local] + last.double()).cpu().numpy()
        scores[rows] = -total / _LN2
    return scores


def cache_argument(model: Any) -> str:
    """The name under which ``model`` takes and returns its key/value cache: ``cache`` from transformers 5.24
    (where ``past_key_values`` is deprecated, to be removed in 5.40), ``past_key_values`` before."""
    import inspect

    inner = model.get_base_model() if hasattr(model, "get_base_model") else model  # a PEFT wrapper: its model
    return "cache" if "cache" in inspect.signature(type(inner).forward).parameters else "past_key_values"


def _repeated(cache: Any, b: int) -> Any:
    """A fresh copy of the context's key/value cache, repeated ``b`` times along the batch."""
    import copy

    c = copy.deepcopy(cache)
    if b > 1:
        c.batch_repeat_interleave(b)
    return c


def _candidates_scored(
    model: Any, tokenizer: Any, canary: Canary, suffixes: Sequence[str], *, device: str, batch_size: int
) -> np.ndarray:
    """Log-perplexity (bits, candidate part) of ``prefix + suffix`` for each suffix, sharing the prefix's tokens."""
    lists = _token_lists(tokenizer, [canary.prefix + s for s in suffixes])
    if len({tuple(t) for t in lists}) < len(set(suffixes)):
        raise DataError(
            f"canary {shown(canary.prefix + canary.secret, 80)}: the tokenizer gives different secrets the same "
            f"tokens (are characters of the alphabet {shown(canary.alphabet, 40)} missing from its vocabulary?)."
        )
    shared = _shared_length(lists)
    if shared < 1:
        raise DataError(
            f"canary {shown(canary.prefix + canary.secret, 80)}: the tokenizer gives its candidates no common "
            "first token to condition on; use a longer prefix."
        )
    return score_continuations(
        model, lists[0][:shared], [t[shared:] for t in lists], device=device, batch_size=batch_size
    )


# --------------------------------------------------------------------------- exposure


def exposure_of_fraction(q: float, space: int) -> float:
    """log₂|R| − log₂(1 + q(|R| − 1)): the exposure of a secret beaten by a fraction q of the other candidates."""
    return max(0.0, math.log2(space) - math.log2(1.0 + q * (space - 1)))


def _exact(model: Any, tokenizer: Any, canary: Canary, index: int, *, device: str, batch_size: int) -> CanaryExposure:
    alphabet = canary.alphabet
    cands = ["".join(t) for t in itertools.product(alphabet, repeat=len(canary.secret))]
    secret_at = sum(alphabet.index(c) * len(alphabet) ** k for k, c in enumerate(reversed(canary.secret)))
    px = _candidates_scored(model, tokenizer, canary, cands, device=device, batch_size=batch_size)
    mine = px[secret_at]
    rank = 1 + int(np.sum(px < mine))
    e = math.log2(canary.space) - math.log2(rank)
    return CanaryExposure(
        index=index,
        prefix=canary.prefix,
        secret=canary.secret,
        space=canary.space,
        space_bits=canary.space_bits,
        method="exact",
        log_perplexity=float(mine),
        rank=float(rank),
        exposure=e,
        lo=e,
        hi=e,
        confidence=1.0,
    )


def _skewnorm_fraction(sample: np.ndarray, x: float) -> tuple[float, dict[str, float]]:
    """F(x) of a skew-normal fitted to ``sample`` by maximum likelihood (scipy), with its parameters."""
    from scipy import stats as st

    a, loc, scale = st.skewnorm.fit(sample)
    return float(st.skewnorm.cdf(x, a, loc, scale)), {"shape": float(a), "loc": float(loc), "scale": float(scale)}


def _extrapolated(
    model: Any,
    tokenizer: Any,
    canary: Canary,
    index: int,
    *,
    device: str,
    batch_size: int,
    confidence: float,
    samples: int,
    bootstrap: int,
    seed: int,
) -> CanaryExposure:
    rng = np.random.default_rng(np.random.SeedSequence([seed, index, 0xE8]))
    chars = np.asarray(list(canary.alphabet))
    draws = rng.integers(0, len(chars), size=(samples, len(canary.secret)))
    suffixes = ["".join(row) for row in chars[draws]] + [canary.secret]
    px = _candidates_scored(model, tokenizer, canary, suffixes, device=device, batch_size=batch_size)
    sample, mine = px[:-1], float(px[-1])
    below = int(np.sum(sample < mine))
    q_lo, q_hi = clopper_pearson(below, samples, confidence)
    lo, hi = exposure_of_fraction(q_hi, canary.space), exposure_of_fraction(q_lo, canary.space)
    q_fit, params = _skewnorm_fraction(sample, mine)
    point = min(max(exposure_of_fraction(q_fit, canary.space), lo), hi)
    boot = []
    for _ in range(bootstrap):
        q_b, _p = _skewnorm_fraction(rng.choice(sample, size=samples, replace=True), mine)
        boot.append(exposure_of_fraction(q_b, canary.space))
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
        fit=params,
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
) -> ExposureReport:
    """The exposure of every canary and the largest (module docstring).

    Args:
        model: a ``transformers`` causal LM (moved to ``device``; scored in eval mode,
            its training flag restored after).
        tokenizer: its tokenizer (a fast one scores faster).
        canaries: from :func:`privgate.lm.canaries.load_canaries`.
        device: ``"cpu"``, ``"cuda"``, ...
        batch_size: candidates per forward pass.
        confidence: joint confidence of the extrapolated intervals.
        seed: drives the candidates sampled for the extrapolation.
        max_exact: largest |R| scored exhaustively; larger spaces are extrapolated.
        samples: candidates sampled per extrapolated canary.
        bootstrap: resamples for the skew-normal fit's interval (0: none).
    """
    if not canaries:
        raise ValueError("measure_exposure needs at least one canary")
    m = sum(1 for c in canaries if c.space > max_exact)
    level = bonferroni(confidence, m)
    model.to(device)
    rows = []
    with evaluating(model):
        for i, c in enumerate(canaries):
            if c.space <= max_exact:
                rows.append(_exact(model, tokenizer, c, i, device=device, batch_size=batch_size))
            else:
                rows.append(
                    _extrapolated(
                        model,
                        tokenizer,
                        c,
                        i,
                        device=device,
                        batch_size=batch_size,
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
    "CanaryExposure",
    "ExposureReport",
    "evaluating",
    "exposure_of_fraction",
    "measure_exposure",
    "score_continuations",
]
