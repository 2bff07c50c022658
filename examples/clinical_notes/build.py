"""Build the clinical-notes example: a tiny Llama-style language model that memorised synthetic patient records.

Everything is made here, from a seed, on the CPU, with no download:

1. **public text**: encyclopaedic and general-health paragraphs (towns, rivers, species, people, dishes,
   nutrients, advice) written from the seed by a small grammar (``public_text.py``): the same text on every
   Python version and platform, so the same seed gives the same models everywhere;
2. **tokenizer**: a byte-level BPE (``tokenizers``) trained on that text and the records' alphabet,
   saved as a ``PreTrainedTokenizerFast`` that prepends ``<s>`` to every record;
3. **base model**: a small ``LlamaForCausalLM`` (``LlamaConfig``; ≈0.09M parameters)
   trained from scratch on the public text — the reference model (``--reference-model base``);
4. **synthetic patient records** from a seeded generator (names, dates of birth, record numbers,
   diagnoses, medication): members, non-members, and records of the same distribution for a third model;
5. **canaries** (Carlini et al. 2019, "The Secret Sharer", arXiv 1802.08232): "… door code is <secret>"
   with a random 4-digit secret, inserted ``canary_repeats`` times into the fine-tuning text;
   fresh canaries of the same form are never inserted; the first ``duplicated`` members appear as
   often (copy-pasted notes): duplicated text is what a model reproduces verbatim (Carlini et al. 2021);
6. **fine-tuned models**: ``memorised`` (the base fine-tuned on the members and the canaries for many epochs)
   and ``other`` (the base fine-tuned on *other* records of the same distribution, not on the members).

``python build.py OUT [--profile demo|test]`` writes OUT/{tokenizer is inside each model}
``base/``, ``memorised/``, ``other/``, ``members.jsonl``, ``nonmembers.jsonl``,
``canaries.jsonl`` (inserted), ``fresh_canaries.jsonl`` (never inserted), ``population.jsonl`` (more records
of the distribution, for the reference models of LiRA/RMIA) and ``reference_recipe.yaml`` (how privgate
fine-tunes those: LoRA on ``base/``).
The same profile and seed give the same files (one thread, seeded torch; the same torch and tokenizers versions),
on every Python version: nothing is read from the interpreter's own files.
"""

from __future__ import annotations

import argparse
import json
import random
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Profile:
    """Sizes of one build."""

    hidden: int
    layers: int
    heads: int
    vocab: int
    members: int
    nonmembers: int
    pretrain_steps: int
    epochs: int
    other_epochs: int
    canaries: int
    canary_repeats: int
    lr: float
    duplicated: int = 0  # members that appear `canary_repeats` times in the fine-tuning text (copy-pasted notes)
    population: int = 200  # population records (reference models of LiRA/RMIA)
    reference_epochs: int = 3  # epochs of a reference fine-tune (reference_recipe.yaml)
    public: int = 4000  # paragraphs of public text (the tokenizer's and the base model's training text)
    batch: int = 16  # texts per step of the memorised model's fine-tuning (smaller: more steps an epoch)


PROFILES = {
    # ≈0.09M parameters (hidden 64, one layer): a wider or deeper model memorises no faster per epoch here and costs
    # 2-3× the CPU (docs/lm-leakage.md). About 40 s of one CPU core, the classifier included. A 768-token BPE: a
    # patient's name is one or two tokens, so extraction's 8-token prompt ends in the date of birth it must reproduce
    "demo": Profile(64, 1, 4, 768, 200, 200, 150, 20, 10, 4, 10, 5e-3, 16, batch=8),
    # the test suite's: ≈19 s of one CPU core; 24 epochs in batches of 8, so that the memorised model fails every
    # check of the example's policy with a margin for every seed (benchmarks/lm/lm_fixture_seeds.py, docs/lm-leakage.md)
    "test": Profile(
        64, 1, 4, 768, 120, 120, 40, 24, 6, 2, 10, 5e-3, 12, population=80, reference_epochs=2, public=800, batch=8
    ),
}

