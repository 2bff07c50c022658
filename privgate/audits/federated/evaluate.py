"""From every node's model after every round to one topology's report: scores, matrices, accuracy.

Shared by the simulation (``privgate fl simulate``) and the audit of a real
federation's checkpoints (``privgate fl audit``): both hand in a function that
gives round r's ``[N, n, C]`` log-probabilities on every audited row.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from privgate import stats
from privgate.audits.federated.attacks import Matrices, Scorer, Victims, best_auc, measure, score_round
from privgate.audits.federated.split import label_counts
from privgate.audits.federated.topology import Topology
from privgate.report.jobs.federation import (
    MIA,
    Accuracy,
    AttackMatrices,
    Matrix,
    TopologyResult,
    cube,
    cube_ci,
    hop_summary,
)


@dataclass
class Evaluation:
    """What the attacks found in one federation.

    Attributes:
        scores: ``scores[r][attack]``: ``[N attackers, n rows]`` membership scores.
        matrices: every attack's metrics per (round, attacker, victim).
        best: ``[R, N, N, 3]`` the strongest attack's AUC (value, lo, hi) per pair.
        chosen: ``[R, N, N]`` index (into ``attacks``) of that attack.
        accuracy: ``[R, N]`` held-out accuracy (on ``holdout`` rows), ``accuracy_ci``: ``[R, N, 2]``.
    """

    attacks: list[str]
    scores: list[dict[str, np.ndarray]]
    matrices: Matrices
    best: np.ndarray
    chosen: np.ndarray
    accuracy: np.ndarray
    accuracy_ci: np.ndarray
    seconds: float
    holdout: int = 0
    notes: list[str] = field(default_factory=list)


def evaluate(
    log_proba_of: Callable[[int], np.ndarray],
    rounds: int,
    y: np.ndarray,
    victims: Victims,
    holdout: np.ndarray,
    attacks: Sequence[str],
    *,
    scorer: Scorer | None = None,
    fpr: float = 0.01,
    confidence: float = 0.95,
    every_round: bool = True,
) -> Evaluation:
    """Attack every round's models (``log_proba_of(r)``: ``[N, n, C]``) on every victim's rows."""
    start = time.perf_counter()
    scores, acc, acc_ci = [], [], []
    for r in range(rounds):
        lp = log_proba_of(r)
        scores.append(score_round(lp, y, attacks, scorer))
        correct = (lp[:, holdout].argmax(axis=2) == y[holdout][None, :]).sum(axis=1)
        acc.append(correct / len(holdout))
        acc_ci.append([stats.clopper_pearson(int(k), len(holdout), confidence) for k in correct])
    mats = measure(scores, victims, fpr, confidence, every_round)
    best, chosen = best_auc(scores, mats, victims, confidence)
    return Evaluation(
        list(attacks),
        scores,
        mats,
        best,
        chosen,
        np.array(acc),
        np.array(acc_ci),
        time.perf_counter() - start,
        len(holdout),
    )


def topology_result(
    topology: Topology,
    distribution: str,
    shards: Sequence[np.ndarray],
    y: np.ndarray,
    classes: int,
    victims: Victims,
    ev: Evaluation,
    confidence: float,
    *,
    training: dict | None = None,
    notes: Sequence[str] = (),
) -> TopologyResult:
    """The report section of one federation."""
    m = len(ev.attacks)
    conf_best = stats.bonferroni(confidence, m) if m > 1 else confidence
    chosen = [[[ev.attacks[i] for i in row] for row in plane] for plane in ev.chosen]
    final = ev.best[-1, :, :, 0]
    summary = hop_summary(final, topology.hops())
    summary["metric"] = "auc (best attack)"
    summary["mean_accuracy_final"] = float(ev.accuracy[-1].mean())
    if topology.hub() is not None and topology.n > 2:
        leaves = np.arange(1, topology.n)
        others = [final[i, j] for i in leaves for j in leaves if i != j]
        summary["star"] = {
            "hub_self": float(final[0, 0]),
            "hub_on_leaves": float(final[0, leaves].mean()),
            "leaf_self": float(np.mean([final[i, i] for i in leaves])),
            "leaf_on_hub": float(final[leaves, 0].mean()),
            "leaf_on_other_leaves": float(np.mean(others)),
        }
    mats = ev.matrices
    return TopologyResult(
        topology=topology.describe(),
        nodes=topology.n,
        rounds=len(ev.scores),
        distribution=distribution,
        node_names=list(topology.labels),
        shard_sizes=[len(s) for s in shards],
        label_counts=label_counts(y, list(shards), classes),
        victims=victims.sizes(),
        accuracy=Accuracy(values=ev.accuracy.tolist(), ci=ev.accuracy_ci.tolist(), n=ev.holdout, confidence=confidence),
        mia=MIA(
            attack="best" if m > 1 else ev.attacks[0],
            confidence=conf_best,
            values=cube(ev.best[..., 0]),
            ci=cube_ci(ev.best),
            chosen=chosen if m > 1 else None,
        ),
        attacks=[
            AttackMatrices(name=a, **{k: Matrix.of(mats.get(a, k)) for k in (*_METRICS, "fpr_achieved")})
            for a in ev.attacks
        ],
        edges=topology.edges,
        summary=summary,
        training=dict(training or {}),
        seconds={"attacks": round(ev.seconds, 3)},
        notes=list(notes) + list(ev.notes),
    )


_METRICS = ("auc", "tpr_at_fpr", "precision", "recall", "f1")

__all__ = ["Evaluation", "evaluate", "topology_result"]
