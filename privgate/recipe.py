"""Recipe: how the target was trained, so privgate can train "another model like it".

A recipe is given as a Python entry point ``module:attr`` whose attribute is a
:class:`Recipe`, a zero-argument callable returning one, or the team's own
training function ``train(x, y, seed, device) -> nn.Module`` (wrapped as
``Recipe(train_fn=train)``, :mod:`privgate.training.function`). Reference and
shadow models, and DP-SGD retraining, all train through :meth:`Recipe.train`:
one training loop, used everywhere.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import torch
from torch import nn

from privgate.errors import RecipeError
from privgate.inputs import outputs
from privgate.training.rng import seed_global, seeded


@dataclass(frozen=True)
class DPSGD:
    """DP-SGD as Opacus runs it with Poisson sampling, described for the vectorised engine.

    Per step every training row is drawn independently with probability
    q = 1 / steps_per_epoch(n); each drawn row's gradient is clipped to norm
    ``max_grad_norm``; the clipped sum gets Gaussian noise of standard deviation
    ``noise_multiplier · max_grad_norm`` per coordinate and is divided by the
    expected batch size ``int(n · q)`` (Abadi et al. 2016, arXiv 1607.00133;
    Opacus' ``DPOptimizer``, Yousefpour et al. 2021, arXiv 2109.12298).
    """

    noise_multiplier: float
    max_grad_norm: float
    steps_per_epoch: int | None  # None: ceil(n / batch_size)
    batch_size: int

    def steps(self, n: int) -> int:
        """Poisson batches per epoch for ``n`` rows: the length of the DataLoader Opacus replaces."""
        batch = math.ceil(n / self.steps_per_epoch) if self.steps_per_epoch else min(self.batch_size, n)
        return math.ceil(n / batch)

    def expected_batch(self, n: int) -> int:
        """Opacus' ``expected_batch_size``: ``int(n · q)`` with q = 1 / steps."""
        return int(n * (1.0 / self.steps(n)))


@dataclass(frozen=True)
class Augment:
    """Data augmentation of image rows ``[C, H, W]``, as the target was trained (:mod:`privgate.training.augment`).

    Args:
        crop_padding: pad each image by this many pixels on every side and crop a
            random window of the original size back (0: no crop). torchvision's
            ``RandomCrop(size, padding=p)``.
        flip: mirror each image left-right with probability ½
            (``RandomHorizontalFlip()``).
        padding_mode: ``"zeros"`` or ``"reflect"``, how the crop pads.
        transform: your own tensor transform ``transform(batch, generator) -> batch``,
            applied to every mini-batch (after crop and flip) on the training
            device; it must draw its random numbers from ``generator`` (a seeded
            CPU ``torch.Generator``) so each model's augmentation is fixed by its
            seed, and return a batch of the same shape.
    """

    crop_padding: int = 0
    flip: bool = False
    padding_mode: Literal["zeros", "reflect"] = "zeros"
    transform: Callable[[torch.Tensor, torch.Generator], torch.Tensor] | None = None


OPTIMIZERS = ("adam", "adamw", "sgd")
PRECISIONS = ("fp32", "bf16")
#: Settings that describe training beyond "optimiser, learning rate, epochs, batch", with the value that turns them
#: off: recipes written before they existed have these values and train exactly as before.
TRAINING_DEFAULTS: dict[str, Any] = {
    "schedule": "constant",
    "warmup_steps": 0,
    "warmup_fraction": 0.0,
    "lr_step_epochs": 30,
    "lr_gamma": 0.1,
    "min_lr": 0.0,
    "betas": (0.9, 0.999),
    "nesterov": False,
    "label_smoothing": 0.0,
    "clip_grad_norm": None,
    "precision": "fp32",
    "augment": None,
}


@dataclass
class Recipe:
    """Everything needed to train a model like the target.

    The first fields say what every recipe says; the rest describe how teams
    really train (learning-rate schedules, AdamW, label smoothing, gradient
    clipping, bf16, augmentation) and default to what turns them off. Both
    :meth:`train` and the vectorised engine (:mod:`privgate.training.engine`)
    apply every one of them, the same way.

    Args:
        model_factory: builds a fresh, untrained ``nn.Module`` that outputs logits
            (``[n, K]``, or one logit ``[n]``/``[n, 1]`` for a binary task trained with
            BCE-with-logits; rows of probabilities are trained on their log). Required
            unless ``train_fn`` is given.
        train_fn: your own training loop, ``train(x, y, seed, device) -> nn.Module``:
            called once per reference model instead of privgate's loop
            (:mod:`privgate.training.function`); the settings below then only
            describe it (``augment`` decides LiRA's and RMIA's augmented queries,
            :mod:`privgate.attacks.views`) and the engine cannot stack it.
        epochs: passes over the training set.
        batch_size: mini-batch size.
        lr: learning rate (the peak rate of a schedule).
        optimizer: ``"adam"``, ``"adamw"`` (decoupled weight decay, Loshchilov &
            Hutter 2017, arXiv 1711.05101) or ``"sgd"``, with ``torch.optim``'s update rules.
        momentum: SGD momentum.
        weight_decay: L2 penalty added to the gradient (Adam, SGD), or AdamW's
            decoupled decay ``p ← p·(1 − lr·weight_decay)``.
        pretrained: optional path of a *public* state_dict to start from.
        name: shown in reports.
        extra: free-form facts for the report.
        schedule: ``"constant"``, ``"step"``, ``"cosine"`` or ``"one-cycle"``: the
            learning rate of every step (:mod:`privgate.training.schedules`).
        warmup_steps: a linear warm-up of this many optimiser steps first.
        warmup_fraction: or of this fraction of all steps (give one of the two).
        lr_step_epochs: ``"step"``: multiply the rate by ``lr_gamma`` every this many epochs.
        lr_gamma: ``"step"``: the factor.
        min_lr: ``"cosine"``: the rate it anneals to.
        betas: Adam's and AdamW's (β1, β2).
        nesterov: Nesterov momentum for SGD (needs ``momentum > 0``).
        label_smoothing: cross-entropy against ``(1 − ε)·one-hot + ε/K`` (Szegedy
            et al. 2015, arXiv 1512.00567), as ``CrossEntropyLoss(label_smoothing=ε)``.
        clip_grad_norm: rescale each step's whole gradient to at most this
            L2 norm (``torch.nn.utils.clip_grad_norm_``); None: no clipping.
        precision: ``"fp32"``, or ``"bf16"`` for the forward pass under
            ``torch.autocast(dtype=torch.bfloat16)`` (GPU, and CPU where torch supports it).
        augment: an :class:`Augment` (random crops, flips, your own transform), or None.
    """

    model_factory: Callable[[], nn.Module] | None = None
    epochs: int = 30
    batch_size: int = 64
    lr: float = 1e-3
    optimizer: Literal["adam", "adamw", "sgd"] = "adam"
    momentum: float = 0.0
    weight_decay: float = 0.0
    pretrained: str | None = None
    name: str = "recipe"
    extra: dict[str, Any] = field(default_factory=dict)
    schedule: Literal["constant", "step", "cosine", "one-cycle"] = "constant"
    warmup_steps: int = 0
    warmup_fraction: float = 0.0
    lr_step_epochs: int = 30
    lr_gamma: float = 0.1
    min_lr: float = 0.0
    betas: tuple[float, float] = (0.9, 0.999)
    nesterov: bool = False
    label_smoothing: float = 0.0
    clip_grad_norm: float | None = None
    precision: Literal["fp32", "bf16"] = "fp32"
    augment: Augment | None = None
    train_fn: Callable[..., nn.Module] | None = None

    def __post_init__(self) -> None:
        from privgate.training.recipe_check import check_recipe

        check_recipe(self)

    def settings_in_use(self) -> list[str]:
        """The training settings this recipe sets beyond the plain loop (:data:`TRAINING_DEFAULTS`), by name."""
        return [k for k, v in TRAINING_DEFAULTS.items() if getattr(self, k) != v]

    def build(self, seed: int | None = None) -> nn.Module:
        """A fresh model (from the public pre-trained start when the recipe names one).

        With ``seed``, the factory runs under ``torch.manual_seed(seed)`` in a
        forked generator, so the same seed gives the same initial weights and
        the caller's random state is untouched; no other thread seeds torch's
        global generator meanwhile (:mod:`privgate.training.rng`). Any failure of the user's
        factory is a :class:`RecipeError`, as is a recipe of a training function that gives no factory.
        """
        if self.model_factory is None:
            raise RecipeError(
                f"recipe '{self.name}': trains with its own function and has no model_factory, so privgate cannot "
                "build its model (a state_dict checkpoint and DP-SGD retraining need one: give "
                "Recipe(train_fn=..., model_factory=...), or save the target as TorchScript)."
            )
        try:
            with seeded(seed):
                model = self.model_factory()
        except RecipeError:
            raise
        except Exception as exc:
            raise RecipeError(
                f"recipe '{self.name}': building the model failed ({exc.__class__.__name__}: {exc})."
            ) from None
        if not isinstance(model, nn.Module):
            raise RecipeError(
                f"recipe '{self.name}': model_factory returned {type(model).__name__}, not a torch.nn.Module."
            )
        if self.pretrained:
            state = torch.load(self.pretrained, map_location="cpu", weights_only=True)
            model.load_state_dict(state)
        return model

    @property
    def own_loop(self) -> bool:
        """Whether :meth:`train` calls the user's ``train_fn`` (a subclass overriding ``train`` does not)."""
        return self.train_fn is not None and type(self).train is Recipe.train

    @property
    def vectorisable(self) -> bool:
        """Whether :mod:`privgate.training.engine` may train many copies of this recipe at once.

        True for the plain recipe, whose :meth:`train` loop the vectorised engine
        replicates; a subclass that overrides :meth:`train` (e.g. DP-SGD training)
        or a recipe of the user's own ``train_fn`` is trained by calling its
        :meth:`train` once per model instead. Subclasses may also override this property.
        """
        return type(self).train is Recipe.train and self.train_fn is None

    @property
    def dp_sgd(self) -> DPSGD | None:
        """The DP-SGD this recipe trains with, when :meth:`train` is DP-SGD; None for plain training.

        A recipe that returns a :class:`DPSGD` lets the vectorised engine train
        its MLPs at once with the same mechanism (:mod:`privgate.training.mlp`).
        """
        return None

    def make_optimizer(self, params: Any) -> torch.optim.Optimizer:
        """The recipe's ``torch.optim`` optimiser over ``params``, at the recipe's (peak) learning rate."""
        if self.optimizer == "adam":
            return torch.optim.Adam(params, lr=self.lr, betas=self.betas, weight_decay=self.weight_decay)
        if self.optimizer == "adamw":
            return torch.optim.AdamW(params, lr=self.lr, betas=self.betas, weight_decay=self.weight_decay)
        if self.optimizer == "sgd":
            return torch.optim.SGD(
                params, lr=self.lr, momentum=self.momentum, weight_decay=self.weight_decay, nesterov=self.nesterov
            )
        raise RecipeError(
            f"recipe '{self.name}': unknown optimizer '{self.optimizer}' (use {', '.join(map(repr, OPTIMIZERS))})."
        )

    def train(
        self,
        x: np.ndarray,
        y: np.ndarray,
        seed: int = 0,
        model: nn.Module | None = None,
        device: str | torch.device | None = None,
    ) -> nn.Module:
        """Train a model on (x, y) with this recipe; deterministic for a given seed.

        A recipe with a ``train_fn`` calls it instead, checked
        (:func:`privgate.training.function.call_training_function`); the rest of
        this docstring is privgate's own loop.

        Model k of the vectorised engine (:mod:`privgate.training.engine`) is
        trained exactly like this: initialised by ``build(seed)``, batches in
        ``randperm`` order from a generator seeded with ``seed``, dropout masks
        from a generator seeded with :func:`~privgate.training.plan.dropout_seed`
        (:mod:`privgate.training.dropout`), crops, flips and the augmentation
        transform's draws from generators seeded from ``seed``
        (:mod:`privgate.training.augment`), any other random draw of the
        forward pass from torch's generator seeded the same way (and restored
        after). Each step: augment the batch, forward pass (under bf16 autocast
        when ``precision="bf16"``), cross-entropy (label-smoothed), backward pass,
        gradient clipping, the optimiser's step, then the learning-rate
        scheduler's step (:mod:`privgate.training.schedules`).

        Args:
            x: inputs, float array with the model's input shape per row.
            y: integer class labels.
            seed: drives initialisation, batch order, dropout masks and augmentation.
            model: train this module instead of a fresh one (DP training passes
                an Opacus-wrapped module through its own loop instead).
            device: where to train (``"cpu"``, ``"cuda"``); default the CPU. The
                model is returned on that device.
        """
        if self.train_fn is not None:  # the user's own loop (privgate.training.function)
            if model is not None:
                raise RecipeError(
                    f"recipe '{self.name}': its train_fn trains a model from scratch and cannot continue a given one "
                    "(federated rounds); give a Recipe without train_fn for this job."
                )
            from privgate.training.function import call_training_function

            return call_training_function(self, x, y, int(seed), str(device or "cpu"))
        from privgate.training import augment, schedules
        from privgate.training.dropout import seeded_dropout
        from privgate.training.plan import dropout_seed

        dev = torch.device(device or "cpu")
        gen = torch.Generator().manual_seed(int(seed))
        net = (model if model is not None else self.build(seed=seed)).to(dev)
        xt = torch.as_tensor(np.asarray(x), dtype=torch.float32).to(dev)
        yt = torch.as_tensor(np.asarray(y), dtype=torch.long).to(dev)
        opt = self.make_optimizer(net.parameters())
        n = len(xt)
        spe = schedules.steps_per_epoch(n, self.batch_size)
        scheduler = schedules.torch_scheduler(self, opt, int(self.epochs) * spe, spe)
        augmenter = None
        if self.augment is not None:
            augment.check_rows(self.augment, xt.shape[1:], self.name)
            augment.check_transform(self.augment, xt[: min(4, n)], self.name)
            augmenter = augment.Augmenter(self.augment, int(seed), self.name)
        # channels-last convolutions on a GPU: the layout its convolution kernels are fastest in (rounding only)
        layout = torch.channels_last if dev.type == "cuda" and xt.dim() == 4 else None
        if layout is not None:
            net = net.to(memory_format=layout)
        bf16, smoothing = self.precision == "bf16", float(self.label_smoothing)
        kind: outputs.Kind | None = None
        net.train()
        masks = torch.Generator().manual_seed(dropout_seed(seed))
        forked = [dev.index if dev.index is not None else torch.cuda.current_device()] if dev.type == "cuda" else []
        with torch.random.fork_rng(devices=forked), seeded_dropout(net, masks):
            seed_global(dropout_seed(seed))
            for _ in range(self.epochs):
                order = torch.randperm(n, generator=gen).to(dev)
                for start in range(0, n, self.batch_size):
                    idx = order[start : start + self.batch_size]
                    xb = xt[idx] if augmenter is None else augmenter(xt[idx])
                    if layout is not None:
                        xb = xb.contiguous(memory_format=layout)
                    opt.zero_grad(set_to_none=True)
                    with torch.autocast(dev.type, dtype=torch.bfloat16) if bf16 else nullcontext():
                        out = net(xb)
                    if kind is None:  # decided on the first batch (each batch's check would wait on a GPU)
                        kind = outputs.kind_of(out.detach().float()) or outputs.LOGITS
                    # cross-entropy; BCE-with-logits for one logit (privgate.inputs.outputs)
                    outputs.nll(out.float(), yt[idx], kind, label_smoothing=smoothing).backward()
                    if self.clip_grad_norm is not None:
                        torch.nn.utils.clip_grad_norm_(net.parameters(), float(self.clip_grad_norm))
                    opt.step()
                    if scheduler is not None:
                        scheduler.step()
        if layout is not None:
            net = net.to(memory_format=torch.contiguous_format)
        net.eval()
        return net


__all__ = ["OPTIMIZERS", "PRECISIONS", "TRAINING_DEFAULTS", "Augment", "DPSGD", "Recipe"]