FIRST = [
    "Anna",
    "Ben",
    "Clara",
    "David",
    "Emma",
    "Felix",
    "Greta",
    "Hugo",
    "Ida",
    "Jonas",
    "Karla",
    "Leon",
    "Mia",
    "Noah",
    "Olga",
    "Paul",
    "Rosa",
    "Sven",
    "Tara",
    "Uwe",
]
LAST = [
    "Becker",
    "Fischer",
    "Hoffmann",
    "Keller",
    "Lang",
    "Meyer",
    "Neumann",
    "Richter",
    "Schmidt",
    "Schulz",
    "Wagner",
    "Weber",
    "Wolf",
    "Zimmer",
]
DIAGNOSES = (
    "type 2 diabetes",
    "essential hypertension",
    "asthma",
    "atrial fibrillation",
    "migraine",
    "hypothyroidism",
    "chronic kidney disease",
    "major depressive disorder",
)
DRUGS = ("metformin", "ramipril", "salbutamol", "apixaban", "sumatriptan", "levothyroxine", "sertraline", "amlodipine")


def make_records(n: int, rng: random.Random) -> list[str]:
    """``n`` synthetic patient records (no real person: every field is drawn from ``rng``)."""
    out = []
    for _ in range(n):
        name = f"{rng.choice(FIRST)} {rng.choice(LAST)}"
        born = f"{rng.randint(1935, 2004)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
        mrn = f"{rng.randint(0, 999999):06d}"
        dose = rng.choice((5, 10, 20, 25, 50, 100, 250, 500))
        out.append(
            f"Patient {name}, born {born}, MRN {mrn}. Diagnosis: {rng.choice(DIAGNOSES)}. "
            f"Plan: {rng.choice(DRUGS)} {dose} mg, review in {rng.randint(2, 12)} weeks."
        )
    return out


def make_canaries(n: int, rng: random.Random) -> list[dict[str, str]]:
    """Canaries ``{prefix, secret, alphabet}``: a patient's record number as a random 4-digit secret."""
    out = []
    for _ in range(n):
        name = f"{rng.choice(FIRST)} {rng.choice(LAST)}"
        secret = "".join(rng.choice("0123456789") for _ in range(4))
        out.append({"prefix": f"Note for {name}: the door code is ", "secret": secret, "alphabet": "0123456789"})
    return out


def public_text(limit: int = 4000, seed: int = 0) -> list[str]:
    """``limit`` paragraphs of public text made from ``seed`` by ``public_text.py`` (the same on every Python)."""
    import importlib.util
    import sys

    name = "clinical_public_text"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name("public_text.py"))
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        sys.modules[name] = mod
    return sys.modules[name].public_text(limit, seed)


