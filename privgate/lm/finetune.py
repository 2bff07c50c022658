"""Fine-tune a causal language model from its public base: plainly, or with DP-SGD (Opacus).

:func:`finetune` is the one entry point: without ``dp`` an ordinary AdamW fine-tune (LiRA/RMIA references); with
``dp`` (:class:`DPFineTune`) DP-SGD (Abadi et al. 2016, arXiv 1607.00133) on the LoRA adapters or all weights (Yu
et al. 2022, arXiv 2110.06500; Li et al. 2022, arXiv 2110.05679): one record is the unit of privacy, Poisson
sampling makes the run (σ, q, T) for :mod:`privgate.dpsgd.accounting`. Training always starts from the recipe's public
base. A seed gives the same model on every device up to float rounding, except dropout drawn inside a fused kernel,
which :class:`FineTuneStats` notes. Details: ``docs/remediation.md``, ``docs/internals-attacks-lm.md``.
"""

from __future__ import annotations

import copy
import math
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from privgate.dpsgd.opacus_runner import make_private
from privgate.dpsgd.records import DPSettings, DPTraining
from privgate.errors import RecipeError
from privgate.inputs.lm_recipe import LMRecipe
from privgate.lm.batches import RecordUnits, encode, loss_for, targets, trim
from privgate.recipe.rng import seed_global
from privgate.training.dropout import seeded_dropout
from privgate.training.plan import dropout_seed


@dataclass(frozen=True)
class DPFineTune:
    """DP-SGD settings of a fine-tune: Opacus' clipping, Poisson sampling and noise σ.

    Attributes:
        settings: epochs, expected batch size B (q = 1/⌈N/B⌉), clip norm C, δ,
            accountant (:class:`privgate.dpsgd.train.DPSettings`); its
            ``grad_sample_mode`` is replaced by the recipe's.
        noise_multiplier: σ, e.g. calibrated by :func:`privgate.dpsgd.accounting.calibrate`
            for a target ε (σ = 0: clipping only, ε = ∞).
        target_epsilon: the ε σ was calibrated for (recorded only).
        instrument: called with Opacus' DP optimiser and q before the first step
            (the one-run audit hooks in here); ``None`` for a plain run.
    """

    settings: DPSettings
    noise_multiplier: float
    target_epsilon: float | None = None
    instrument: Callable[[Any, float], None] | None = None


@dataclass
class FineTuneStats:
    """What one fine-tune did.

    Attributes:
        mode: ``lora`` or ``full``; ``dp``: the DP-SGD record (``None`` for a plain fine-tune).
        trainable_parameters: parameters trained (the adapters' with LoRA).
        steps: optimiser steps; ``seconds``: training time (model loading excluded).
        mean_loss: mean per-record loss of the last epoch's steps.
    """

    mode: str
    n_train: int
    epochs: int
    steps: int
    trainable_parameters: int
    seconds: float
    mean_loss: float
    grad_sample_mode: str | None = None
    dp: DPTraining | None = None
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        out = {k: v for k, v in self.__dict__.items() if k != "dp"}
        out["seconds"] = round(self.seconds, 3)
        out["mean_loss"] = round(self.mean_loss, 6)
        out["dp"] = None if self.dp is None else self.dp.to_dict()
        return out


def load_base(recipe: LMRecipe) -> tuple[Any, Any]:
    """(model, tokenizer) of the recipe's public base model, read locally (a pad token set if missing)."""
    from privgate.inputs.targets.hf import load_model_dir

    lm = load_model_dir(recipe.base)
    return lm.model, lm.tokenizer


