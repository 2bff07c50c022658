"""Black-box canaries for a user's training code: mislabelled examples, scored by their loss.

Steinke, Nasr & Jagielski 2023 (arXiv 2305.08846, §6, black-box): canary i is a real row with a wrong label
(drawn among the other classes), withheld from the always-included rows and added with probability 1/2; the
score is the negative loss on the wrong label (higher = more likely included), the loss attack of Yeom et al.
2018 (arXiv 1709.01604). The trainer is ``train(x, y, epsilon, delta, seed) -> torch.nn.Module``, imported only
from the user's project (:func:`privgate.inputs.entrypoints.import_entry`).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from torch import nn

from privgate.audits.entry import TrainerError
from privgate.errors import PrivgateError, clip
from privgate.inputs.data import Dataset
from privgate.outputs import LOGITS, kind_of, nll

Trainer = Callable[[np.ndarray, np.ndarray, float, float, int], nn.Module]

#: Fewest always-included (non-canary) rows the black-box audit keeps.
MIN_CLEAN_ROWS = 10


def mislabelled_canaries(data: Dataset, m: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(canary rows, their wrong labels, who is included, the always-included rows), all drawn from ``seed``."""
    n = len(data)
    classes = int(data.y.max()) + 1
    if classes < 2:
        raise PrivgateError(
            f"{data.source}: mislabelled canaries need at least two classes; the labels are all {int(data.y[0])}."
        )
    if n - m < MIN_CLEAN_ROWS:
        raise PrivgateError(
            f"{data.source}: {n} rows are too few for {m} canaries (at least {MIN_CLEAN_ROWS} rows must stay in the "
            "training set); lower --canaries."
        )
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0xB1AC]))
    rows = np.sort(rng.choice(n, size=m, replace=False))
    wrong = (data.y[rows] + rng.integers(1, classes, size=m)) % classes
    included = rng.random(m) < 0.5
    clean = np.setdiff1d(np.arange(n), rows)
    return rows, wrong.astype(np.int64), included, clean


def call_trainer(
    train: Trainer, name: str, x: np.ndarray, y: np.ndarray, epsilon: float, delta: float, seed: int
) -> nn.Module:
    """Run the user's trainer once; anything but a ``torch.nn.Module`` back is a :class:`TrainerError`."""
    try:
        model = train(x, y, float(epsilon), float(delta), int(seed))
    except PrivgateError:
        raise
    except Exception as exc:  # the user's code: one sentence
        raise TrainerError(f"trainer {name}: failed ({exc.__class__.__name__}: {clip(str(exc))}).") from None
    if not isinstance(model, nn.Module):
        raise TrainerError(f"trainer {name}: returned a {type(model).__name__}, expected a torch.nn.Module.")
    return model.eval()


def loss_scores(model: nn.Module, x: np.ndarray, y: np.ndarray, name: str) -> np.ndarray:
    """−ℓ(f(xᵢ), yᵢ) per row (float64): the membership score of each canary."""
    xt = torch.as_tensor(np.ascontiguousarray(x), dtype=torch.float32)
    yt = torch.as_tensor(y, dtype=torch.long)
    try:
        with torch.no_grad():
            out = model(xt)
            losses = nll(out.double(), yt, kind=kind_of(out) or LOGITS, reduction="none")
    except Exception as exc:
        raise TrainerError(
            f"trainer {name}: the returned model cannot score the canaries ({exc.__class__.__name__}: "
            f"{clip(str(exc))})."
        ) from None
    scores = -losses.reshape(-1).numpy()
    if scores.shape != (len(y),) or not np.all(np.isfinite(scores)):
        raise TrainerError(
            f"trainer {name}: the returned model gives no finite loss per canary (outputs of shape {tuple(out.shape)})."
        )
    return scores


__all__ = [
    "MIN_CLEAN_ROWS",
    "Trainer",
    "TrainerError",
    "call_trainer",
    "loss_scores",
    "mislabelled_canaries",
]
