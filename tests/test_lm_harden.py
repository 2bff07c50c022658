"""Hardening a language model through the CLI: DP fine-tuning from the public base until the policy passes.

The memorised tiny Llama of the clinical-notes example (session fixture
``clinical``) leaks its canaries and members; ``privgate harden`` with a
language-model recipe fine-tunes the public base with DP-SGD (Opacus) and
writes a ``save_pretrained`` folder. Ladders are short (1 or 2 rungs) and the
fine-tunes tiny, so the file stays within a few seconds of CPU per test.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from cases import run_cli

#: The memorised model fails all three checks. A DP fine-tune never sees the canaries (they are not members): each
#: one's rank among the 10^4 candidates is uniform, so a bound of 6 bits (the example's) would fail a candidate for
#: 1 builder seed in 32 (rank ≤ 156, either of two canaries); 10 bits (rank ≤ 9) for 1 in 550.
POLICY = """\
name: lm-harden-test
sensitivity: internal
release: api
confidence: 0.9
decision: upper_bound
attacks:
  lm_loss: {{}}
  canary_exposure: {{}}
  extraction: {{prefix_tokens: 8, suffix_tokens: 8}}
checks:
  - {{id: mia-auc, attack: lm_loss, metric: auc, max: 0.85}}
  - {{id: canary-exposure, attack: canary_exposure, metric: exposure, max: 10}}
  - {{id: extraction, attack: extraction, metric: extraction_rate, max: 0.15}}
remediation:
  enabled: true
  epsilons: [8, 2]
{extra}
"""

RECIPE = """\
base: {base}
mode: full      # the tiny example model: LoRA adapters on hidden size 64 learn the record format slowly under noise
epochs: 3
learning_rate: 0.01
"""


#: held-out perplexity ceiling: the public base scores the records at ≈760-1,050 per token (768-token BPE), a
#: fine-tune without noise at 5.7-7.2, the DP fine-tunes at ε = 8 at 73-124 (builder seeds 0-2): twice the worst
CEILING = 250


def _files(tmp: Path, clinical: Path, extra: str = f"  max_perplexity: {CEILING}", recipe: str | None = None):
    (tmp / "policy.yaml").write_text(POLICY.format(extra=extra))
    (tmp / "recipe.yaml").write_text(recipe if recipe is not None else RECIPE.format(base=clinical / "base"))
    return tmp / "policy.yaml", tmp / "recipe.yaml"


def _harden(clinical: Path, tmp: Path, policy: Path, recipe: Path, out: Path, *extra: str, canaries: bool = True):
    rep = tmp / "report.json"
    with_canaries = ["--canaries", str(clinical / "canaries.jsonl")] if canaries else []
    r = run_cli(
        "harden",
        str(clinical / "memorised"),
        "--policy",
        str(policy),
        "--recipe",
        str(recipe),
        "--members",
        str(clinical / "members.jsonl"),
        "--nonmembers",
        str(clinical / "nonmembers.jsonl"),
        *with_canaries,
        "--json",
        str(rep),
        "--output-model",
        str(out),
        "--threads",
        "1",
        *extra,
    )
    return r, (json.loads(rep.read_text()) if rep.exists() else None)


def _secret_logprob(model_dir: Path, clinical: Path) -> float:
    """Mean log-probability the model gives the inserted canaries' secrets after their prefixes."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(str(model_dir), local_files_only=True).eval()
    tok = AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True)
    total = 0.0
    rows = [json.loads(line) for line in (clinical / "canaries.jsonl").read_text().splitlines()]
    for c in rows:
        head = tok(c["prefix"])["input_ids"]
        ids = tok(c["prefix"] + c["secret"])["input_ids"]
        with torch.inference_mode():
            logp = torch.log_softmax(model(torch.tensor([ids])).logits[0, :-1], -1)
        total += float(sum(logp[t - 1, ids[t]] for t in range(len(head), len(ids))))
    return total / len(rows)


