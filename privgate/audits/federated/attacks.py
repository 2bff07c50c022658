"""Every node attacks every node: membership scores per round, attacker and row, and the metrics of each pair.

After round r the model of node a (the **attacker**) scores every row; for a **victim** v the members are v's
training rows and the non-members held-out rows matched to v's label mix
(:func:`privgate.audits.federated.split.matched_nonmembers`), each split once into calibration and evaluation
halves. Gao's (2024, University of Zurich) metric attacks reuse :mod:`privgate.attacks.threshold` (Yeom et al.
2018, arXiv 1709.01604; Salem et al. 2019, arXiv 1806.01246; Song & Mittal 2021, arXiv 2003.10595); RMIA and
LiRA come from :mod:`privgate.audits.federated.reference_attacks`. Per pair: AUC (DeLong), TPR at FPR,
precision / recall / F1, intervals pointwise; :mod:`privgate.audits.federated.decide` applies Bonferroni.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from privgate import stats
from privgate.attacks.threshold import (
    ConfidenceAttack,
    CorrectnessAttack,
    EntropyAttack,
    LossAttack,
    ModifiedEntropyAttack,
)
from privgate.audits.federated.split import matched_nonmembers

#: Gao's (2024, University of Zurich) metric attacks, in its order (PC, PL, PMC, PE, MCLE).
METRIC_ATTACKS: dict[str, type] = {
    "correctness": CorrectnessAttack,
    "loss": LossAttack,
    "confidence": ConfidenceAttack,
    "entropy": EntropyAttack,
    "modified_entropy": ModifiedEntropyAttack,
}
#: Reference-model attacks, trained like a node (:mod:`privgate.audits.federated.reference_attacks`).
REFERENCE_ATTACKS = ("rmia", "lira")
#: The metrics measured for every pair.
METRICS = ("auc", "tpr_at_fpr", "precision", "recall", "f1")


@dataclass
class _Outputs:
    """What a threshold attack's ``score`` reads of its context: log-probabilities, labels, predicted labels."""

    log_proba: np.ndarray
    y: np.ndarray

    @property
    def labels(self) -> np.ndarray:
        return self.log_proba.argmax(axis=1)

    def per_row(self, fn: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> np.ndarray:
        """``fn`` of every row (:meth:`privgate.attacks.base.AttackContext.per_row`; these outputs are already held)."""
        return fn(self.log_proba, self.y)


def metric_scores(name: str, log_proba: np.ndarray, y: np.ndarray) -> np.ndarray:
    """One metric attack's membership score of every row (higher = more likely a member)."""
    return np.asarray(METRIC_ATTACKS[name]().score(_Outputs(log_proba, y)), dtype=float)


@dataclass
class Victims:
    """Each victim's audit rows: members, matched non-members and the calibration half.

    Attributes:
        members: ``members[v]``, indices (into the scored rows) of v's training rows.
        nonmembers: ``nonmembers[v]``, indices of its matched held-out rows.
        calibration: ``calibration[v]``, a boolean mask over ``members[v]`` then ``nonmembers[v]``.
    """

    members: list[np.ndarray]
    nonmembers: list[np.ndarray]
    calibration: list[np.ndarray]

    @classmethod
    def build(cls, y: np.ndarray, shards: Sequence[np.ndarray], holdout: np.ndarray, seed: int) -> Victims:
        """Match each shard's label mix among the held-out rows and split both halves (seeded)."""
        members, nonmembers, cal = [], [], []
        for v, rows in enumerate(shards):
            pick = matched_nonmembers(y[rows], y[holdout], seed, stream=v)
            out = np.asarray(holdout)[pick]
            members.append(np.asarray(rows))
            nonmembers.append(out)
            membership = np.r_[np.ones(len(rows), bool), np.zeros(len(out), bool)]
            cal.append(stats.calibration_mask(membership, int(seed) * 7919 + v))
        return cls(members, nonmembers, cal)

    def __len__(self) -> int:
        return len(self.members)

    def split(self, scores: np.ndarray, v: int) -> stats.SplitScores:
        """Victim v's scores split into calibration and evaluation, members and non-members."""
        m, o, c = self.members[v], self.nonmembers[v], self.calibration[v]
        s = np.r_[scores[m], scores[o]]
        membership = np.r_[np.ones(len(m), bool), np.zeros(len(o), bool)]
        return stats.SplitScores.from_mask(s, membership, c)

    def sizes(self) -> list[dict[str, int]]:
        return [
            {"members": len(m), "nonmembers": len(o), "evaluation_members": int((~c[: len(m)]).sum()),
             "evaluation_nonmembers": int((~c[len(m) :]).sum())}
            for m, o, c in zip(self.members, self.nonmembers, self.calibration)
        ]  # fmt: skip


#: ``scorer(attack, log_proba [n, C], y [n]) -> [n]`` for attacks beyond the metric ones.
Scorer = Callable[[str, np.ndarray, np.ndarray], np.ndarray]


def score_round(
    log_proba: np.ndarray, y: np.ndarray, attacks: Sequence[str], scorer: Scorer | None = None
) -> dict[str, np.ndarray]:
    """``{attack: [N attackers, n rows]}`` scores of one round's N models (``log_proba``: ``[N, n, C]``)."""
    out: dict[str, np.ndarray] = {}
    for name in attacks:
        if name in METRIC_ATTACKS:
            out[name] = np.stack([metric_scores(name, lp, y) for lp in log_proba])
        elif scorer is not None:
            out[name] = np.stack([scorer(name, lp, y) for lp in log_proba])
        else:
            raise ValueError(f"attack {name!r} needs reference models")
    return out


def pair_metrics(split: stats.SplitScores, fpr: float, confidence: float) -> dict[str, tuple[float, float, float]]:
    """``{metric: (value, lo, hi)}`` for one (attacker, victim) pair, plus the achieved FPR as ``fpr_achieved``."""
    out: dict[str, tuple[float, float, float]] = {}
    a = stats.auc(split.eval_in, split.eval_out, confidence)
    out["auc"] = (a.value, a.lo, a.hi)
    t = stats.tpr_at_fpr(split, fpr, confidence)
    nan = float("nan")
    if t.resolvable and t.measurable:
        out["tpr_at_fpr"] = (t.value, t.lo, t.hi)
        lo, hi = t.details["fpr_ci"]
        out["fpr_achieved"] = (float(t.details["fpr_achieved"]), float(lo), float(hi))
    else:
        out["tpr_at_fpr"] = out["fpr_achieved"] = (nan, nan, nan)
    for name, e in stats.precision_recall_f1(split, confidence).items():
        out[name] = (e.value, e.lo, e.hi) if e.resolvable else (nan, nan, nan)
    return out


@dataclass
class Matrices:
    """``values[attack][metric]``: ``[R, N, N, 3]`` arrays of (value, lo, hi) per round, attacker and victim."""

    values: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)

    def get(self, attack: str, metric: str) -> np.ndarray:
        return self.values[attack][metric]


