"""A language-model recipe's numbers are finite and bounded, and a bad one is named at its line (issue 41 item 11).

``.inf`` as a weight decay, a clipping norm or LoRA's alpha passed validation (and trained to NaN weights), a batch
had no upper bound, and a value refused inside ``training_arguments:`` was named at line 1 (or at no line): the
block's fields are folded into the recipe's own before validation. Each case is refused with the file, the line of
the key as written and the key's name in the block; the CLI prints the same :class:`RecipeError` as one sentence,
exit 2 (tests/test_lm_trainer_args.py). No model is needed: the values are refused before the base is looked at.
"""

from __future__ import annotations

import pytest

from privgate.errors import RecipeError
from privgate.inputs.lm_recipe import MAX_BATCH, parse_lm_recipe

HEAD = "base: base\nmode: lora\nlora: {r: 4, alpha: 8}\n"


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ("training_arguments:\n  seed: 1\n  weight_decay: .inf\n", "line 6: field 'training_arguments.weight_decay'"),
        ("training_arguments:\n  max_grad_norm: .inf\n", "line 5: field 'training_arguments.max_grad_norm'"),
        ("training_arguments:\n  learning_rate: .nan\n", "line 5: field 'training_arguments.learning_rate'"),
        ("training_arguments:\n  seed: 3\n  warmup_steps: .inf\n", "line 6: field 'training_arguments.warmup_steps'"),
        ("weight_decay: .inf\n", "line 4: field 'weight_decay'"),
        ("lora: {r: 4, alpha: .inf}\n", "line 4: field 'lora.alpha'"),
    ],
)  # fmt: skip
def test_an_infinite_setting_is_refused_at_its_line(body, says):
    head = HEAD if not body.startswith("lora") else "base: base\nmode: lora\n\n"
    with pytest.raises(RecipeError) as err:
        parse_lm_recipe(head + body, "recipe.yaml")
    assert str(err.value).startswith(f"recipe.yaml: {says}: Input should be a finite number"), str(err.value)


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ("training_arguments:\n  per_device_train_batch_size: 1000000\n",
         "line 5: field 'training_arguments.per_device_train_batch_size'"),
        ("batch_size: 100001\n", "line 4: field 'batch_size'"),
        ("max_physical_batch_size: 10000000000000000000000\n", "line 4: field 'max_physical_batch_size'"),
    ],
)  # fmt: skip
def test_a_batch_beyond_the_records_privgate_reads_is_refused(body, says):
    with pytest.raises(RecipeError) as err:
        parse_lm_recipe(HEAD + body, "recipe.yaml")
    assert str(err.value).startswith(f"recipe.yaml: {says}: Input should be less than or equal to {MAX_BATCH}")


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ("training_arguments:\n  seed: 1\n  fp16: true\n", "line 6: field 'training_arguments.fp16': True changes"),
        ("training_arguments:\n  seed: 1\n  optim: adafactor\n", "line 6: field 'training_arguments.optim'"),
        ("training_arguments:\n  seed: 1\n  max_stepz: 3\n", "line 6: field 'training_arguments.max_stepz' is not"),
        ("training_arguments:\n  seed: 1\n  num_train_epochs: 1.5\n", "line 6: field 'training_arguments.num_train_"),
        ("epochs: 2\ntraining_arguments:\n  num_train_epochs: 3\n", "line 6: field 'epochs' and field 'training_"),
        ("training_arguments:\n  seed: 1\n  lr_scheduler_type: cosin\n", "line 6: field 'training_arguments.lr_sch"),
        ("training_arguments: [1]\n", "line 4: field 'training_arguments' must be a mapping"),
    ],
)
def test_every_refusal_in_the_block_names_the_keys_line(body, says):
    with pytest.raises(RecipeError) as err:
        parse_lm_recipe(HEAD + body, "recipe.yaml")
    assert str(err.value).startswith(f"recipe.yaml: {says}"), str(err.value)