def _trainable(recipe: LMRecipe, model: Any, classifier: bool = False) -> Any:
    """The model to train: LoRA adapters on the frozen base (seeded by the caller), or all weights.

    A sequence classifier's head (``score``) is trained in full next to the adapters (PEFT's ``SEQ_CLS``).
    """
    if recipe.mode == "full":
        for p in model.parameters():
            p.requires_grad_(True)
        return model
    from peft import LoraConfig, get_peft_model

    cfg = LoraConfig(
        r=recipe.lora.r,
        lora_alpha=recipe.lora.alpha,
        lora_dropout=recipe.lora.dropout,
        target_modules=list(recipe.lora.target_modules),
        bias="none",
        task_type="SEQ_CLS" if classifier else "CAUSAL_LM",
    )
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # peft reads a transformers attribute deprecated in v5
            return get_peft_model(model, cfg)
    except ValueError as exc:  # no module matches target_modules
        raise RecipeError(f"{recipe.source}: field 'lora.target_modules': {str(exc).splitlines()[0][:200]}") from None


def grad_sample_mode(recipe: LMRecipe, model: Any) -> str:
    """The recipe's per-example gradient mode, ``auto`` resolved (``docs/remediation.md``)."""
    if recipe.grad_sample_mode != "auto":
        return recipe.grad_sample_mode
    if recipe.mode == "lora":
        return "hooks"
    tied = bool(getattr(model.config, "tie_word_embeddings", False))
    return "hooks" if tied else "ghost"


#: Fields of a ``transformers`` config whose dropout a model draws without an ``nn.Dropout`` layer.
_FUNCTIONAL_DROPOUT = ("attention_dropout", "attn_pdrop", "attention_probs_dropout_prob")


def device_draws(model: Any) -> list[str]:
    """A note when ``model`` draws dropout inside its forward pass from the device's generator (module docstring)."""
    config = getattr(model, "config", None)
    found = [f"{k} = {getattr(config, k):g}" for k in _FUNCTIONAL_DROPOUT if (getattr(config, k, 0) or 0) > 0]
    if not found:
        return []
    return [
        f"the model's attention dropout ({', '.join(found)}) is drawn inside its forward pass from the training "
        "device's generator: the same seed gives the same fine-tune on one kind of device only"
    ]


def _finish(recipe: LMRecipe, model: Any, merge: bool) -> Any:
    """A plain, eval-mode model without Opacus' hooks: adapters merged when ``merge``."""
    model.eval()
    if recipe.mode == "lora" and merge:
        model = model.merge_and_unload()
    for p in model.parameters():
        p.requires_grad_(False)
    return model.eval()


