"""Scoring many continuations of one shared context with a causal LM: the context's key/value cache, reused.

For canary exposure (:mod:`privgate.lm.canary_exposure`; Carlini et al. 2019, arXiv 1802.08232, §4): the prefix
runs through the model once and its key/value cache is repeated over a batch of candidates, so a candidate costs a
pass over its own tokens, and candidates that differ only in their last token share one pass.
``benchmarks/lm/lm_exposure_speed.py`` compares it with a plain forward loop. The candidates' token ids are kept
across audits in a process (:func:`token_lists`): a harden audits the original model and each candidate with the
same tokenizer, and tokenising was three quarters of an exact exposure's CPU.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import threading
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

_LN2 = math.log(2.0)


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


#: Token ids of the texts :func:`token_lists` tokenised lately, by the fast tokenizer's serialised state and the
#: texts, with their count; at most :data:`KEPT_IDS` ids in all, the least recently used dropped first.
_KEPT: OrderedDict[tuple[str, tuple[str, ...]], tuple[list[list[int]], int]] = OrderedDict()
_LOCK = threading.Lock()
KEPT_IDS = 1_000_000


def token_lists(tokenizer: Any, texts: Sequence[str]) -> list[list[int]]:
    """Each text's token ids, special tokens included, as ``tokenizer(texts)["input_ids"]`` gives them.

    A fast tokenizer's Rust backend is called directly: the same ids without the
    per-text dictionaries ``__call__`` builds (a third of the time for 10⁶ candidates).
    Its answers are kept (module docstring), keyed by everything that decides them:
    the backend's whole serialised state (vocabulary, merges, normaliser,
    pre-tokeniser, post-processor) and the texts.
    """
    backend = getattr(tokenizer, "backend_tokenizer", None) if getattr(tokenizer, "is_fast", False) else None
    if backend is None:
        return tokenizer(list(texts), add_special_tokens=True)["input_ids"]
    if backend.truncation is not None:  # left by an earlier call with truncation: ``tokenizer(texts)`` unsets it
        backend.no_truncation()
    if backend.padding is not None:  # the same for padding
        backend.no_padding()
    key = (hashlib.sha256(backend.to_str().encode("utf-8")).hexdigest(), tuple(texts))
    with _LOCK:
        kept = _KEPT.get(key)
        if kept is not None:
            _KEPT.move_to_end(key)
    if kept is None:
        lists = [e.ids for e in backend.encode_batch(list(key[1]), add_special_tokens=True)]
        kept = (lists, sum(len(t) for t in lists))
        with _LOCK:
            _KEPT[key] = kept
            held = sum(n for _, n in _KEPT.values())
            while held > KEPT_IDS and len(_KEPT) > 1:
                held -= _KEPT.popitem(last=False)[1][1]
    return [list(t) for t in kept[0]]


def shared_length(lists: Sequence[Sequence[int]]) -> int:
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


__all__ = ["cache_argument", "evaluating", "score_continuations", "shared_length", "token_lists"]
