"""What a model that ignores its input scores: the majority-class and prior baselines of held-out accuracy.

A model's utility means little without them: on a table where 74 % of the rows share one label, a model at
0.63 is worse than always predicting that label, and a remediation whose candidates "improve" towards 0.74 is
approaching a constant model. Both baselines are learned from the training labels (what a model could know
without looking at a row) and scored on the held-out rows utility is measured on (docs/remediation.md).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Trivial:
    """The two baselines on ``n`` held-out rows.

    Attributes:
        label: the training labels' most common value (encoded, as the rows' labels are).
        correct: held-out rows whose label it is; ``majority`` = correct / n, the accuracy of always predicting it.
        prior: the expected accuracy of guessing each row's label at the training labels' frequencies,
            Σ_c p_train(c) · p_held-out(c).
    """

    label: int
    correct: int
    n: int
    majority: float
    prior: float

    @property
    def better_floor(self) -> float:
        """The least accuracy on these rows that beats the majority guess: one row more than it gets right."""
        return min(1.0, (self.correct + 1) / self.n)

    def beaten_by(self, correct: int) -> bool:
        """Whether a model that gets ``correct`` of the same rows right is better than always the majority label."""
        return correct > self.correct

    def as_dict(self, names: list[str] | None = None) -> dict[str, object]:
        shown = names[self.label] if names is not None and 0 <= self.label < len(names) else self.label
        return {
            "majority": round(self.majority, 6),
            "prior": round(self.prior, 6),
            "label": shown,
            "n": self.n,
            "floor": self.better_floor,
        }


def trivial_accuracy(train_labels: np.ndarray, held_out_labels: np.ndarray) -> Trivial:
    """The majority and prior baselines of ``held_out_labels`` learned from ``train_labels`` (encoded ints)."""
    train = np.asarray(train_labels, dtype=np.int64).ravel()
    held = np.asarray(held_out_labels, dtype=np.int64).ravel()
    k = int(max(train.max(initial=0), held.max(initial=0))) + 1
    p_train = np.bincount(train, minlength=k) / max(len(train), 1)
    counts = np.bincount(held, minlength=k)
    label = int(np.argmax(p_train))
    n = max(len(held), 1)
    return Trivial(label, int(counts[label]), len(held), float(counts[label] / n), float(p_train @ (counts / n)))


__all__ = ["Trivial", "trivial_accuracy"]