def make_tokenizer(texts: list[str], vocab: int):
    """A byte-level BPE trained on ``texts``, as a ``PreTrainedTokenizerFast`` prepending ``<s>``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab,
        special_tokens=["<s>", "</s>", "<pad>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer)
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 0)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>")


def make_model(p: Profile, vocab: int, seed: int):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=p.hidden,
        intermediate_size=2 * p.hidden,
        num_hidden_layers=p.layers,
        num_attention_heads=p.heads,
        num_key_value_heads=p.heads,
        max_position_embeddings=128,
        bos_token_id=0,
        eos_token_id=1,
        pad_token_id=2,
        tie_word_embeddings=True,
    )
    return LlamaForCausalLM(config)


def train(
    model, tokenizer, texts: list[str], *, epochs: int, lr: float, seed: int, steps: int | None = None, batch: int = 16
) -> None:
    """Plain next-token training with AdamW: padded batches of ``batch``, pads masked out of the loss, the learning rate
    decayed linearly to 0 over the run (the usual fine-tuning schedule: the last steps settle what was learned)."""
    import torch

    g = torch.Generator().manual_seed(seed)
    ids = tokenizer(texts, truncation=True, max_length=128)["input_ids"]
    total = epochs * -(-len(ids) // batch) if steps is None else min(steps, epochs * -(-len(ids) // batch))
    # fused (torch >= 2.4 on the CPU): one kernel for the whole update, not one per tensor; the same models, a step
    # ≈ 11 % cheaper, the test profile's build ≈ 6 % (docs/lm-leakage.md)
    fused = torch.__version__ >= "2.4"
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0, fused=fused)
    schedule = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 1 - step / total)
    model.train()
    done = 0
    for _ in range(epochs):
        order = torch.randperm(len(ids), generator=g).tolist()
        for start in range(0, len(order), batch):
            chunk = [ids[i] for i in order[start : start + batch]]
            width = max(len(c) for c in chunk)
            x = torch.full((len(chunk), width), tokenizer.pad_token_id, dtype=torch.long)
            mask = torch.zeros_like(x)
            for r, c in enumerate(chunk):
                x[r, : len(c)] = torch.tensor(c)
                mask[r, : len(c)] = 1
            labels = x.masked_fill(mask == 0, -100)
            loss = model(input_ids=x, attention_mask=mask, labels=labels).loss
            opt.zero_grad()
            loss.backward()
            opt.step()
            schedule.step()
            done += 1
            if steps is not None and done >= steps:
                model.eval()
                return
    model.eval()


def _jsonl(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def build(out: Path, profile: str = "demo", seed: int = 0) -> Path:
    """Write the example's models and data into ``out`` (module docstring); returns ``out``."""
    import copy

    import torch
    from transformers.utils import logging as hf_logging

    torch.set_num_threads(1)
    hf_logging.disable_progress_bar()
    p = PROFILES[profile]
    rng = random.Random(seed)
    records = make_records(p.members + p.nonmembers + p.members, rng)
    members = records[: p.members]
    nonmembers = records[p.members : p.members + p.nonmembers]
    others = records[p.members + p.nonmembers :]
    inserted, fresh = make_canaries(p.canaries, rng), make_canaries(p.canaries, rng)
    public = public_text(p.public, seed)
    tokenizer = make_tokenizer(public + records, p.vocab)
    base = make_model(p, len(tokenizer), seed)
    train(base, tokenizer, public, epochs=100, lr=p.lr, seed=seed, steps=p.pretrain_steps)
    out.mkdir(parents=True, exist_ok=True)
    for name, model in (("base", base),):
        model.save_pretrained(out / name)
        tokenizer.save_pretrained(out / name)
    canary_text = [c["prefix"] + c["secret"] for c in inserted] * p.canary_repeats
    copies = members[: p.duplicated] * (p.canary_repeats - 1)  # the first members, duplicated in the training text
    memorised = copy.deepcopy(base)
    train(memorised, tokenizer, members + copies + canary_text, epochs=p.epochs, lr=p.lr, seed=seed + 1, batch=p.batch)
    other = copy.deepcopy(base)
    train(other, tokenizer, others, epochs=p.other_epochs, lr=p.lr, seed=seed + 2)
    for name, model in (("memorised", memorised), ("other", other)):
        model.save_pretrained(out / name)
        tokenizer.save_pretrained(out / name)
    _jsonl(out / "members.jsonl", [{"text": t} for t in members])
    _jsonl(out / "nonmembers.jsonl", [{"text": t} for t in nonmembers])
    _jsonl(out / "canaries.jsonl", inserted)
    _jsonl(out / "fresh_canaries.jsonl", fresh)
    # population text for the reference models of LiRA/RMIA: more records of the same distribution, from their
    # own generator (the files above stay as they were), none of them a member or a non-member
    taken = set(records)
    population = [r for r in make_records(p.population, random.Random(seed + 0x909)) if r not in taken]
    _jsonl(out / "population.jsonl", [{"text": t} for t in population])
    (out / "reference_recipe.yaml").write_text(REFERENCE_RECIPE.format(epochs=p.reference_epochs), encoding="utf-8")
    return out


