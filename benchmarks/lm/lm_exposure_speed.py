"""Exact canary exposure: the prefix's key/value cache shared over a batch of candidates vs a plain forward loop.

:func:`privgate.lm.canary_exposure.score_continuations` runs the canary's prefix through
the model once and repeats its key/value cache over each batch of candidates,
so a candidate costs a forward pass over its own tokens only, and candidates
that differ only in their last token share one pass. The baseline is
what one would write first with ``transformers``: every candidate as the whole
``prefix + candidate`` sequence, batched, through a plain forward pass. Both
score the same |R| = 10^L candidates of one canary on a seeded, untrained
Llama-style model (≈1M parameters, character tokens); the script checks that
they give the same log-perplexities and prints the ratio of their throughputs.

    python benchmarks/lm/lm_exposure_speed.py --length 4 --batch 1024
"""

from __future__ import annotations

import argparse
import itertools
import math
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))

from tiny_lm import char_tokenizer  # noqa: E402

from privgate.lm.canary_exposure import score_continuations  # noqa: E402


def plain(model, context: list[int], conts: list[list[int]], batch: int) -> np.ndarray:
    """−Σ log₂ p of each continuation from full forward passes over context + continuation (no cache)."""
    out = np.empty(len(conts))
    c = len(context)
    with torch.inference_mode():
        for s in range(0, len(conts), batch):
            x = torch.tensor([context + t for t in conts[s : s + batch]])
            logp = torch.log_softmax(model(input_ids=x).logits[:, c - 1 : -1].float(), -1)
            lp = logp.gather(-1, x[:, c:, None])[..., 0].double().sum(-1)
            out[s : s + batch] = (-lp / math.log(2)).numpy()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--length", type=int, default=4, help="digits per secret: |R| = 10^length")
    ap.add_argument("--batch", type=int, default=1024)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(1)
    from transformers import LlamaConfig, LlamaForCausalLM

    tok = char_tokenizer()
    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=128,
        intermediate_size=512,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=256,
    )
    model = LlamaForCausalLM(cfg).eval()
    params = sum(p.numel() for p in model.parameters())
    prefix = "patient 1234, date of birth 1970-01-01, social security number "
    context = tok(prefix)["input_ids"]
    conts = [
        tok("".join(t), add_special_tokens=False)["input_ids"]
        for t in itertools.product("0123456789", repeat=args.length)
    ]
    times = {"shared cache": [], "plain forward": []}
    results = {}
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        results["shared cache"] = score_continuations(model, context, conts, device="cpu", batch_size=args.batch)
        times["shared cache"].append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        results["plain forward"] = plain(model, context, conts, args.batch)
        times["plain forward"].append(time.perf_counter() - t0)
    gap = float(np.max(np.abs(results["shared cache"] - results["plain forward"])))
    same_order = bool(np.array_equal(np.argsort(results["shared cache"]), np.argsort(results["plain forward"])))
    print(
        f"model {params / 1e6:.2f}M parameters; prefix {len(context)} tokens; {len(conts):,} candidates of "
        f"{args.length} tokens; batch {args.batch}; 1 thread; best of {args.repeats}"
    )
    for name, ts in times.items():
        print(f"  {name:14s} {min(ts):7.2f} s  {len(conts) / min(ts):10,.0f} candidates/s")
    print(f"  speed-up of the shared cache: {min(times['plain forward']) / min(times['shared cache']):.2f}x")
    print(f"  largest difference in log-perplexity: {gap:.2e} bits; same ranking: {same_order}")


if __name__ == "__main__":
    main()
