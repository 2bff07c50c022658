"""Token scores of reference language models, cached by content hash, never able to change a verdict.

Stored in the reference-model cache (:class:`privgate.training.cache.ModelCache`, ``--cache-dir``) under a key of
the model's content digest, every record's token ids after truncation, and how they are computed (Min-K%++
statistics, batch size, device type, torch version). Entries are authenticated and checked on load like every
cache entry (:mod:`privgate.training.cache`): a forged, corrupt, truncated or swapped entry is ignored, the records
are scored again and the report says so; a cache that cannot be written only costs time. Details:
``docs/language-models.md``.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import numpy as np

from privgate.lm.scoring import BATCH, TokenScores, score_ids, tokenize

#: Bumped when scoring would give other numbers for the same inputs (old entries are never read).
SCORES_VERSION = 1


def _cache_class() -> type:
    from privgate.training.cache import ModelCache

    class ScoreCache(ModelCache):
        """:class:`ModelCache` whose failed entries are scored again (the warnings say so)."""

        redone = redone_all = "the records were scored again"

    return ScoreCache


def open_cache(root: str | Path | None, secret: bytes | None = None) -> Any:
    """A score cache in ``root`` (the run's ``--cache-dir``) keyed by ``secret`` (the run's cache key), or ``None``
    when caching is off."""
    return None if root is None else _cache_class()(root, secret)


def scores_key(model_digest: str, ids: list[list[int]], *, moments: bool, batch_size: int, device: str) -> str:
    """The cache key of one model's token scores of token-id sequences (module docstring)."""
    import torch

    h = hashlib.sha256()
    kind = str(device).split(":")[0]
    h.update(f"lm-scores|{SCORES_VERSION}|{model_digest}|{moments}|{batch_size}|{kind}|{torch.__version__}|".encode())
    for row in ids:
        h.update(np.asarray(row, dtype=np.int64).tobytes() + b"|")
    return h.hexdigest()


def _pack(lp: list[np.ndarray], mu: list[np.ndarray], sd: list[np.ndarray], moments: bool) -> dict[str, Any]:
    import torch

    def cat(parts: list[np.ndarray]) -> Any:
        return torch.from_numpy(np.concatenate(parts) if parts else np.zeros(0)).to(torch.float64)

    out = {"logprob": cat(lp)}
    if moments:
        out["mu"], out["sigma"] = cat(mu), cat(sd)
    return out


def _unpack(state: dict[str, Any], lengths: list[int]) -> tuple[list[np.ndarray], ...]:
    cuts = np.cumsum(lengths)[:-1]

    def split(name: str) -> list[np.ndarray]:
        if name not in state:
            return [np.zeros(0) for _ in lengths]
        return [a.copy() for a in np.split(state[name].numpy(), cuts)] if lengths else []

    return split("logprob"), split("mu"), split("sigma")


def cached_score_texts(
    model: Any,
    tokenizer: Any,
    texts: list[str],
    *,
    digest: str,
    context: int,
    cache: Any = None,
    device: str = "cpu",
    batch_size: int = BATCH,
    moments: bool = True,
) -> tuple[TokenScores, bool]:
    """:func:`privgate.lm.scoring.score_texts` through the cache: ``(scores, whether they came from it)``.

    Args:
        model: the scoring model; ``None`` is allowed when the caller only wants a hit (then a miss raises).
        tokenizer: the tokenizer the records are read with (the target's).
        digest: the model's content digest (the SHA-256 of its directory's files,
            :func:`privgate.inputs.targets.hf.directory_sha256`, or of a fine-tune's recipe, base and data).
        cache: :func:`open_cache`'s cache, or ``None`` (no cache: always scored).
        device: the device a lookup without a model keys on; a model is scored where it is, and keyed so.
    """
    from privgate.device import device_of

    ids, cut = tokenize(tokenizer, texts, context)
    lengths = [max(len(i) - 1, 0) for i in ids]
    where = device if model is None else device_of(model)
    key = scores_key(digest, ids, moments=moments, batch_size=batch_size, device=where)
    if cache is not None:
        import torch

        total = int(sum(lengths))
        like = {"logprob": torch.zeros(total, dtype=torch.float64)}
        if moments:
            like["mu"] = like["sigma"] = like["logprob"]
        state = cache.load(key, like)
        if state is not None:
            lp, mu, sd = _unpack(state, lengths)
            return TokenScores(lp, mu, sd, cut, context), True
    if model is None:
        raise LookupError(key)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    lp, mu, sd = score_ids(model, ids, batch_size=batch_size, pad_id=pad, moments=moments)
    if cache is not None:
        cache.store(key, _pack(lp, mu, sd, moments))
    return TokenScores(lp, mu, sd, cut, context), False


__all__ = ["SCORES_VERSION", "cached_score_texts", "open_cache", "scores_key"]
