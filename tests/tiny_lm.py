"""A tiny Llama-style causal LM with a character-level tokenizer, trained here from a seed (no downloads).

It memorises its training records and one inserted canary: the session fixture
``tiny_lm_dir`` (tests/conftest.py) trains it once per test session (a few seconds on one CPU thread).
"""

from __future__ import annotations

import string
from dataclasses import dataclass
from pathlib import Path

import numpy as np

LETTERS = string.ascii_lowercase + " "
CHARS = string.ascii_lowercase + string.ascii_uppercase + string.digits + " :.,"
SEED = 7
#: The canary inserted (repeated) in training, and one never inserted.
INSERTED = {"prefix": "canary 0: the secret number is ", "secret": "4821", "alphabet": "0123456789"}
NEVER = {"prefix": "canary 1: the secret number is ", "secret": "0593", "alphabet": "0123456789"}
REPEATS = 8


@dataclass(frozen=True)
class TinyLM:
    model: object
    tokenizer: object
    members: list[str]
    nonmembers: list[str]


def records(n: int, rng: np.random.Generator, start: int = 0) -> list[str]:
    """``n`` records "record NN: " + 40 random lowercase letters and spaces."""
    chars = np.asarray(list(LETTERS))
    return [f"record {start + i:02d}: " + "".join(rng.choice(chars, size=40)) for i in range(n)]


def char_tokenizer():
    """A character-level ``PreTrainedTokenizerFast`` that starts every text with ``<s>`` (as Llama's does)."""
    from tokenizers import Tokenizer, models, processors
    from transformers import PreTrainedTokenizerFast

    specials = ["<pad>", "<s>", "</s>", "<unk>"]
    vocab = {t: i for i, t in enumerate(specials + list(CHARS))}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", vocab["<s>"])])
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>", unk_token="<unk>"
    )


def train(texts: list[str], steps: int, lr: float, seed: int = SEED, layers: int = 1):
    """(model, tokenizer): a Llama-style LM (hidden 64, one layer unless told) trained on ``texts``, every text in
    every step. One layer memorises the members and the canary as two did (every test's numbers hold), at half the
    CPU; the benchmarks of docs/lm-leakage.md were measured with two (``layers=2``, 91,200 parameters)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = char_tokenizer()
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=128,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    model = LlamaForCausalLM(config)
    batch = tokenizer(texts, padding=True, return_tensors="pt")
    labels = batch["input_ids"].masked_fill(batch["attention_mask"] == 0, -100)
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    model.train()
    for _ in range(steps):
        loss = model(**batch, labels=labels).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model.eval(), tokenizer


def tiny_lm_records() -> tuple[list[str], list[str]]:
    """The 24 member and 24 non-member records (drawn from the seed; no training)."""
    rng = np.random.default_rng(SEED)
    members = records(24, rng)
    return members, records(24, rng, start=24)


def build_tiny_lm(folder: Path, steps: int = 120, lr: float = 5e-3, layers: int = 1) -> Path:
    """Train the tiny LM on the 24 member records and the inserted canary (repeated); ``save_pretrained`` it."""
    members, _ = tiny_lm_records()
    texts = members + [INSERTED["prefix"] + INSERTED["secret"] + "."] * REPEATS
    model, tokenizer = train(texts, steps, lr, layers=layers)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def load_tiny_lm(folder: Path) -> TinyLM:
    """The tiny LM saved by :func:`build_tiny_lm` (safetensors: the weights round-trip exactly)."""
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

    model = AutoModelForCausalLM.from_pretrained(str(folder), local_files_only=True).eval()
    tokenizer = PreTrainedTokenizerFast.from_pretrained(str(folder), local_files_only=True)
    return TinyLM(model, tokenizer, *tiny_lm_records())
