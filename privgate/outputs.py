"""How a model's raw outputs are read as class log-probabilities.

The rest (design, limits, derivations): docs/internals-inputs.md.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

if TYPE_CHECKING:  # torch loads when a model is read, not when a policy is validated
    import torch

Kind = Literal["logits", "binary-logit", "probabilities"]

LOGITS: Kind = "logits"
BINARY: Kind = "binary-logit"
PROBABILITIES: Kind = "probabilities"
KINDS: tuple[Kind, ...] = (LOGITS, BINARY, PROBABILITIES)

#: Largest |Σ_k p_k − 1| of a row read as probabilities: float32 softmax over
#: up to ~1000 classes sums to 1 within ~1e-5.
SUM_TOL = 1e-4
#: Floor of a probability before its log, so p = 0 gives a finite log p.
TINY = 1e-300
#: How many audit rows the gate probes to decide the kind (members and non-members, half each).
PROBE_ROWS = 512


def _is_tensor(v: Any) -> bool:
    """Whether ``v`` is a torch tensor (a subclass included), without importing torch when nothing has."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(v, torch.Tensor)


def kind_of(raw: np.ndarray | torch.Tensor) -> Kind | None:
    """The kind of ``raw`` (one model's outputs on a batch), or None for an unusable shape.

    ``[n]``/``[n, 1]`` → binary-logit; ``[n, K ≥ 2]`` → probabilities when every
    row is non-negative and sums to 1 within :data:`SUM_TOL`, else logits.
    """
    # training loops call this every step: a tensor stays a tensor
    z = raw.detach() if _is_tensor(raw) else np.asarray(raw, dtype=np.float64)
    if z.ndim <= 1 or (z.ndim == 2 and z.shape[1] == 1):
        return BINARY
    if z.ndim != 2 or z.shape[1] < 2:
        return None
    return PROBABILITIES if len(z) and _rows_are_distributions(z) else LOGITS


def _rows_are_distributions(z: np.ndarray | torch.Tensor) -> bool:
    if _is_tensor(z):
        return bool((z >= 0).all() and ((z.double().sum(dim=1) - 1.0).abs() <= SUM_TOL).all())
    return bool(np.all(z >= 0.0) and np.all(np.abs(z.sum(axis=1) - 1.0) <= SUM_TOL))


def _check(kind: str) -> None:
    if kind not in KINDS:
        raise ValueError(f"output kind must be one of {KINDS}, got {kind!r}")


def as_logits(raw: np.ndarray, kind: Kind) -> np.ndarray:
    """``[n, K]`` float64 logits whose log-softmax is the outputs' log-probabilities."""
    _check(kind)
    z = np.asarray(raw, dtype=np.float64)
    if kind == BINARY:
        z = z.reshape(len(z), 1)
        return np.concatenate([np.zeros_like(z), z], axis=1)
    if kind == PROBABILITIES:
        return np.log(np.maximum(z, TINY))
    return z


def log_proba(raw: np.ndarray, kind: Kind) -> np.ndarray:
    """Log class probabilities ``[n, K]`` from one model's raw outputs, in float64, without saturation."""
    z = as_logits(raw, kind)
    if kind == PROBABILITIES:
        return z  # already log p: no renormalisation, the rows sum to 1 within SUM_TOL
    m = z.max(axis=-1, keepdims=True)
    return z - (m + np.log(np.exp(z - m).sum(axis=-1, keepdims=True)))


def as_logits_torch(out: torch.Tensor, kind: Kind) -> torch.Tensor:
    """The torch counterpart of :func:`as_logits`, differentiable (and ``vmap``-able: no data-dependent branch)."""
    import torch

    _check(kind)
    if kind == BINARY:
        z = out.reshape(out.shape[0] if out.dim() else 1, 1)
        return torch.cat([torch.zeros_like(z), z], dim=1)
    if kind == PROBABILITIES:
        return torch.log(out.clamp_min(TINY if out.dtype == torch.float64 else torch.finfo(out.dtype).tiny))
    return out


def nll(
    out: torch.Tensor, y: torch.Tensor, kind: Kind | None = None, reduction: str = "mean", label_smoothing: float = 0.0
) -> torch.Tensor:
    """Negative log-likelihood of the labels under the outputs: the training loss for every kind.

    Cross-entropy for logits, BCE-with-logits for one logit (as cross-entropy
    on ``[0, z]``, the same function), NLL of ``log p`` for probabilities.
    ``kind=None`` decides from this batch's values (:func:`kind_of`), which is
    what :func:`privgate.training.loop.train_model` does. ``label_smoothing`` ε: against ``(1 − ε)·one-hot + ε/K``
    (``F.cross_entropy``'s; a single logit is two classes, so its target is ``y(1 − ε) + ε/2``).
    """
    from torch.nn import functional as F

    if kind is None:
        kind = kind_of(out) or LOGITS
    if label_smoothing:
        return F.cross_entropy(as_logits_torch(out, kind), y, reduction=reduction, label_smoothing=label_smoothing)
    return F.cross_entropy(as_logits_torch(out, kind), y, reduction=reduction)


def note(kind: Kind, rows: int) -> str | None:
    """The sentence the report carries about a kind that is not plain logits."""
    if kind == BINARY:
        return (
            "the model outputs one logit per row (e.g. trained with BCEWithLogitsLoss): privgate reads it as "
            "two classes, "
            "p(1) = sigmoid(z), i.e. the logits [0, z]; labels must be 0 or 1"
        )
    if kind == PROBABILITIES:
        return (
            f"the model's outputs are already probabilities (all {rows} probed rows are non-negative and sum "
            f"to 1 within "
            f"{SUM_TOL:g}, e.g. a final nn.Softmax): privgate uses log p directly instead of applying softmax "
            f"a second time; "
            "probabilities that round to 0 or 1 in float32 tie, so export the logits for the sharpest audit"
        )
    return None


def sigmoid_hint(raw: np.ndarray, kind: Kind) -> str | None:
    """A warning when a single output lies in [0, 1] on every probed row, as a final sigmoid's would."""
    z = np.asarray(raw, dtype=np.float64)
    if kind == BINARY and len(z) >= 20 and np.all((z >= 0.0) & (z <= 1.0)):
        return (
            f"the model's single output lies within [0, 1] on all {len(z)} probed rows, as a final nn.Sigmoid's would; "
            "privgate reads it as a logit (p(1) = sigmoid(z)), so if it is a probability every number in this "
            "report is "
            "wrong: export the model without the final sigmoid"
        )
    return None


__all__ = [
    "BINARY",
    "KINDS",
    "Kind",
    "LOGITS",
    "PROBABILITIES",
    "PROBE_ROWS",
    "SUM_TOL",
    "as_logits",
    "as_logits_torch",
    "kind_of",
    "log_proba",
    "nll",
    "note",
    "sigmoid_hint",
]
