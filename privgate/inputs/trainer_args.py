"""A recipe's ``training_arguments:`` block: the Hugging Face ``TrainingArguments`` a team fine-tuned with.

References fine-tuned like the target: Carlini et al. (2022), arXiv 2112.03570;
Zarifzadeh et al. (2024), arXiv 2312.03262.

The rest (design, limits, derivations): docs/internals-inputs.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from privgate.errors import RecipeError
from privgate.inputs.yamlsafe import locate

if TYPE_CHECKING:
    import yaml

_BLOCK = "training_arguments"

#: ``TrainingArguments`` field → the recipe's field, with the ``Trainer``'s default.
MAPPED: dict[str, tuple[str, object]] = {
    "num_train_epochs": ("epochs", 3),
    "learning_rate": ("learning_rate", 5e-5),
    "per_device_train_batch_size": ("batch_size", 8),
    "gradient_accumulation_steps": ("gradient_accumulation_steps", 1),
    "weight_decay": ("weight_decay", 0.0),
    "lr_scheduler_type": ("lr_scheduler_type", "linear"),
    "warmup_steps": ("warmup_steps", 0),
    "warmup_ratio": ("warmup_ratio", 0.0),
    "max_grad_norm": ("max_grad_norm", 1.0),
    "adam_beta1": ("adam_beta1", 0.9),
    "adam_beta2": ("adam_beta2", 0.999),
    "adam_epsilon": ("adam_epsilon", 1e-8),
}

#: Fields that do not change the weights a run ends with (accepted, listed in the recipe's notes).
# fmt: off
IGNORED = frozenset((
    "output_dir", "overwrite_output_dir", "do_train", "do_eval", "do_predict", "eval_strategy",
    "evaluation_strategy", "eval_steps", "per_device_eval_batch_size", "eval_accumulation_steps", "eval_delay",
    "logging_dir", "logging_strategy", "logging_steps", "logging_first_step", "logging_nan_inf_filter",
    "save_strategy", "save_steps", "save_total_limit", "save_safetensors", "save_only_model",
    "load_best_model_at_end", "metric_for_best_model", "greater_is_better", "report_to", "run_name", "push_to_hub",
    "hub_model_id", "hub_strategy", "hub_token", "hub_private_repo", "disable_tqdm", "dataloader_num_workers",
    "dataloader_pin_memory", "dataloader_persistent_workers", "dataloader_prefetch_factor", "remove_unused_columns",
    "label_names", "seed", "data_seed", "include_num_input_tokens_seen", "prediction_loss_only", "log_level",
    "log_level_replica", "use_cpu", "no_cuda", "local_rank", "ddp_backend", "ddp_find_unused_parameters",
    "skip_memory_metrics",
))
# fmt: on

#: Values of ``optim`` that are torch's AdamW (what the recipe's fine-tune runs).
ADAMW = frozenset({"adamw_torch", "adamw_torch_fused", "adamw_hf", "adamw"})

#: Fields accepted at their harmless values only (the value the recipe's fine-tune reproduces).
AT_VALUE: dict[str, tuple[object, ...]] = {
    "fp16": (False,),
    "bf16": (False,),
    "tf32": (None, False, True),
    "label_smoothing_factor": (0, 0.0),
    "max_steps": (-1,),
    "gradient_checkpointing": (False, True),  # recomputes activations: the same gradients
    "group_by_length": (False,),
    "lr_scheduler_kwargs": (None, {}),
    "neftune_noise_alpha": (None,),
}


def merge_training_arguments(
    data: dict[str, Any], source: str, tree: yaml.Node | None = None
) -> tuple[dict[str, Any], list[str], dict[str, tuple[str, ...]]]:
    """The recipe mapping with its ``training_arguments`` block folded into the recipe's own fields.

    Returns ``(data, notes, moved)``: the mapping the recipe is validated from; one note listing the bookkeeping
    fields that were accepted without effect (none: no note); and, for each recipe field the block set, where the
    file writes it (``("training_arguments", name)``), so that a value the recipe refuses is named at its line
    (:func:`privgate.inputs.validation.describe`). ``tree``: the file's YAML nodes, for the lines.

    Raises:
        RecipeError: the block is not a mapping, names a field privgate cannot reproduce or does not know, or
            sets what the recipe's top level sets too.
    """

    def at(name: str | None = None) -> str:
        line, _ = locate(tree, (_BLOCK, name) if name else (_BLOCK,))
        return f"{source}: line {line}:" if line else f"{source}:"

    block = data.get(_BLOCK)
    if not isinstance(block, dict):
        raise RecipeError(
            f"{at()} field 'training_arguments' must be a mapping of TrainingArguments fields "
            "(learning_rate: 5.0e-5, lr_scheduler_type: cosine, …)."
        )
    out = {k: v for k, v in data.items() if k != _BLOCK}
    given = {str(k): v for k, v in block.items()}
    moved: dict[str, tuple[str, ...]] = {}
    for name, (field, default) in MAPPED.items():
        if field in out:
            if name in given:
                raise RecipeError(
                    f"{at(name)} field '{field}' and field 'training_arguments.{name}' both set it: keep one."
                )
            continue
        out[field] = _value(given.get(name, default), name, at(name))
        if name in given:
            moved[field] = (_BLOCK, name)
    if _warmup(out, given, at("warmup_steps")):
        moved["warmup_ratio"] = (_BLOCK, "warmup_steps")
    optim = given.get("optim", "adamw_torch")
    if str(optim) not in ADAMW:
        raise RecipeError(
            f"{at('optim')} field 'training_arguments.optim': {str(optim)[:60]!r} is not reproduced by privgate's "
            f"fine-tune, which runs torch's AdamW ({', '.join(sorted(ADAMW))})."
        )
    for name, allowed in AT_VALUE.items():
        if name in given and given[name] not in allowed:
            raise RecipeError(
                f"{at(name)} field 'training_arguments.{name}': {str(given[name])[:60]} changes the training in a "
                "way privgate's fine-tune does not reproduce; reference models fine-tuned without it would be "
                "unlike the target (remove it, or fine-tune the references yourself)."
            )
    unknown = sorted(set(given) - set(MAPPED) - IGNORED - set(AT_VALUE) - {"optim"})
    if unknown:
        raise RecipeError(
            f"{at(unknown[0])} field 'training_arguments.{unknown[0]}' is not a TrainingArguments setting privgate "
            "reproduces or knows to leave out"
            + (f" (nor are {', '.join(unknown[1:4])})" if len(unknown) > 1 else "")
            + "."
        )
    ignored = sorted(set(given) & IGNORED)
    notes = []
    if ignored:
        notes.append(
            "training_arguments: "
            + ", ".join(ignored)
            + " do not change the weights and are not used (privgate seeds each reference model itself)"
        )
    return out, notes, moved


def _warmup(out: dict[str, Any], given: dict[str, Any], where: str) -> bool:
    """``warmup_steps`` below 1 is a fraction of the steps (``transformers`` 5, which dropped ``warmup_ratio``):
    whether it was moved to ``warmup_ratio``."""
    steps = out.get("warmup_steps")
    if isinstance(steps, float) and "warmup_steps" in given:
        if steps < 1:
            if given.get("warmup_ratio"):
                raise RecipeError(
                    f"{where} field 'training_arguments.warmup_steps' ({steps:g}, a fraction of the steps) and "
                    "field 'training_arguments.warmup_ratio' both set the warm-up: keep one."
                )
            out["warmup_steps"], out["warmup_ratio"] = 0, steps
            return True
        if steps.is_integer():
            out["warmup_steps"] = int(steps)
    return False


def _value(value: object, name: str, where: str) -> object:
    """``num_train_epochs`` may be a float in the ``Trainer``: privgate runs whole epochs only."""
    if name == "num_train_epochs" and isinstance(value, float):
        if not value.is_integer():
            raise RecipeError(
                f"{where} field 'training_arguments.num_train_epochs': {value:g} is not a whole number of "
                "epochs, which privgate's fine-tune runs."
            )
        return int(value)
    return value


__all__ = ["ADAMW", "AT_VALUE", "IGNORED", "MAPPED", "merge_training_arguments"]