def finetune(
    recipe: LMRecipe,
    texts: Sequence[str],
    *,
    seed: int = 0,
    device: str = "cpu",
    dp: DPFineTune | None = None,
    merge: bool = True,
    base: tuple[Any, Any] | None = None,
    labels: Sequence[int] | None = None,
    users: Sequence[str] | None = None,
) -> tuple[Any, Any, FineTuneStats]:
    """Fine-tune the recipe's public base model on ``texts``; deterministic for ``seed`` on one kind of device.

    Args:
        recipe: base model, LoRA or full, epochs, learning rate, batch size, max length.
        texts: the training records (one record = one unit of privacy under DP).
        seed: drives the LoRA initialisation, batch order (Poisson draws under DP), noise and dropout.
        device: ``cpu`` or ``cuda[:i]``; the returned model is on the CPU.
        dp: DP-SGD settings (:class:`DPFineTune`); ``None``: a plain fine-tune.
        merge: return the adapters merged into the base (a plain ``transformers`` model); ``False``:
            the PEFT model (for ``save_pretrained`` of the adapter alone).
        base: an already-loaded ``(model, tokenizer)`` of ``recipe.base``, copied, never modified
            (saves reloading it for K fine-tunes).
        labels: one class per record for a sequence classifier (``recipe.base`` is then a
            ``…ForSequenceClassification`` directory); the loss is the record's cross-entropy.
        users: each record's user: under ``dp`` the unit of privacy becomes the user (Poisson over users,
            a user's records' gradients summed then clipped: :mod:`privgate.lm.userlevel`).

    Returns:
        ``(model, tokenizer, stats)``: the fine-tuned model in eval mode on the CPU, its tokenizer
        (the base's), and :class:`FineTuneStats` (with the DP record under ``dp``).

    Raises:
        RecipeError: the recipe's LoRA targets match no module of the base, or no text to train on.
    """
    if not texts:
        raise RecipeError(f"{recipe.source}: there is no text to fine-tune on.")
    model, tokenizer = (copy.deepcopy(base[0]), base[1]) if base is not None else load_base(recipe)
    model.to("cpu")  # the adapters are initialised on the CPU, from the seed, whatever the device
    dev = torch.device(device)
    x, mask = encode(tokenizer, texts, recipe.max_length)
    y = None if labels is None else torch.as_tensor(list(labels), dtype=torch.long)
    with torch.random.fork_rng(devices=[dev.index or 0] if dev.type == "cuda" else []):
        seed_global(seed)
        model = _trainable(recipe, model, classifier=y is not None)
        model.to(dev)
        params = [p for p in model.parameters() if p.requires_grad]
        n_params = sum(p.numel() for p in params)
        optimizer = torch.optim.AdamW(
            params,
            lr=recipe.learning_rate,
            weight_decay=recipe.weight_decay,
            betas=(recipe.adam_beta1, recipe.adam_beta2),
            eps=recipe.adam_epsilon,
        )
        with seeded_dropout(model, torch.Generator().manual_seed(dropout_seed(seed))):
            if dp is None:
                steps, loss, seconds = _plain(recipe, model, optimizer, x, mask, y, seed, dev)
                stats = FineTuneStats(recipe.mode, len(texts), recipe.epochs, steps, n_params, seconds, loss)
            else:
                units = RecordUnits(x, mask, y, dev) if users is None else _by_user(recipe, users, x, mask, y, dev)
                stats = _private(recipe, model, optimizer, units, seed, dp, n_params)
                if recipe.max_grad_norm is not None:
                    stats.notes.append(
                        f"the recipe's max_grad_norm {recipe.max_grad_norm:g} is not applied under DP-SGD: each "
                        f"{units.unit}'s gradient is clipped to C = {dp.settings.max_grad_norm:g} instead"
                    )
    stats.notes += device_draws(model)
    model.to("cpu")
    return _finish(recipe, model, merge), tokenizer, stats


def _plain(
    recipe: LMRecipe,
    model: Any,
    optimizer: Any,
    x: torch.Tensor,
    mask: torch.Tensor,
    y: torch.Tensor | None,
    seed: int,
    dev: torch.device,
) -> tuple[int, float, float]:
    """Shuffled batches of ``recipe.step_batch``, AdamW on the mean per-record loss: (steps, last loss, seconds).

    A step's batch is run in physical batches of ``recipe.batch_size`` (gradient accumulation, each part's loss
    weighted by its share of the records); the learning rate follows the recipe's schedule
    (:func:`scheduler`) and the batch gradient is clipped to ``recipe.max_grad_norm`` where it is set.
    """
    loss_fn = loss_for(y)
    g = torch.Generator().manual_seed(int(seed))
    n, b = len(x), min(recipe.step_batch, len(x))
    part = min(recipe.batch_size, b)
    schedule = scheduler(recipe, optimizer, recipe.epochs * math.ceil(n / b))
    params = [p for group in optimizer.param_groups for p in group["params"]]
    steps, losses, t0 = 0, [], time.perf_counter()
    model.train()
    for _ in range(recipe.epochs):
        losses = []
        order = torch.randperm(n, generator=g)
        for start in range(0, n, b):
            idx = order[start : start + b]
            optimizer.zero_grad(set_to_none=True)
            total = 0.0
            for lo in range(0, len(idx), part):
                sub = idx[lo : lo + part]
                xb, mb = trim(x[sub], mask[sub])
                xb, mb = xb.to(dev), mb.to(dev)
                yb = None if y is None else y[sub].to(dev)
                loss = loss_fn(model(input_ids=xb, attention_mask=mb).logits, targets(xb, mb, yb))
                if len(sub) < len(idx):
                    loss = loss * (len(sub) / len(idx))
                loss.backward()
                total += float(loss.detach())
            if recipe.max_grad_norm is not None:
                torch.nn.utils.clip_grad_norm_(params, recipe.max_grad_norm)
            optimizer.step()
            if schedule is not None:
                schedule.step()
            losses.append(total)
            steps += 1
    model.eval()
    return steps, float(sum(losses) / max(len(losses), 1)), time.perf_counter() - t0


