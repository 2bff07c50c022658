"""Cost of K reference fine-tunes for LiRA/RMIA on a causal LM, and what they buy over the reference-free attacks.

The clinical-notes example's pieces (``examples/clinical_notes/build.py``: public text, tokenizer, a tiny
Llama-style base model, synthetic patient records), at benchmark sizes: 200 members, 200 non-members (100 of
each in the evaluation split, so TPR at 1 % FPR is measurable), 300 population records. The target is the
base fine-tuned on the members for a few epochs (it memorises mildly, unlike the example's ``memorised``,
on which every attack reaches AUC 1), all weights, AdamW; the reference recipe repeats that fine-tune (mode
``full``, same epochs, learning rate and batch), as LiRA's references should (Carlini et al. 2022, arXiv
2112.03570).

For K = 2, 4, 8 the gate runs ``lm_lira`` and ``lm_rmia`` with K references fine-tuned in that run (cache
off), beside the reference-free attacks (loss, zlib, Min-K%, Min-K%++) and the base-model ratio
(``reference_ratio``, ``--reference-model base``); printed per attack: AUC [95 % CI] and TPR at 1 % FPR
[CI] on the evaluation split, and per K: seconds per reference fine-tune and tokens/s. Last, the K = 8 run is
repeated with a cache folder, twice: the second run reads every reference from the cache (ratio of times
printed, numbers identical). Run: ``nice .venv/bin/python benchmarks/lm/lm_reference_cost.py`` (1 thread, ≈3 min).
"""

from __future__ import annotations

import json
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for _common

from _common.clinical import builder  # noqa: E402

MEMBERS, NONMEMBERS, POPULATION = 200, 200, 300
EPOCHS, LR = 8, 5e-3
KS = (2, 4, 8)
ATTACKS = ("lm_loss", "zlib", "min_k", "min_k_pp", "reference_ratio", "lm_lira", "lm_rmia")


def build(out: Path) -> None:
    import copy

    import torch
    from transformers.utils import logging as hf_logging

    b = builder()
    torch.set_num_threads(1)
    hf_logging.disable_progress_bar()
    rng = random.Random(0)
    records = list(dict.fromkeys(b.make_records(MEMBERS + NONMEMBERS + POPULATION + 50, rng)))
    members, nonmembers = records[:MEMBERS], records[MEMBERS : MEMBERS + NONMEMBERS]
    population = records[MEMBERS + NONMEMBERS : MEMBERS + NONMEMBERS + POPULATION]
    public = b.public_text(800)
    tok = b.make_tokenizer(public + records, 384)
    p = b.PROFILES["test"]
    base = b.make_model(p, len(tok), 0)
    b.train(base, tok, public, epochs=100, lr=p.lr, seed=0, steps=p.pretrain_steps)
    target = copy.deepcopy(base)
    b.train(target, tok, members, epochs=EPOCHS, lr=LR, seed=1)
    for name, model in (("base", base), ("target", target)):
        model.save_pretrained(out / name)
        tok.save_pretrained(out / name)
    for name, rows in (("members", members), ("nonmembers", nonmembers), ("population", population)):
        (out / f"{name}.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in rows))
    (out / "recipe.yaml").write_text(
        f"base: base\nmode: full\nepochs: {EPOCHS}\nlearning_rate: {LR}\nbatch_size: 16\nmax_length: 128\n"
    )


def policy(out: Path, k: int) -> str:
    path = out / f"policy-{k}.yaml"
    path.write_text(
        "name: reference-cost\nsensitivity: internal\nrelease: api\nconfidence: 0.95\n"
        "attacks: {lm_loss: {}, zlib: {}, min_k: {}, min_k_pp: {}, reference_ratio: {form: difference}, "
        f"lm_lira: {{models: {k}}}, lm_rmia: {{models: {k}}}}}\n"
        "checks:\n  - {id: mia-auc, attack: best, metric: auc, max: 0.99}\n"
    )
    return str(path)


def audit(out: Path, k: int, cache: str):
    from privgate.api import check
    from privgate.settings import TextOptions

    t0 = time.perf_counter()
    rep = check(
        str(out / "target"),
        policy(out, k),
        str(out / "members.jsonl"),
        str(out / "nonmembers.jsonl"),
        population=str(out / "population.jsonl"),
        recipe=str(out / "recipe.yaml"),
        text=TextOptions(reference_model=str(out / "base")),
        cache_dir=cache,
        threads=1,
    )
    return rep, time.perf_counter() - t0


def _fmt(v, ci) -> str:
    return "      n/a          " if v is None else f"{v:.3f} [{ci[0]:.3f}, {ci[1]:.3f}]"


def main() -> None:
    import torch

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        t0 = time.perf_counter()
        build(out)
        print(f"built the target and data in {time.perf_counter() - t0:.0f} s (1 thread)")
        print(f"{MEMBERS} members, {NONMEMBERS} non-members (evaluation split 100/100), {POPULATION} population")
        for k in KS:
            rep, seconds = audit(out, k, "off")
            by = {a.name: a for a in rep.attacks}
            lira = by["lm_lira"].extras
            per = lira["fine_tune_seconds"] / max(lira["models_trained"], 1)
            rate = lira["fine_tune_tokens"] / max(lira["fine_tune_seconds"], 1e-9)
            print(
                f"\nK = {k}: {lira['models_trained']} reference fine-tunes on {lira['population_pool'] // 2} records "
                f"each, {per:.2f} s per reference, {rate:,.0f} tokens/s; the whole audit {seconds:.1f} s"
            )
            print(f"  {'attack':16s} {'AUC [95% CI]':22s} TPR@1%FPR [CI]")
            for name in ATTACKS:
                a = by[name]
                tpr = next(p for p in a.tpr_at_fpr if p.fpr == 0.01)
                print(f"  {name:16s} {_fmt(a.auc, a.auc_ci):22s} {_fmt(tpr.tpr, tpr.ci)}")
        cache = str(out / "cache")
        first, cold = audit(out, KS[-1], cache)
        second, warm = audit(out, KS[-1], cache)
        same = [a.auc for a in first.attacks] == [a.auc for a in second.attacks]
        hits = next(a for a in second.attacks if a.name == "lm_lira").extras["models_from_cache"]
        print(
            f"\nK = {KS[-1]} with a cache: first run {cold:.1f} s, second {warm:.1f} s ({cold / warm:.1f}× faster), "
            f"references from the cache: {hits}; same AUCs: {same}"
        )


if __name__ == "__main__":
    main()
