"""Scoring throughput: privgate's batched token scoring vs plain ``transformers`` forward loops, tokens/s.

One tiny Llama-style causal LM (the clinical-notes example's architecture, 4 layers, ≈0.8M parameters, random weights:
throughput does not depend on what the weights learned) scores the same records three ways, on one thread:

* ``plain, one record at a time``: ``model(input_ids)`` per record, log-softmax, gather — the loop a user
  writes first;
* ``plain, padded batches``: the tokenizer pads each batch of 32 records in file order, one forward pass each;
* ``privgate``: :func:`privgate.lm.scoring.score_texts` — length-sorted batches of 32, right padding with an
  attention mask — with and without the Min-K%++ moments (μ, σ of log p per position) it computes for the gate.

Every way scores every real token of every record (padding excluded from the count). The goal is privgate
≥ 0.9× the better plain loop. Run: ``nice .venv/bin/python benchmarks/lm/lm_scoring.py`` (≈1 minute).
"""

from __future__ import annotations

import random
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for _common

from _common.clinical import builder  # noqa: E402

N_RECORDS = 512
BATCH = 32


def plain_one_by_one(model, tok, texts) -> int:
    n = 0
    with torch.inference_mode():
        for t in texts:
            ids = tok(t, return_tensors="pt")["input_ids"]
            logp = torch.log_softmax(model(input_ids=ids).logits[0, :-1].float(), -1)
            logp.gather(-1, ids[0, 1:, None]).numpy()
            n += ids.shape[1] - 1
    return n


def plain_padded(model, tok, texts) -> int:
    n = 0
    with torch.inference_mode():
        for i in range(0, len(texts), BATCH):
            enc = tok(texts[i : i + BATCH], return_tensors="pt", padding=True)
            ids, mask = enc["input_ids"], enc["attention_mask"]
            logp = torch.log_softmax(model(input_ids=ids, attention_mask=mask).logits[:, :-1].float(), -1)
            lp = logp.gather(-1, ids[:, 1:, None])[..., 0]
            m = mask[:, 1:].bool()
            lp[m].numpy()
            n += int(m.sum())
    return n


def main() -> None:
    from privgate.lm.scoring import score_texts

    torch.set_num_threads(1)
    b = builder()
    rng = random.Random(0)
    public = b.public_text(4000)
    records = b.make_records(N_RECORDS // 2, rng) + rng.sample(public, N_RECORDS // 2)  # mixed lengths
    rng.shuffle(records)
    tok = b.make_tokenizer(public + records, 1024)
    size = b.Profile(128, 4, 4, 1024, 0, 0, 0, 0, 0, 0, 0, 0.0)  # hidden 128, 4 layers: ≈0.8M parameters
    model = b.make_model(size, len(tok), 0).eval()
    params = sum(p.numel() for p in model.parameters())
    ways = {
        "plain, one record at a time": lambda: plain_one_by_one(model, tok, records),
        "plain, padded batches of 32": lambda: plain_padded(model, tok, records),
        "privgate (with Min-K%++ moments)": lambda: score_texts(model, tok, records, context=128).tokens,
        "privgate (log p only)": lambda: score_texts(model, tok, records, context=128, moments=False).tokens,
    }
    for fn in ways.values():  # warm up
        fn()
    rates = {}
    for name, fn in ways.items():
        best = np.inf
        for _ in range(3):
            t0 = time.perf_counter()
            n = fn()
            best = min(best, time.perf_counter() - t0)
        rates[name] = n / best
    print(f"{N_RECORDS} records, {n} tokens, Llama {params / 1e6:.2f}M parameters, 1 thread, best of 3")
    plain = max(rates["plain, one record at a time"], rates["plain, padded batches of 32"])
    for name, r in rates.items():
        print(f"  {name:34s} {r:10.0f} tokens/s   {r / plain:5.2f}× the better plain loop")


if __name__ == "__main__":
    main()
