"""Recipe: how the target was trained, so privgate can train "another model like it".

A recipe is given as a Python entry point ``module:attr`` whose attribute is a
:class:`Recipe` (or a zero-argument callable returning one). Reference and
shadow models, and DP-SGD retraining, all train through :meth:`Recipe.train`:
one training loop, used everywhere.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import torch
from torch import nn

from privgate.errors import RecipeError
from privgate.inputs.outputs import nll
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


@dataclass
class Recipe:
    """Everything needed to train a model like the target.

    Args:
        model_factory: builds a fresh, untrained ``nn.Module`` that outputs logits
            (``[n, K]``, or one logit ``[n]``/``[n, 1]`` for a binary task trained with
            BCE-with-logits; rows of probabilities are trained on their log).
        epochs: passes over the training set.
        batch_size: mini-batch size.
        lr: learning rate.
        optimizer: ``"adam"`` or ``"sgd"``.
        momentum: SGD momentum.
        weight_decay: L2 penalty.
        pretrained: optional path of a *public* state_dict to start from.
        name: shown in reports.
    """

    model_factory: Callable[[], nn.Module]
    epochs: int = 30
    batch_size: int = 64
    lr: float = 1e-3
    optimizer: Literal["adam", "sgd"] = "adam"
    momentum: float = 0.0
    weight_decay: float = 0.0
    pretrained: str | None = None
    name: str = "recipe"
    extra: dict[str, Any] = field(default_factory=dict)

    def build(self, seed: int | None = None) -> nn.Module:
        """A fresh model (from the public pre-trained start when the recipe names one).

        With ``seed``, the factory runs under ``torch.manual_seed(seed)`` in a
        forked generator, so the same seed gives the same initial weights and
        the caller's random state is untouched; no other thread seeds torch's
        global generator meanwhile (:mod:`privgate.training.rng`). Any failure of the user's
        factory is a :class:`RecipeError`.
        """
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
    def vectorisable(self) -> bool:
        """Whether :mod:`privgate.training.engine` may train many copies of this recipe at once.

        True for the plain recipe, whose :meth:`train` loop the vectorised engine
        replicates; a subclass that overrides :meth:`train` (e.g. DP-SGD training)
        is trained by calling its own :meth:`train` once per model instead.
        Subclasses may also override this property.
        """
        return type(self).train is Recipe.train

    @property
    def dp_sgd(self) -> DPSGD | None:
        """The DP-SGD this recipe trains with, when :meth:`train` is DP-SGD; None for plain training.

        A recipe that returns a :class:`DPSGD` lets the vectorised engine train
        its MLPs at once with the same mechanism (:mod:`privgate.training.mlp`).
        """
        return None

    def make_optimizer(self, params: Any) -> torch.optim.Optimizer:
        if self.optimizer == "adam":
            return torch.optim.Adam(params, lr=self.lr, weight_decay=self.weight_decay)
        if self.optimizer == "sgd":
            return torch.optim.SGD(params, lr=self.lr, momentum=self.momentum, weight_decay=self.weight_decay)
        raise RecipeError(f"recipe '{self.name}': unknown optimizer '{self.optimizer}' (use 'adam' or 'sgd').")

    def train(
        self,
        x: np.ndarray,
        y: np.ndarray,
        seed: int = 0,
        model: nn.Module | None = None,
        device: str | torch.device | None = None,
    ) -> nn.Module:
        """Train a model on (x, y) with this recipe; deterministic for a given seed.

        Model k of the vectorised engine (:mod:`privgate.training.engine`) is
        trained exactly like this: initialised by ``build(seed)``, batches in
        ``randperm`` order from a generator seeded with ``seed``, dropout masks
        from a generator seeded with :func:`~privgate.training.plan.dropout_seed`
        (:mod:`privgate.training.dropout`), any other random draw of the
        forward pass from torch's generator seeded the same way (and restored after).

        Args:
            x: inputs, float array with the model's input shape per row.
            y: integer class labels.
            seed: drives initialisation, batch order and dropout masks.
            model: train this module instead of a fresh one (DP training passes
                an Opacus-wrapped module through its own loop instead).
            device: where to train (``"cpu"``, ``"cuda"``); default the CPU. The
                model is returned on that device.
        """
        from privgate.training.dropout import seeded_dropout
        from privgate.training.plan import dropout_seed

        dev = torch.device(device or "cpu")
        gen = torch.Generator().manual_seed(int(seed))
        net = (model if model is not None else self.build(seed=seed)).to(dev)
        xt = torch.as_tensor(np.asarray(x), dtype=torch.float32).to(dev)
        yt = torch.as_tensor(np.asarray(y), dtype=torch.long).to(dev)
        opt = self.make_optimizer(net.parameters())
        net.train()
        n = len(xt)
        masks = torch.Generator().manual_seed(dropout_seed(seed))
        forked = [dev.index if dev.index is not None else torch.cuda.current_device()] if dev.type == "cuda" else []
        with torch.random.fork_rng(devices=forked), seeded_dropout(net, masks):
            seed_global(dropout_seed(seed))
            for _ in range(self.epochs):
                order = torch.randperm(n, generator=gen).to(dev)
                for start in range(0, n, self.batch_size):
                    idx = order[start : start + self.batch_size]
                    opt.zero_grad(set_to_none=True)
                    # cross-entropy; BCE-with-logits for one logit (privgate.inputs.outputs)
                    nll(net(xt[idx]), yt[idx]).backward()
                    opt.step()
        net.eval()
        return net


__all__ = ["DPSGD", "Recipe"]