def test_harden_memorised_lm_writes_dp_model_with_statement(clinical, tmp_path):
    extra = f"  max_perplexity: {CEILING}\n  audit: true\n  audit_canaries: 100"
    policy, recipe = _files(tmp_path, clinical, extra=extra)
    out = tmp_path / "hardened"
    r, rep = _harden(clinical, tmp_path, policy, recipe, out)
    assert r.returncode == 0, r.stdout + r.stderr
    rem = rep["remediation"]
    assert rep["job"] == "harden" and rem["status"] == "hardened" and rep["verdict"] == "pass"
    assert rem["original"]["verdict"] == "fail"  # the memorised model leaks
    orig = {c["id"]: c for c in rem["original"]["checks"]}
    now = {c["id"]: c for c in rep["checks"]}
    # 13.3 bits → chance: the DP fine-tune never saw the canaries (they are not members), so each one's rank among
    # the 10^4 candidates is uniform; exposure ≥ 8.29 bits (rank ≤ 31) has probability 31/10^4 per canary, 1 seed
    # in 160 for the larger of two (seeds 0-3: 4.0, 2.7, 2.3, 5.3 bits)
    assert now["canary-exposure"]["value"] < orig["canary-exposure"]["value"] - 5
    assert now["mia-auc"]["value"] < orig["mia-auc"]["value"] - 0.2
    # released ε composes every candidate and is never below the chosen run's training ε
    st = rem["statement"]
    assert rem["accounting"]["epsilon"] >= st["training_epsilon"] - 1e-5  # both rounded to 6 digits
    assert st["training_epsilon"] <= rem["chosen_epsilon"] + 1e-5 and rem["trainings"] == len(rem["rows"])
    assert st["unit"] == "record" and st["sampling"].startswith("Poisson")
    assert st["model_kind"].startswith("causal language model (DP fine-tuning")
    assert any(str(clinical / "base") in p and "public" in p for p in st["public"])
    assert 0 < st["sample_rate"] <= 1 and st["noise_multiplier"] > 0 and st["steps"] > 0
    assert rem["utility"]["metric"] == "perplexity" and rem["utility"]["rule"].startswith("remediation.max_perplexity")
    assert rem["chosen"]["utility"] <= CEILING  # held-out perplexity under the ceiling
    assert "training ε" in r.stdout and "released ε" in r.stdout
    audit = rem["audit"]  # the one-run audit with text canaries: the claim is not refuted
    assert audit["claimed_epsilon"] == rem["chosen_epsilon"] and audit["canaries"] == 100
    assert audit["verdict"] in ("pass", "inconclusive") and audit["epsilon_lb"] <= rem["chosen_epsilon"]
    # the folder: save_pretrained + tokenizer + card (statement parsed back) + report; loads with transformers
    assert {"config.json", "model.safetensors", "tokenizer.json", "README.md", "privgate-report.json"} <= {
        p.name for p in out.iterdir()
    }
    from privgate.dp.card import read_statement

    assert read_statement((out / "README.md").read_text()).released_epsilon == rem["accounting"]["epsilon"]
    hardened, leaking = _secret_logprob(out, clinical), _secret_logprob(clinical / "memorised", clinical)
    assert math.isfinite(hardened) and hardened < leaking - 5  # the secrets are no longer memorised


#: One check the memorised model fails, and a budget below the one rung: the original audit is all the work.
BUDGET_POLICY = """\
name: lm-budget-test
sensitivity: internal
release: api
confidence: 0.9
decision: upper_bound
attacks:
  lm_loss: {}
checks:
  - {id: mia-auc, attack: lm_loss, metric: auc, max: 0.85}
remediation:
  enabled: true
  epsilons: [1]
  max_total_epsilon: 0.5
"""


def test_budget_stops_before_training_and_writes_nothing(clinical, tmp_path):
    """The candidate at ε = 1 would spend more than max_total_epsilon 0.5: exit 1 before any fine-tune, no folder."""
    policy, recipe = _files(tmp_path, clinical)
    policy.write_text(BUDGET_POLICY)
    out = tmp_path / "hardened"
    r, rep = _harden(clinical, tmp_path, policy, recipe, out, canaries=False)
    assert r.returncode == 1, r.stdout + r.stderr
    rem = rep["remediation"]
    assert rem["status"] == "budget_exceeded" and rem["trainings"] == 0 and rem["original"]["verdict"] == "fail"
    assert "max_total_epsilon 0.5" in rem["reason"] and not out.exists()


def test_bad_recipe_is_one_sentence_exit_2(clinical, tmp_path):
    """A misspelt mode: ``privgate harden`` exits 2 with one sentence; a missing base: the same kind of sentence."""
    policy, recipe = _files(tmp_path, clinical, recipe=f"base: {clinical / 'base'}\nmode: lorra\n")
    out = tmp_path / "hardened"
    r, rep = _harden(clinical, tmp_path, policy, recipe, out)
    assert r.returncode == 2 and rep is None and not out.exists()
    err = r.stderr.strip()
    assert "recipe.yaml: line 2: field 'mode'" in err and "lora" in err and "Traceback" not in err
    assert len(err.splitlines()) == 1
    recipe.write_text("base: nowhere\n")  # in process through privgate.api: the sentence the CLI prints
    from privgate import api
    from privgate.errors import RecipeError

    with pytest.raises(RecipeError, match=r"field 'base'") as err:
        api.harden(
            str(clinical / "memorised"), str(policy), str(clinical / "members.jsonl"),
            str(clinical / "nonmembers.jsonl"), recipe=str(recipe), output_model=str(out),
        )  # fmt: skip
    assert "\n" not in str(err.value) and str(err.value).endswith(".") and not out.exists()


