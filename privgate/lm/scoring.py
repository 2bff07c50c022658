"""Per-token log-probabilities of a causal language model on records of text, batched, in one pass.

Each record is cut to :func:`char_limit` characters before it is tokenised (a 10 MB record costs no more than a
context), then truncated to the model's context (either cut counts as truncated); records are sorted by length and
right-padded with an attention mask. Per token t ≥ 1 it gives ``log p(x_t | x_<t)`` and, for Min-K%++ (Zhang et
al. 2024, arXiv 2404.02936), the mean μ_t and standard deviation σ_t of the log-probability under the model's own
next-token distribution. Log-softmax is taken in float32 on the model's device; only the per-token numbers leave
it, and padded positions never reach a record's numbers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from privgate.inputs.text import MAX_CHARS_PER_TOKEN, char_limit

#: Records scored per forward pass by default.
BATCH = 32


@dataclass(frozen=True)
class TokenScores:
    """What one model says about every record, token by token.

    Attributes:
        logprob: per record, ``[T − 1]`` log p of each token after the first.
        mu, sigma: per record, ``[T − 1]`` mean and standard deviation of log p under the next-token distribution.
        cut: per record, whether it was cut (longer than :func:`char_limit` characters or the context in tokens).
        context: the context length the records were truncated to.
    """

    logprob: list[np.ndarray]
    mu: list[np.ndarray]
    sigma: list[np.ndarray]
    cut: np.ndarray
    context: int

    @property
    def truncated(self) -> int:
        """How many records were cut to the context."""
        return int(np.sum(self.cut))

    @property
    def n_tokens(self) -> np.ndarray:
        return np.array([len(v) for v in self.logprob], dtype=np.int64)

    @property
    def mean_logprob(self) -> np.ndarray:
        """Per record, the mean token log-probability (−loss; −log perplexity)."""
        return np.array([float(v.mean()) if len(v) else 0.0 for v in self.logprob])

    @property
    def tokens(self) -> int:
        return int(self.n_tokens.sum())


def tokenize(tokenizer: Any, texts: list[str], context: int) -> tuple[list[list[int]], np.ndarray]:
    """Token ids of every record, each cut to :func:`char_limit` characters, then to ``context`` tokens; and
    which records were cut."""
    most = char_limit(context)
    full = tokenizer([t[:most] for t in texts], add_special_tokens=True, truncation=False)["input_ids"]
    cut = np.array([len(t) > most or len(ids) > context for t, ids in zip(texts, full)], dtype=bool)
    return [list(ids[:context]) for ids in full], cut


def score_ids(
    model: Any,
    ids: list[list[int]],
    *,
    batch_size: int = BATCH,
    pad_id: int = 0,
    moments: bool = True,
) -> tuple[list[np.ndarray], list[np.ndarray], list[np.ndarray]]:
    """Per-token log p (and μ, σ when ``moments``) of token-id sequences, in their given order.

    Args:
        model: a causal LM returning ``.logits`` of ``[batch, T, vocab]``.
        ids: token ids of each record (at least one token each).
        batch_size: records per forward pass.
        pad_id: the id padded positions carry (they are masked out).
        moments: also compute μ and σ (Min-K%++); without them the pass skips a ``[batch, T, vocab]`` product.
    """
    import torch

    from privgate.device import device_of

    device = device_of(model)  # the forward passes run where the model is
    n = len(ids)
    order = sorted(range(n), key=lambda i: len(ids[i]), reverse=True)
    lp_out: list[np.ndarray] = [np.zeros(0)] * n
    mu_out: list[np.ndarray] = [np.zeros(0)] * n
    sd_out: list[np.ndarray] = [np.zeros(0)] * n
    with torch.inference_mode():
        for start in range(0, n, batch_size):
            chunk = order[start : start + batch_size]
            width = len(ids[chunk[0]])
            batch = torch.full((len(chunk), width), pad_id, dtype=torch.long)
            mask = torch.zeros((len(chunk), width), dtype=torch.long)
            for r, i in enumerate(chunk):
                batch[r, : len(ids[i])] = torch.tensor(ids[i], dtype=torch.long)
                mask[r, : len(ids[i])] = 1
            batch, mask = batch.to(device), mask.to(device)
            logits = model(input_ids=batch, attention_mask=mask).logits[:, :-1].float()
            logp = torch.log_softmax(logits, dim=-1)
            target = logp.gather(-1, batch[:, 1:, None]).squeeze(-1)
            if moments:
                p = logp.exp()
                mu = (p * logp).sum(-1)
                var = (p * logp.square()).sum(-1) - mu.square()
                sd = var.clamp_min(1e-12).sqrt()
                mu_np, sd_np = mu.cpu().numpy().astype(np.float64), sd.cpu().numpy().astype(np.float64)
            lp_np = target.cpu().numpy().astype(np.float64)
            for r, i in enumerate(chunk):
                k = len(ids[i]) - 1
                lp_out[i] = lp_np[r, :k]
                if moments:
                    mu_out[i], sd_out[i] = mu_np[r, :k], sd_np[r, :k]
    return lp_out, mu_out, sd_out


def score_texts(
    model: Any,
    tokenizer: Any,
    texts: list[str],
    *,
    context: int,
    batch_size: int = BATCH,
    moments: bool = True,
) -> TokenScores:
    """:func:`score_ids` of records of text, tokenised and truncated to ``context`` tokens, where the model is."""
    ids, cut = tokenize(tokenizer, texts, context)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    lp, mu, sd = score_ids(model, ids, batch_size=batch_size, pad_id=pad, moments=moments)
    return TokenScores(lp, mu, sd, cut, context)


__all__ = ["BATCH", "MAX_CHARS_PER_TOKEN", "TokenScores", "char_limit", "score_ids", "score_texts", "tokenize"]
