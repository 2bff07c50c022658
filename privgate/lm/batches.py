"""Records of text as training batches of a language model: token ids, masks, what the loss compares with.

A record's loss is the mean of its tokens' next-token losses (:class:`SequenceLoss`), or the cross-entropy of
its class for a sequence classifier, so one record's gradient is one per-example gradient (DP-SGD clips it as
one unit, :mod:`privgate.dpsgd.opacus_runner`). :class:`RecordUnits` makes each record one unit of privacy;
:class:`privgate.lm.userlevel.UserUnits` each user.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn


class SequenceLoss(nn.Module):
    """Per-record next-token loss: the mean over a record's tokens; ``reduction`` over records (Opacus' slot).

    ``labels`` are the input ids with padding set to −100; the loss at position
    t predicts token t + 1.
    """

    def __init__(self, reduction: str = "mean") -> None:
        super().__init__()
        self.reduction = reduction

    def forward(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        pred, gold = logits[:, :-1].float(), labels[:, 1:]
        tok = nn.functional.cross_entropy(pred.transpose(1, 2), gold.clamp_min(0), reduction="none")
        keep = (gold != -100).to(tok.dtype)
        per_record = (tok * keep).sum(1) / keep.sum(1).clamp_min(1.0)
        if self.reduction == "none":
            return per_record
        return per_record.sum() if self.reduction == "sum" else per_record.mean()


def encode(tokenizer: Any, texts: Sequence[str], max_length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(input ids, attention mask) of ``texts``, each truncated to ``max_length`` tokens, padded to the longest."""
    ids = tokenizer(list(texts), truncation=True, max_length=max_length, add_special_tokens=True)["input_ids"]
    width = max(len(i) for i in ids)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    x = torch.full((len(ids), width), pad, dtype=torch.long)
    mask = torch.zeros((len(ids), width), dtype=torch.long)
    for r, row in enumerate(ids):
        x[r, : len(row)] = torch.tensor(row, dtype=torch.long)
        mask[r, : len(row)] = 1
    return x, mask


def trim(x: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A batch cut to its longest record (padding columns every record has cost time, change nothing)."""
    width = int(mask.sum(1).max().item()) if len(mask) else 1
    return x[:, : max(width, 2)].contiguous(), mask[:, : max(width, 2)].contiguous()  # ghost clipping views ids


def targets(xb: torch.Tensor, mb: torch.Tensor, yb: torch.Tensor | None) -> torch.Tensor:
    """What the loss compares the logits with: the class (classifier) or the next tokens, padding −100."""
    return yb if yb is not None else xb.masked_fill(mb == 0, -100)


def loss_for(y: torch.Tensor | None) -> nn.Module:
    """The per-record loss: next-token (causal LM) or the class's cross-entropy (``y`` given: a classifier)."""
    return SequenceLoss() if y is None else nn.CrossEntropyLoss()


class RecordUnits:
    """Each record one unit of privacy: Poisson over records, one clipped gradient per record.

    Args:
        x, mask: the encoded records (:func:`encode`); y: their classes (a classifier) or ``None``.
        device: where the batches go.
    """

    unit = "record"

    def __init__(self, x: torch.Tensor, mask: torch.Tensor, y: torch.Tensor | None, device: torch.device) -> None:
        self.x, self.mask, self.y, self.device = x, mask, y, device
        self.n = len(x)
        self.dataset = torch.utils.data.TensorDataset(
            x, mask, y if y is not None else torch.zeros(len(x), dtype=torch.long)
        )

    def step(self, module: Any, criterion: Any, batch: Any) -> float:
        """Forward and backward on a (physical) batch of records; their loss (NaN for an empty Poisson batch)."""
        xb, mb, yb = batch
        if len(xb):
            xb, mb = trim(xb, mb)
        xb, mb = xb.to(self.device), mb.to(self.device)
        logits = module(input_ids=xb, attention_mask=mb).logits
        loss = criterion(logits, targets(xb, mb, None if self.y is None else yb.to(self.device)))
        loss.backward()
        return float(loss.detach()) if len(xb) else math.nan


__all__ = ["RecordUnits", "SequenceLoss", "encode", "loss_for", "targets", "trim"]