@pytest.mark.parametrize("existing", ["folder", "file"])
def test_existing_output_is_never_overwritten(clinical, tmp_path, existing):
    policy, recipe = _files(tmp_path, clinical)
    out = tmp_path / "hardened"
    if existing == "folder":
        out.mkdir()
        (out / "config.json").write_text("{}")
    else:
        out.write_text("mine")
    r, rep = _harden(clinical, tmp_path, policy, recipe, out)
    assert r.returncode == 2 and rep is None, r.stdout + r.stderr
    assert "already exists" in r.stderr and "Traceback" not in r.stderr
    assert (out / "config.json").read_text() == "{}" if existing == "folder" else out.read_text() == "mine"


def test_one_run_text_canary_bound_against_known_truths(clinical):
    """Steinke et al. 2023's bound: the untrained base proves nothing; a non-private fine-tune is refuted."""
    import numpy as np

    from privgate.inputs.lm_recipe import parse_lm_recipe
    from privgate.lm.finetune import finetune, load_base
    from privgate.lm.oneaudit import canary_bound, text_canaries

    recipe = parse_lm_recipe("base: base\nmode: full\nepochs: 20\nlearning_rate: 0.01\n", "r.yaml", clinical)
    base = load_base(recipe)
    texts, included = text_canaries(100, seed=0)
    assert 30 < included.sum() < 70 and len(set(texts)) == 100
    delta = 1e-4
    lb0, _ = canary_bound(base[0], base, base[1], texts, included, delta, 0.95, 64)
    assert lb0 == 0.0  # no training: every score is 0, the guesses are a coin flip
    memorised, tok, _ = finetune(recipe, [t for t, i in zip(texts, included) if i], seed=0, base=base)
    lb, best = canary_bound(memorised, base, tok, texts, included, delta, 0.95, 64)
    assert lb > 1.5 and best.correct > 0.9 * best.guesses  # no DP: the canaries in are told from those out
    assert np.isfinite(lb)


def test_finetune_is_deterministic_and_dp_record_matches_the_accountant(clinical):
    """The function other code calls for K fine-tunes: same seed → same weights; DP → (σ, q, T) that compose."""
    import torch

    from privgate.dpsgd.accounting import Run, compose, sampling
    from privgate.dpsgd.records import DPSettings
    from privgate.inputs.lm_recipe import parse_lm_recipe
    from privgate.lm.finetune import DPFineTune, finetune, load_base, perplexity

    recipe = parse_lm_recipe("base: base\nepochs: 1\n", "r.yaml", clinical)  # LoRA, the default
    texts = [json.loads(line)["text"] for line in (clinical / "members.jsonl").read_text().splitlines()][:48]
    base = load_base(recipe)
    a, tok, st = finetune(recipe, texts, seed=3, base=base)
    b, _, _ = finetune(recipe, texts, seed=3, base=base)
    c, _, _ = finetune(recipe, texts, seed=4, base=base)
    sa, sb, sc = a.state_dict(), b.state_dict(), c.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa) and not all(torch.equal(sa[k], sc[k]) for k in sa)
    assert st.dp is None and st.steps == 3 and 0 < st.trainable_parameters < sum(p.numel() for p in a.parameters())
    assert all(torch.equal(p, q) for p, q in zip(base[0].parameters(), load_base(recipe)[0].parameters()))  # untouched
    assert perplexity(a, tok, texts, max_length=64) < perplexity(base[0], tok, texts, max_length=64)
    s = DPSettings(epochs=2, batch_size=16, max_grad_norm=1.0, delta=1e-3)
    _, _, dp = finetune(recipe, texts, seed=3, base=base, dp=DPFineTune(s, 1.0, None))
    q, steps = sampling(len(texts), 16, 2)
    assert (dp.dp.sample_rate, dp.dp.steps, dp.dp.noise_multiplier) == (q, steps, 1.0)
    assert abs(dp.dp.epsilon - compose([Run(1.0, q, steps)], 1e-3).epsilon) < 1e-9
