"""Metric-based (threshold) membership-inference attacks.

Each attack maps the target's output on one example to a score; members tend to
get lower loss, higher confidence and lower entropy because the model fitted
them. With ``class_dependent: true`` the gate learns one threshold per class on
the calibration split (Song & Mittal 2021, arXiv 2003.10595). ``direction``
says which side of the threshold is "member": ``higher`` (default), ``lower``,
or ``two_sided`` — far in either tail of the calibration non-members'
distribution, per class with ``class_dependent`` (:mod:`privgate.attacks.tails`).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from privgate.attacks.base import Attack, AttackContext, AttackResult


def _true_class(proba: np.ndarray, y: np.ndarray) -> np.ndarray:
    return proba[np.arange(len(y)), y]


class _OutputAttack(Attack):
    """A score computed from the target's probabilities (or labels) on each example."""

    threat_model = "black-box"
    supports_class_dependent = True

    def __init__(self, class_dependent: bool = False, direction: str = "higher", **options: Any) -> None:
        from privgate.attacks.tails import DIRECTIONS
        from privgate.errors import shown

        super().__init__(**options)
        if not isinstance(class_dependent, bool):
            raise TypeError("option class_dependent must be true or false")
        if direction not in DIRECTIONS:
            raise ValueError(f"option direction must be one of {', '.join(DIRECTIONS)}, got {shown(direction)}")
        self.options = {"class_dependent": class_dependent}
        if direction != "higher":  # the default is not spelled out, so existing reports keep their options
            self.options["direction"] = direction

    def score(self, ctx: AttackContext) -> np.ndarray:
        """One score per audit example: :meth:`signal` of the target's outputs, streamed by row chunks."""
        return ctx.per_row(self.signal)

    @staticmethod
    def signal(log_proba: np.ndarray, y: np.ndarray) -> np.ndarray:
        """The attack's score of each row of ``[rows, classes]`` log-probabilities with labels ``y``."""
        raise NotImplementedError

    def run(self, ctx: AttackContext) -> AttackResult:
        from privgate.attacks.tails import two_sided_scorer

        start = time.perf_counter()
        s = np.asarray(self.score(ctx), dtype=float)
        direction = self.options.get("direction", "higher")
        per_class = self.options["class_dependent"]
        if direction == "lower":
            s = -s
        return AttackResult(
            attack=self.name,
            threat_model=self.threat_model,
            scores=s,
            seconds=time.perf_counter() - start,
            groups=np.asarray(ctx.y) if per_class and direction != "two_sided" else None,
            options=dict(self.options),
            fitted=two_sided_scorer(s, np.asarray(ctx.y) if per_class else None, ctx.seed)
            if direction == "two_sided"
            else None,
        )


class LossAttack(_OutputAttack):
    """Loss threshold attack (Yeom, Giacomelli, Fredrikson & Jha 2018, arXiv 1709.01604).

    score = −ℓ(x, y) = log p_y(x): a member is predicted when its cross-entropy
    loss is below a threshold.
    """

    name = "loss"

    @staticmethod
    def signal(log_proba: np.ndarray, y: np.ndarray) -> np.ndarray:
        return _true_class(log_proba, y)


class ConfidenceAttack(_OutputAttack):
    """Maximum-confidence attack (Salem et al. 2019, "ML-Leaks", arXiv 1806.01246).

    score = max_k p_k(x): needs no label, only the probability vector.
    """

    name = "confidence"

    @staticmethod
    def signal(log_proba: np.ndarray, y: np.ndarray) -> np.ndarray:
        return log_proba.max(axis=1)  # log max_k p_k: same ranking, no saturation


class TrueClassConfidenceAttack(_OutputAttack):
    """True-class confidence attack (Song & Mittal 2021, arXiv 2003.10595, "Conf").

    score = log p_y(x) (same ranking as p_y, without floating-point saturation).
    Ranks examples like the loss attack globally; it exists for its
    class-dependent thresholds.
    """

    name = "true_class_confidence"

    @staticmethod
    def signal(log_proba: np.ndarray, y: np.ndarray) -> np.ndarray:
        # log p_y ranks like p_y but does not saturate at 1.0; class-wise z-scores act on it
        return _true_class(log_proba, y)


class EntropyAttack(_OutputAttack):
    """Prediction-entropy attack (Salem et al. 2019, arXiv 1806.01246; Song & Mittal 2021).

    score = −H(p(x)) = Σ_k p_k log p_k: confident (low-entropy) outputs suggest a member.
    """

    name = "entropy"

    @staticmethod
    def signal(log_proba: np.ndarray, y: np.ndarray) -> np.ndarray:
        return np.sum(np.exp(log_proba) * log_proba, axis=1)


class ModifiedEntropyAttack(_OutputAttack):
    """Modified-entropy attack (Song & Mittal 2021, arXiv 2003.10595, eq. 5).

    Mentr(p, y) = −(1 − p_y) log p_y − Σ_{k≠y} p_k log(1 − p_k); score = −Mentr.
    Unlike entropy it uses the label, so a confident *wrong* prediction scores low.
    """

    name = "modified_entropy"

    @staticmethod
    def signal(log_proba: np.ndarray, y: np.ndarray) -> np.ndarray:
        # computed from log-probabilities: 1 − p = −expm1(log p) and log(1 − p) = log(−expm1(log p))
        # stay exact where p rounds to 1.0
        logp = np.minimum(log_proba, -1e-300)
        p = np.exp(logp)
        log1m = np.log(np.maximum(-np.expm1(logp), 1e-300))
        idx = np.arange(len(y))
        log_py = logp[idx, y]
        others = p * log1m
        others[idx, y] = 0.0
        mentr = np.expm1(log_py) * log_py - others.sum(axis=1)  # −(1 − p_y)·log p_y, with 1 − p_y = −expm1(log p_y)
        return -mentr


class CorrectnessAttack(_OutputAttack):
    """Prediction-correctness attack (Yeom et al. 2018, arXiv 1709.01604, "gap attack").

    score = 1 if the predicted label equals the true label, else 0. Needs only
    labels, so it applies to label-only releases; its advantage equals the
    train-test accuracy gap.
    """

    name = "correctness"
    threat_model = "label-only"
    supports_class_dependent = False

    def __init__(self, **options: Any) -> None:
        Attack.__init__(self, **options)
        self.options = {"class_dependent": False}

    def score(self, ctx: AttackContext) -> np.ndarray:
        return (ctx.labels == ctx.y).astype(float)