def scheduler(recipe: LMRecipe, optimizer: Any, total_steps: int) -> Any:
    """The recipe's learning-rate schedule over ``total_steps`` optimiser steps, as the ``Trainer`` builds it
    (``transformers.get_scheduler``; warm-up steps = ``warmup_steps``, else ⌈``warmup_ratio`` × steps⌉);
    ``None`` for a constant rate without warm-up (the default: the optimiser alone, as before)."""
    if recipe.lr_scheduler_type == "constant":
        return None
    from transformers import get_scheduler

    warmup = recipe.warmup_steps or math.ceil(recipe.warmup_ratio * total_steps)
    return get_scheduler(
        recipe.lr_scheduler_type, optimizer, num_warmup_steps=warmup, num_training_steps=max(total_steps, 1)
    )


def _by_user(recipe: LMRecipe, users: Sequence[str], x: Any, mask: Any, y: Any, dev: torch.device) -> Any:
    """Each user one unit of privacy (:mod:`privgate.lm.userlevel`)."""
    from privgate.lm.userlevel import UserUnits

    if len(users) != len(x):
        raise RecipeError(f"{recipe.source}: {len(users)} users for {len(x)} records.")
    return UserUnits(users, x, mask, y, dev)


def _private(recipe: LMRecipe, model: Any, optimizer: Any, units: Any, seed: int, dp: DPFineTune, n_params: int):
    """DP-SGD with Opacus over ``units`` (records or users): Poisson batches, per-unit clipping, noise σ·C.

    Records are split into physical batches of ``recipe.max_physical_batch_size``; a step's users run in one
    pass, their records' gradients summed per user (module docstring).
    """
    s = dp.settings
    by_user = units.unit == "user"
    mode = "hooks" if by_user else grad_sample_mode(recipe, model)
    run = make_private(
        model, optimizer, units.dataset, settings=s, seed=seed, batch_size=min(s.batch_size, units.n),
        criterion=loss_for(units.y), grad_sample_mode=mode, noise_multiplier=dp.noise_multiplier,
        instrument=dp.instrument,
    )  # fmt: skip
    schedule = scheduler(recipe, run.optimizer, s.epochs * len(run.loader))  # post-processing: no privacy cost
    physical = None if by_user else recipe.max_physical_batch_size
    losses = run.train(units.step, s.epochs, physical, on_step=None if schedule is None else schedule.step)
    record = run.record(
        s, n_units=units.n, batch_size=min(s.batch_size, units.n), accounting="compose",
        target_epsilon=dp.target_epsilon, grad_sample_mode="hooks (per-user sums)" if by_user else mode,
    )  # fmt: skip
    run.close()
    finite = [v for v in losses if math.isfinite(v)]
    stats = FineTuneStats(
        recipe.mode, len(units.x), s.epochs, record.steps, n_params, record.seconds,
        sum(finite) / max(len(finite), 1), mode, record,
    )  # fmt: skip
    if by_user:
        stats.notes.append(f"user-level DP: {units.n} users, {len(units.x)} records; q over users")
    return stats


def perplexity(model: Any, tokenizer: Any, texts: Sequence[str], *, max_length: int) -> float:
    """Held-out perplexity: exp of the mean next-token loss over every token of ``texts`` (pooled; where ``model``
    is)."""
    import numpy as np

    from privgate.lm.scoring import score_texts

    s = score_texts(model, tokenizer, list(texts), context=max_length, moments=False)
    total = float(np.sum([v.sum() for v in s.logprob]))
    return float(math.exp(-total / max(s.tokens, 1)))


__all__ = [
    "DPFineTune",
    "FineTuneStats",
    "finetune",
    "grad_sample_mode",
    "load_base",
    "perplexity",
    "scheduler",
]
