"""DP fine-tuning of a language model: the ε ladder on the clinical-notes example, and DP-LoRA's cost per epoch.

(a) **ε ladder.** The clinical-notes example (``examples/clinical_notes/build.py``)
is built from its seed; for each ε of the ladder the public base model is
fine-tuned on the members with DP-SGD (:func:`privgate.lm.finetune.finetune`;
Yu et al. 2022, arXiv 2110.06500; Li et al. 2022, arXiv 2110.05679), σ
calibrated by the accountant for (ε, δ = 1/(10·N), q, epochs), and audited by
the language-model gate with the example's policy: membership-inference AUC of
the loss attack (Yeom et al. 2018) with its interval, canary exposure (Carlini
et al. 2019, arXiv 1802.08232), extraction rate (Carlini et al. 2021), and the
held-out perplexity on the non-members with its bootstrap interval. The
leaking ``memorised`` model is the first row. The chosen ε is what the ladder
of ``privgate harden`` picks (the first ε from the top whose checks pass under
the perplexity ceiling), and the released ε composes every candidate the ladder
trained (:func:`privgate.dp.search.compose_search` on the same candidates).

(b) **Cost of privacy per epoch.** One DP-LoRA epoch (Opacus: Poisson
sampling, per-example gradients, clipping, noise) against one non-private LoRA
epoch of the same recipe on the same members, median of ``--repeats`` runs,
printed as a ratio next to the goal (≤ 2×).

    nice -n 10 python benchmarks/lm/lm_dp_finetune.py            # test profile, 1 thread, ≈ 2–3 min
    nice -n 10 python benchmarks/lm/lm_dp_finetune.py --profile demo
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for _common

from _common.clinical import builder  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
GOAL = 2.0


def _policy(path: Path, ceiling: float):
    from privgate.policy import load_policy

    pol = load_policy(path)
    rem = pol.remediation.model_copy(update={"enabled": True, "max_perplexity": ceiling})
    return pol.model_copy(update={"remediation": rem})


def _row(name: str, report, ppl: float, ci: list[float], extra: str = "") -> str:
    att = {a.name: a for a in report.attacks}
    loss = att["lm_loss"]
    auc = f"{loss.auc:.3f} [{loss.auc_ci[0]:.3f}, {loss.auc_ci[1]:.3f}]" if loss.auc is not None else "n/a"
    checks = {c.id.split(":")[-1]: c for c in report.checks}
    exp, ext = checks.get("canary-exposure"), checks.get("extraction")
    e = f"{exp.value:6.2f}" if exp and exp.value is not None else "   n/a"
    x = f"{ext.value:.3f} [{max(ext.ci[0], 0):.3f}, {ext.ci[1]:.3f}]" if ext and ext.value is not None else "n/a"
    return (
        f"{name:>10} | {auc:>22} | {e:>8} | {x:>22} | {ppl:8.2f} [{ci[0]:.1f}, {ci[1]:.1f}] | "
        f"{report.verdict:<12}{extra}"
    )


def ladder(d: Path, args: argparse.Namespace) -> None:
    from privgate.dp.search import compose_search
    from privgate.dpsgd.accounting import calibrate, sampling
    from privgate.dpsgd.records import DPSettings
    from privgate.gate import check_model
    from privgate.inputs.lm_recipe import parse_lm_recipe
    from privgate.inputs.targets.hf import CAUSAL, LoadedLM, load_model_dir
    from privgate.inputs.targets.hf_target import hf_target
    from privgate.inputs.text import TextAudit, load_texts
    from privgate.lm.finetune import DPFineTune, finetune, load_base
    from privgate.lm.utility import LMCandidate, perplexity_ci
    from privgate.options import RunOptions

    def audit_lm(lm, data, policy, canaries, options):  # noqa: ANN001, ANN202 - the gate on a causal LM's records
        return check_model(hf_target(lm), dataclasses.replace(data, canaries=canaries), policy, options=options)

    run = RunOptions(seed=0, threads=1, exposed=0).resolved()
    recipe = parse_lm_recipe(
        f"base: base\nmode: {args.mode}\nepochs: {args.epochs}\nlearning_rate: {args.lr}\n", "bench-recipe.yaml", d
    )
    data = TextAudit(
        load_texts(str(d / "members.jsonl"), "members", labelled=False),
        load_texts(str(d / "nonmembers.jsonl"), "non-members", labelled=False),
    )
    policy = _policy(args.policy, args.ceiling)
    canaries = str(d / "canaries.jsonl")
    n = len(data.members)
    settings = DPSettings(
        epochs=recipe.epochs, batch_size=recipe.batch_size, max_grad_norm=1.0, delta=1 / (10 * n), accountant="prv"
    )
    q, _ = sampling(n, settings.batch_size, settings.epochs)
    held = data.nonmembers.texts
    leaking = load_model_dir(d / "memorised")
    conf = policy.confidence
    print(
        f"(a) ε ladder — clinical notes ({args.profile} profile, N = {n} members, {len(held)} non-members), "
        f"{recipe.mode} DP fine-tune from the public base, {recipe.epochs} epochs, lr {recipe.learning_rate:g}, "
        f"batch {settings.batch_size}, C = 1, δ = {settings.delta:.2g}; policy {policy.name} + perplexity ceiling "
        f"{args.ceiling:g}; intervals at {conf:.0%}"
    )
    print(
        f"{'ε':>10} | {'MIA AUC (lm_loss)':>22} | {'exposure':>8} | {'extraction rate':>22} | "
        f"{'held-out perplexity':>20} | verdict"
    )
    rep = audit_lm(leaking, data, policy, canaries=canaries, options=run)
    ppl, ci = perplexity_ci(leaking.model, leaking.tokenizer, held, context=leaking.context,
                            confidence=conf, seed=0)  # fmt: skip
    print(_row("memorised", rep, ppl, ci))
    base = load_base(recipe)
    bppl, bci = perplexity_ci(base[0], base[1], held, context=leaking.context, confidence=conf, seed=0)
    print(
        f"{'base':>10} | {'(public, no members)':>22} | {'':>8} | {'':>22} | {bppl:8.2f} [{bci[0]:.1f}, {bci[1]:.1f}] |"
    )
    cands: dict[float, LMCandidate] = {}
    for eps in args.epsilons:
        sigma, _ = calibrate(eps, settings.delta, q, settings.epochs, settings.accountant)
        t0 = time.perf_counter()
        model, tok, stats = finetune(recipe, data.members.texts, seed=0, dp=DPFineTune(settings, sigma, eps), base=base)
        took = time.perf_counter() - t0
        lm = LoadedLM(model, tok, CAUSAL, f"<ε={eps:g}>", "", leaking.context, {})
        rep = audit_lm(lm, data, policy, canaries=canaries, options=run)
        ppl, ci = perplexity_ci(model, tok, held, context=leaking.context, confidence=conf, seed=0)
        cands[eps] = LMCandidate(eps, model, None, stats.dp, rep, ppl, ci, args.ceiling)
        print(_row(f"{eps:g}", rep, ppl, ci, f" σ = {sigma:.3f}, training ε = {stats.dp.epsilon:.3g}, {took:.1f}s"))
    found = compose_search(
        lambda eps, sigma, trial: cands[eps], args.epsilons, "ladder", settings, n, on_candidate=None
    )
    comp = found.composition
    released = max([comp.epsilon, *[c.training.epsilon for c in found.candidates]]) if comp else None
    if found.chosen is not None:
        print(
            f"chosen ε = {found.chosen.epsilon:g} (the ladder's first accepted rung); released ε = {released:.3g} "
            f"composing the {len(found.candidates)} candidate(s) the ladder trained (δ = {settings.delta:.2g})"
        )
    else:
        print(
            f"no ε chosen: {found.reason}; the {len(found.candidates)} run(s) spent released ε = {released:.3g} "
            "together"
        )


def epoch_cost(d: Path, args: argparse.Namespace) -> None:
    from privgate.dpsgd.records import DPSettings
    from privgate.inputs.lm_recipe import parse_lm_recipe
    from privgate.inputs.text import load_texts
    from privgate.lm.finetune import DPFineTune, finetune, load_base

    recipe = parse_lm_recipe("base: base\nmode: lora\nepochs: 1\n", "bench-lora.yaml", d)
    texts = load_texts(str(d / "members.jsonl"), "members", labelled=False).texts
    base = load_base(recipe)
    settings = DPSettings(epochs=1, batch_size=recipe.batch_size, max_grad_norm=1.0, delta=1 / (10 * len(texts)))
    plain, private = [], []
    for r in range(args.repeats):
        plain.append(finetune(recipe, texts, seed=r, base=base)[2].seconds)
        private.append(finetune(recipe, texts, seed=r, base=base, dp=DPFineTune(settings, 1.0))[2].seconds)
    p, s = statistics.median(plain), statistics.median(private)
    print(
        f"(b) one LoRA epoch on {len(texts)} records (r = {recipe.lora.r}, batch {recipe.batch_size}, median of "
        f"{args.repeats}): non-private {p:.2f}s, DP-LoRA (Opacus, Poisson, per-example clipping) {s:.2f}s — "
        f"ratio {s / p:.2f}× (goal ≤ {GOAL:g}×: {'met' if s / p <= GOAL else 'NOT met'})"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", choices=("test", "demo"), default="test")
    ap.add_argument("--epsilons", type=float, nargs="+", default=[50.0, 8.0, 2.0, 1.0])
    ap.add_argument("--mode", choices=("lora", "full"), default="full")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--ceiling", type=float, default=100.0, help="held-out perplexity ceiling")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--policy", type=Path, default=ROOT / "examples" / "clinical_notes" / "policy.yaml")
    ap.add_argument("--out", type=Path, help="build the example here (default: a temporary folder)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        d = args.out or Path(tmp) / "clinical"
        if not (d / "memorised" / "config.json").is_file():
            builder().build(d, args.profile, seed=0)
        print(f"built the example in {time.perf_counter() - t0:.0f}s")
        ladder(d, args)
        epoch_cost(d, args)
    print(f"total {time.perf_counter() - t0:.0f}s")


if __name__ == "__main__":
    main()
