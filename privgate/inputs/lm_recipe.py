"""The fine-tuning recipe of a language model: which public base model, LoRA or all weights, how long, how fast.

DP fine-tuning: Yu et al. (2022), arXiv 2110.06500; Li et al. (2022), arXiv 2110.05679.

The rest (design, limits, derivations): docs/internals-inputs.md.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from privgate.errors import RecipeError

RECIPE_SUFFIXES = (".yaml", ".yml")

#: The ``Trainer``'s schedules that need nothing but the step count (``transformers.SchedulerType``).
SchedulerName = Literal[
    "constant", "constant_with_warmup", "linear", "cosine", "cosine_with_restarts", "polynomial", "inverse_sqrt"
]

#: The settings added with the ``Trainer``'s names, at the values that fine-tune as recipes written before them did.
TRAINER_DEFAULTS_OFF: dict[str, object] = {
    "lr_scheduler_type": "constant",
    "warmup_steps": 0,
    "warmup_ratio": 0.0,
    "max_grad_norm": None,
    "adam_beta1": 0.9,
    "adam_beta2": 0.999,
    "adam_epsilon": 1e-8,
    "gradient_accumulation_steps": 1,
}

#: Most records a step (``batch_size``) or a forward pass may hold: the records a text file holds by default
#: (privgate.inputs.text.MAX_RECORDS); a larger batch than every record is a typo, not a setting.
MAX_BATCH = 100_000

#: Every linear layer of a Llama block: LoRA on all of them learns most (Hu et al. 2021, arXiv 2106.09685, §7.1).
LLAMA_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


class LoraSettings(BaseModel):
    """LoRA adapters (Hu et al. 2021, "LoRA: low-rank adaptation of large language models", arXiv 2106.09685)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    r: int = Field(8, ge=1, le=1024, description="rank of the update matrices")
    alpha: float = Field(16.0, gt=0, description="scale: the update is multiplied by alpha / r")
    dropout: float = Field(0.0, ge=0.0, lt=1.0, description="dropout on the adapters' input")
    target_modules: list[str] = Field(default_factory=lambda: list(LLAMA_MODULES), min_length=1)


class LMRecipe(BaseModel):
    """How a causal language model is fine-tuned from its public base (module docstring).

    Attributes:
        base: the public base model's ``save_pretrained`` directory (resolved
            relative to the recipe file by :func:`load_lm_recipe`).
        mode: ``lora`` trains LoRA adapters only (merged into the base when
            written); ``full`` trains every weight.
        lora: the adapters' settings (ignored with ``mode: full``).
        epochs: passes over the training text.
        learning_rate: AdamW's learning rate.
        weight_decay: AdamW's weight decay.
        batch_size: records per step (the expected batch under DP-SGD's Poisson sampling).
        max_physical_batch_size: most records per forward/backward pass (memory only; same result).
        max_length: records are truncated to this many tokens.
        heldout: text the model never trains on, for the held-out perplexity (utility floor).
        grad_sample_mode: how DP-SGD gets per-example gradient norms: ``hooks``
            (materialised per-example gradients, small for LoRA), ``ghost``
            (ghost clipping: norms without materialising them; Li et al. 2022,
            arXiv 2110.05679), ``auto`` (hooks for LoRA, ghost for all weights
            unless the embeddings are tied to the output layer, which ghost
            clipping cannot split).
        merge: write the hardened model with the adapters merged into the base (default), or the adapter
            directory that names the base.
        user_field: the field (``.jsonl``) or column (``.csv``) naming each training record's user: DP
            fine-tuning is then user-level (:mod:`privgate.lm.userlevel`); ``--user-field`` overrides it.
        lr_scheduler_type: the learning rate's schedule over the run's optimiser steps, by the ``Trainer``'s name
            (``transformers.get_scheduler``): ``constant`` (privgate's default; the ``Trainer``'s is ``linear``),
            ``constant_with_warmup``, ``linear``, ``cosine``, ``cosine_with_restarts``, ``polynomial``,
            ``inverse_sqrt``.
        warmup_steps, warmup_ratio: linear warm-up from 0 over this many steps (or this fraction of them;
            ``warmup_steps`` wins when both are given, as in the ``Trainer``).
        max_grad_norm: clip the batch gradient's norm to this before each step (``None``: no clipping). Under
            DP-SGD each record's gradient is clipped to the policy's C instead; this setting is then not applied.
        adam_beta1, adam_beta2, adam_epsilon: AdamW's moment decay rates and ε.
        gradient_accumulation_steps: a step's batch is ``batch_size`` records from each of this many physical
            batches (the ``Trainer``'s per-device batch times accumulation); the effective batch is
            :attr:`step_batch`.
        notes: what a ``training_arguments:`` block held that does not change the training (output folders,
            logging, saving), set by the reader; shown in the report.
    """

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)  # .inf is no weight decay, clipping norm or scale

    base: Path
    mode: Literal["lora", "full"] = "lora"
    lora: LoraSettings = Field(default_factory=LoraSettings)
    epochs: int = Field(3, ge=1, le=1000)
    learning_rate: float = Field(5e-3, gt=0, le=10)
    weight_decay: float = Field(0.0, ge=0)
    batch_size: int = Field(16, ge=1, le=MAX_BATCH)
    max_physical_batch_size: int = Field(16, ge=1, le=MAX_BATCH)
    max_length: int = Field(128, ge=4, le=1_000_000)
    heldout: Path | None = None
    grad_sample_mode: Literal["auto", "hooks", "ghost"] = "auto"
    merge: bool = True
    user_field: str | None = Field(None, min_length=1, max_length=200)
    lr_scheduler_type: SchedulerName = "constant"
    warmup_steps: int = Field(0, ge=0, le=10_000_000)
    warmup_ratio: float = Field(0.0, ge=0.0, le=1.0)
    max_grad_norm: float | None = Field(None, gt=0)
    adam_beta1: float = Field(0.9, ge=0.0, lt=1.0)
    adam_beta2: float = Field(0.999, ge=0.0, lt=1.0)
    adam_epsilon: float = Field(1e-8, gt=0.0, le=1.0)
    gradient_accumulation_steps: int = Field(1, ge=1, le=100_000)
    notes: list[str] = Field(default_factory=list, exclude=True)
    source: str = Field("<recipe>", exclude=True)

    @property
    def step_batch(self) -> int:
        """Records per optimiser step of a plain fine-tune: ``batch_size`` × ``gradient_accumulation_steps``."""
        return self.batch_size * self.gradient_accumulation_steps

    def training_settings(self) -> dict[str, object]:
        """What decides a fine-tune's weights, for cache keys: a setting added after a recipe was written is left
        out while it has its default, so such a recipe keeps the key (and the cached models) it had."""
        out = self.model_dump(mode="json", exclude={"base", "heldout", "source", "merge", "max_physical_batch_size"})
        for name, default in TRAINER_DEFAULTS_OFF.items():
            if out.get(name) == default:
                out.pop(name)
        return out

    def optimiser_text(self) -> str:
        """The optimiser and its schedule in words, for the DP statement and the report."""
        text = f"AdamW, learning rate {self.learning_rate:g}"
        if self.weight_decay:
            text += f", weight decay {self.weight_decay:g}"
        if self.lr_scheduler_type != "constant":
            text += f", {self.lr_scheduler_type} schedule"
            if self.warmup_steps or self.warmup_ratio:
                warm = f"{self.warmup_steps} steps" if self.warmup_steps else f"{self.warmup_ratio:g} of the steps"
                text += f" after a linear warm-up over {warm}"
        if self.gradient_accumulation_steps > 1:
            text += f", {self.step_batch} records a step ({self.gradient_accumulation_steps} accumulated batches)"
        return text

    @property
    def name(self) -> str:
        """How reports name the recipe."""
        return Path(self.source).name if self.source != "<recipe>" else f"LM {self.mode} fine-tune of {self.base.name}"

    def describe(self) -> dict[str, object]:
        """The recipe as the report shows it."""
        out = self.model_dump(mode="json")
        out["source"] = self.source
        if self.notes:
            out["notes"] = list(self.notes)
        return out


