"""The language-model recipe's training settings under the ``Trainer``'s names (issue 35 item 4).

A ``training_arguments:`` block is a copied ``TrainingArguments`` read with the ``Trainer``'s defaults; the
schedule, warm-up, clipping, AdamW settings and gradient accumulation reach the fine-tune (plain and DP-SGD); a
recipe written before keeps its models and its cache key; what privgate cannot reproduce is one sentence, exit 2.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from cases import run_cli

pytestmark = pytest.mark.slow

RECIPE = """base: {base}
mode: lora
lora: {{r: 4, alpha: 8, target_modules: [q_proj, v_proj]}}
max_length: 64
"""


def _recipe(clinical: Path, extra: str):
    from privgate.inputs.lm_recipe import parse_lm_recipe

    return parse_lm_recipe(RECIPE.format(base=clinical / "base") + extra, "recipe.yaml")


def _texts(clinical: Path, n: int = 24) -> list[str]:
    lines = (clinical / "members.jsonl").read_text().splitlines()[:n]
    return [json.loads(line)["text"] for line in lines]


def _moved(clinical: Path, recipe, texts, **kw):
    """How far a fine-tune moved the weights from the base (the L2 norm of the merged difference), and its stats."""
    from privgate.lm.finetune import finetune, load_base

    base = load_base(recipe)
    before = {k: v.clone() for k, v in base[0].state_dict().items()}
    model, _, stats = finetune(recipe, texts, seed=3, base=base, **kw)
    after = model.state_dict()
    return float(sum(((after[k] - before[k]).float() ** 2).sum() for k in before) ** 0.5), stats


def test_a_training_arguments_block_is_read_with_the_trainers_defaults(clinical):
    r = _recipe(
        clinical,
        "training_arguments:\n  learning_rate: 3.0e-4\n  per_device_train_batch_size: 4\n"
        "  gradient_accumulation_steps: 2\n  lr_scheduler_type: cosine\n  warmup_steps: 0.1\n"
        "  num_train_epochs: 2.0\n  output_dir: out\n  logging_steps: 10\n  seed: 42\n  optim: adamw_torch_fused\n",
    )
    assert (r.learning_rate, r.batch_size, r.gradient_accumulation_steps, r.step_batch) == (3e-4, 4, 2, 8)
    assert (r.lr_scheduler_type, r.warmup_steps, r.warmup_ratio, r.epochs) == ("cosine", 0, 0.1, 2)
    # what the block left out is the Trainer's default, not privgate's: clipping at 1.0, AdamW's betas and ε
    assert (r.max_grad_norm, r.adam_beta1, r.adam_beta2, r.adam_epsilon, r.weight_decay) == (1.0, 0.9, 0.999, 1e-8, 0)
    assert r.notes == [
        "training_arguments: logging_steps, output_dir, seed do not change the weights and are not used "
        "(privgate seeds each reference model itself)"
    ]
    assert r.describe()["notes"] == r.notes and "cosine schedule" in r.optimiser_text()
    defaults = _recipe(clinical, "training_arguments: {}\n")  # an empty block: the Trainer's defaults throughout
    assert (defaults.learning_rate, defaults.lr_scheduler_type, defaults.epochs, defaults.batch_size) == (
        5e-5,
        "linear",
        3,
        8,
    )
    plain = _recipe(clinical, "")  # no block: privgate's defaults, as recipes written before
    assert (plain.lr_scheduler_type, plain.max_grad_norm, plain.gradient_accumulation_steps) == ("constant", None, 1)


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        ("training_arguments:\n  fp16: true\n", "field 'training_arguments.fp16'"),
        ("training_arguments:\n  label_smoothing_factor: 0.1\n", "field 'training_arguments.label_smoothing_factor'"),
        ("training_arguments:\n  optim: adafactor\n", "'adafactor' is not reproduced"),
        ("training_arguments:\n  max_stepz: 3\n", "field 'training_arguments.max_stepz' is not a TrainingArguments"),
        ("epochs: 2\ntraining_arguments:\n  num_train_epochs: 3\n", "field 'epochs' and field 'training_arguments"),
        ("training_arguments:\n  num_train_epochs: 1.5\n", "1.5 is not a whole number of epochs"),
        ("training_arguments: [1, 2]\n", "field 'training_arguments' must be a mapping"),
        ("lr_scheduler_type: reduce_lr_on_plateau\n", "lr_scheduler_type"),
        ("max_grad_norm: 0\n", "max_grad_norm"),
    ],
)
def test_what_the_fine_tune_cannot_reproduce_is_one_sentence(clinical, extra, says):
    from privgate.errors import RecipeError

    with pytest.raises(RecipeError) as err:
        _recipe(clinical, extra)
    text = str(err.value)
    assert says in text and text.startswith("recipe.yaml") and "\n" not in text.strip()


def test_the_cli_refuses_a_training_argument_it_cannot_reproduce(clinical, tmp_path):
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(RECIPE.format(base=clinical / "base") + "training_arguments:\n  fp16: true\n")
    r = run_cli(
        "check", str(clinical / "memorised"), "--policy", "internal", "--members", str(clinical / "members.jsonl"),
        "--nonmembers", str(clinical / "nonmembers.jsonl"), "--recipe", str(recipe), "--json", str(tmp_path / "r.json"),
    )  # fmt: skip
    assert r.returncode == 2, r.stdout + r.stderr
    assert "training_arguments.fp16" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "r.json").exists()


def test_an_old_recipe_keeps_its_cache_key(clinical):
    """The settings added here are left out of the key at their defaults: a cache filled before still serves."""
    from privgate.lm.references import recipe_fingerprint

    plain = _recipe(clinical, "")
    old_form = plain.model_dump_json(
        exclude={"base", "heldout", "source", "merge", "max_physical_batch_size", "notes"}
        | set(__import__("privgate.inputs.lm_recipe", fromlist=["x"]).TRAINER_DEFAULTS_OFF)
    )
    assert json.dumps(plain.training_settings(), separators=(",", ":"), ensure_ascii=False) == old_form
    cosine = _recipe(clinical, "lr_scheduler_type: cosine\n")
    assert recipe_fingerprint(plain, "d") != recipe_fingerprint(cosine, "d")


def test_the_schedule_clipping_and_accumulation_reach_the_fine_tune(clinical):
    texts = _texts(clinical)
    epochs = "epochs: 2\nlearning_rate: 0.01\nbatch_size: 8\n"
    constant, _ = _moved(clinical, _recipe(clinical, epochs), texts)
    # a warm-up longer than the run keeps the rate near 0 throughout: the weights barely move
    warm, _ = _moved(
        clinical, _recipe(clinical, epochs + "lr_scheduler_type: constant_with_warmup\nwarmup_steps: 100000\n"), texts
    )
    assert constant > 0.05 and warm < constant * 1e-3, (constant, warm)
    cosine, _ = _moved(clinical, _recipe(clinical, epochs + "lr_scheduler_type: cosine\nwarmup_ratio: 0.5\n"), texts)
    assert cosine != pytest.approx(constant, rel=1e-3)
    # clipping the batch gradient to a tiny norm: AdamW normalises the step, so the model still moves — but
    # differently; at the recipe's own rate the two runs part
    clipped, _ = _moved(clinical, _recipe(clinical, epochs + "max_grad_norm: 1.0e-6\n"), texts)
    assert clipped != pytest.approx(constant, rel=1e-3)
    # 4 records x 2 accumulated batches is one step of 8 records: the same model up to float rounding
    from privgate.lm.finetune import finetune, load_base

    r8 = _recipe(clinical, epochs)
    r4x2 = _recipe(clinical, "epochs: 2\nlearning_rate: 0.01\nbatch_size: 4\ngradient_accumulation_steps: 2\n")
    r4 = _recipe(clinical, "epochs: 2\nlearning_rate: 0.01\nbatch_size: 4\n")
    base = load_base(r8)
    m8, _, s8 = finetune(r8, texts, seed=3, base=base)
    m4x2, _, s4x2 = finetune(r4x2, texts, seed=3, base=base)
    m4, _, s4 = finetune(r4, texts, seed=3, base=base)
    assert s8.steps == s4x2.steps == 6 and s4.steps == 12
    w8, w4x2, w4 = (dict(m.state_dict()) for m in (m8, m4x2, m4))
    assert all(torch.allclose(w8[k], w4x2[k], atol=1e-5) for k in w8)
    assert not all(torch.allclose(w8[k], w4[k], atol=1e-5) for k in w8)


def test_a_dp_fine_tune_follows_the_schedule_and_says_clipping_is_dp_sgds(clinical):
    from privgate.dpsgd.records import DPSettings
    from privgate.lm.finetune import DPFineTune

    texts = _texts(clinical, 40)
    dp = DPFineTune(DPSettings(epochs=2, batch_size=8, max_grad_norm=1.0, delta=1e-3), noise_multiplier=0.5)
    base = "learning_rate: 0.01\nmax_grad_norm: 0.5\n"
    plain = _recipe(clinical, base)
    warm = _recipe(clinical, base + "lr_scheduler_type: constant_with_warmup\nwarmup_steps: 100000\n")
    moved, a = _moved(clinical, plain, texts, dp=dp)
    still, b = _moved(clinical, warm, texts, dp=dp)
    assert moved > 0.05 and still < moved * 1e-3, (moved, still)
    # the schedule is post-processing of the noisy gradients: the same σ, q, T and ε
    assert (a.dp.epsilon, a.dp.steps, a.dp.sample_rate) == (b.dp.epsilon, b.dp.steps, b.dp.sample_rate)
    assert any("max_grad_norm 0.5 is not applied under DP-SGD" in n for n in a.notes)


def test_reference_models_fine_tuned_like_a_trainer_run(clinical, tmp_path):
    """LiRA's references fine-tuned by a copied TrainingArguments: the report shows the schedule and the notes."""
    from privgate import check

    (tmp_path / "policy.yaml").write_text(
        "name: lm-trainer\nsensitivity: internal\nrelease: api\nattacks: {lm_lira: {models: 2}, lm_loss: {}}\n"
        "checks:\n  - {id: lira-auc, attack: lm_lira, metric: auc, max: 0.6}\n"
    )
    (tmp_path / "recipe.yaml").write_text(
        RECIPE.format(base=clinical / "base")
        + "training_arguments:\n  num_train_epochs: 2\n  learning_rate: 5.0e-3\n  per_device_train_batch_size: 16\n"
        "  lr_scheduler_type: cosine\n  warmup_steps: 0.1\n  output_dir: runs/x\n"
    )
    rep = check(
        str(clinical / "memorised"), str(tmp_path / "policy.yaml"), str(clinical / "members.jsonl"),
        str(clinical / "nonmembers.jsonl"), population=str(clinical / "population.jsonl"),
        recipe=str(tmp_path / "recipe.yaml"), threads=1,
    )  # fmt: skip
    recipe = rep.target["recipe"]
    assert (recipe["lr_scheduler_type"], recipe["warmup_ratio"], recipe["max_grad_norm"]) == ("cosine", 0.1, 1.0)
    assert recipe["notes"] and "output_dir" in recipe["notes"][0]
    lira = next(a for a in rep.attacks if a.name == "lm_lira")
    assert lira.status == "ran" and lira.auc > 0.9 and rep.verdict == "fail"