def measure(
    scores: Sequence[dict[str, np.ndarray]], victims: Victims, fpr: float, confidence: float, every_round: bool = True
) -> Matrices:
    """The metrics of every (round, attacker, victim) pair for every attack (``scores[r][attack]``: ``[N, n]``).

    With ``every_round=False`` the threshold metrics (TPR at FPR, precision,
    recall, F1) are measured in the final round only and are NaN before it;
    the AUC is always measured in every round.
    """
    rounds, attacks = len(scores), list(scores[0])
    n_att = next(iter(scores[0].values())).shape[0]
    n_vic = len(victims)
    keys = (*METRICS, "fpr_achieved")
    mats = Matrices({a: {k: np.full((rounds, n_att, n_vic, 3), np.nan) for k in keys} for a in attacks})
    for r, by_attack in enumerate(scores):
        for name, s in by_attack.items():
            for a in range(n_att):
                for v in range(n_vic):
                    sp = victims.split(s[a], v)
                    if every_round or r == rounds - 1:
                        for k, triple in pair_metrics(sp, fpr, confidence).items():
                            mats.values[name][k][r, a, v] = triple
                    else:
                        e = stats.auc(sp.eval_in, sp.eval_out, confidence)
                        mats.values[name]["auc"][r, a, v] = (e.value, e.lo, e.hi)
    return mats


def best_auc(
    scores: Sequence[dict[str, np.ndarray]], mats: Matrices, victims: Victims, confidence: float
) -> tuple[np.ndarray, np.ndarray]:
    """The strongest attack's AUC per pair: ``([R, N, N, 3] (value, lo, hi), [R, N, N] chosen attack index)``.

    The point is the largest AUC among the m attacks; its interval is the
    chosen attack's at 1 − α/m (Bonferroni), so picking the best of m does not
    narrow it (as ``attack: best`` in a policy).
    """
    attacks = list(mats.values)
    aucs = np.stack([mats.get(a, "auc")[..., 0] for a in attacks])  # [m, R, N, N]
    filled = np.where(np.isnan(aucs), -np.inf, aucs)
    chosen = filled.argmax(axis=0)
    conf = stats.bonferroni(confidence, len(attacks))
    out = np.full(chosen.shape + (3,), np.nan)
    for r, a, v in np.ndindex(chosen.shape):
        name = attacks[chosen[r, a, v]]
        sp = victims.split(scores[r][name][a], v)
        e = stats.auc(sp.eval_in, sp.eval_out, conf) if len(attacks) > 1 else None
        out[r, a, v] = (e.value, e.lo, e.hi) if e is not None else mats.get(name, "auc")[r, a, v]
    return out, chosen


__all__ = [
    "METRICS",
    "METRIC_ATTACKS",
    "REFERENCE_ATTACKS",
    "Matrices",
    "Victims",
    "best_auc",
    "measure",
    "metric_scores",
    "pair_metrics",
    "score_round",
]