def is_lm_recipe(spec: object) -> bool:
    """Whether ``spec`` names a language-model recipe file (a ``.yaml``/``.yml`` path) or is one."""
    return isinstance(spec, LMRecipe) or (isinstance(spec, (str, Path)) and Path(str(spec)).suffix in RECIPE_SUFFIXES)


def parse_lm_recipe(text: str, source: str = "<recipe>", base: Path | None = None) -> LMRecipe:
    """Parse recipe YAML; paths (``base``, ``heldout``) are relative to ``base`` (the recipe's folder)."""
    from privgate.inputs.validation import describe
    from privgate.inputs.yamlsafe import load_yaml

    data, tree = load_yaml(text, source, RecipeError)
    if not isinstance(data, dict):
        raise RecipeError(f"{source}: a language-model recipe must be a YAML mapping with at least 'base'.")
    notes: list[str] = []
    moved: dict[str, tuple[str, ...]] = {}  # a field set in training_arguments: where the file writes it
    if "training_arguments" in data:
        from privgate.inputs.trainer_args import merge_training_arguments

        data, notes, moved = merge_training_arguments(data, source, tree)
    try:
        recipe = LMRecipe.model_validate(data)
    except ValidationError as exc:
        raise RecipeError(describe(exc, tree, source, LMRecipe, moved)) from None
    folder = base if base is not None else Path.cwd()
    fix = {"base": recipe.base if recipe.base.is_absolute() else folder / recipe.base, "source": source, "notes": notes}
    if recipe.heldout is not None and not recipe.heldout.is_absolute():
        fix["heldout"] = folder / recipe.heldout
    recipe = recipe.model_copy(update=fix)
    if not (recipe.base / "config.json").is_file():
        raise RecipeError(
            f"{source}: field 'base': {recipe.base} is not a model directory with config.json (the public base "
            "model the fine-tuning starts from)."
        )
    if recipe.heldout is not None and not recipe.heldout.is_file():
        raise RecipeError(f"{source}: field 'heldout': {recipe.heldout} is not a file.")
    from privgate.inputs.targets.hf_folder import read_folder

    read_folder(recipe.base)  # a base folder that names code or is oversized: refused before any work
    return recipe


def load_lm_recipe(path: str | Path) -> LMRecipe:
    """Load a recipe file (module docstring); one :class:`RecipeError` sentence for every problem."""
    from privgate.inputs.textfile import read_limited

    p = Path(path)
    if not p.is_file():
        raise RecipeError(f"{p}: language-model recipe file not found.")
    return parse_lm_recipe(read_limited(p, "recipe file", RecipeError), str(p), p.parent)


__all__ = [
    "LLAMA_MODULES",
    "MAX_BATCH",
    "TRAINER_DEFAULTS_OFF",
    "LMRecipe",
    "LoraSettings",
    "SchedulerName",
    "is_lm_recipe",
    "load_lm_recipe",
    "parse_lm_recipe",
]