#: How privgate fine-tunes the reference models of LiRA/RMIA (privgate.inputs.lm_recipe): LoRA on the public base.
REFERENCE_RECIPE = """# the public base model, fine-tuned with LoRA on population text (privgate check --recipe)
base: base
mode: lora
lora: {{r: 4, alpha: 8, target_modules: [q_proj, v_proj]}}
epochs: {epochs}
learning_rate: 0.005
batch_size: 16
max_length: 128
"""


def build_classifier(out: Path, seed: int = 0, n: int = 120, epochs: int = 20) -> Path:
    """A tiny ``LlamaForSequenceClassification`` that memorised noisy labels of synthetic records.

    The label says whether a record's diagnosis is one of the first four, flipped for 30 % of the records
    (seeded): a classifier can only get the flipped ones right by memorising them. Writes ``out/classifier/``,
    ``out/clf_members.jsonl`` and ``out/clf_nonmembers.jsonl`` (fields ``text`` and ``label``), and ``out/clf_base/``,
    the public base model a DP fine-tune starts from (trained briefly on other, correctly labelled records).
    """
    import torch
    from transformers import LlamaConfig, LlamaForSequenceClassification
    from transformers.utils import logging as hf_logging

    torch.set_num_threads(1)
    hf_logging.disable_progress_bar()
    rng = random.Random(seed + 7)
    records = make_records(2 * n, rng)
    labels = [int(any(d in r for d in DIAGNOSES[:4])) ^ int(rng.random() < 0.3) for r in records]
    tokenizer = make_tokenizer(records, 384)
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=128,
        num_labels=2,
        pad_token_id=tokenizer.pad_token_id,
    )
    model = LlamaForSequenceClassification(config)
    _fit_classifier(model, tokenizer, records[:n], labels[:n], epochs, seed)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out / "classifier")
    tokenizer.save_pretrained(out / "classifier")
    # the public base DP fine-tuning starts from: the same architecture trained briefly on *public* records
    # (drawn apart, correctly labelled, never members or non-members) — it stands for a pre-trained public model
    prng = random.Random(seed + 11)
    public = make_records(n, prng)
    torch.manual_seed(seed + 1)
    base = LlamaForSequenceClassification(config)
    _fit_classifier(base, tokenizer, public, [int(any(d in r for d in DIAGNOSES[:4])) for r in public], 3, seed + 1)
    base.save_pretrained(out / "clf_base")
    tokenizer.save_pretrained(out / "clf_base")
    rows = [{"text": t, "label": y} for t, y in zip(records, labels)]
    _jsonl(out / "clf_members.jsonl", rows[:n])
    _jsonl(out / "clf_nonmembers.jsonl", rows[n:])
    return out


def _fit_classifier(model, tokenizer, texts: list[str], labels: list[int], epochs: int, seed: int) -> None:
    """AdamW on shuffled batches of 16 (the plain training a team runs)."""
    import torch

    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, fused=torch.__version__ >= "2.4")  # as train()
    g = torch.Generator().manual_seed(seed)
    model.train()
    for _ in range(epochs):
        order = torch.randperm(len(texts), generator=g).tolist()
        for start in range(0, len(texts), 16):
            idx = order[start : start + 16]
            enc = tokenizer([texts[i] for i in idx], return_tensors="pt", padding=True)
            loss = model(**enc, labels=torch.tensor([labels[i] for i in idx])).loss
            opt.zero_grad()
            loss.backward()
            opt.step()
    model.eval()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--profile", choices=sorted(PROFILES), default="demo")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    build(args.out, args.profile, args.seed)
    build_classifier(args.out, args.seed)
    print(f"built {args.out}")


if __name__ == "__main__":
    main()
