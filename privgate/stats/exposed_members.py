"""Which records leak: the members the strongest attack singles out, with every attack's view of them.

Each member's score is placed on every attack's evaluation-split ROC curve: its ``rank`` among the members, ``fpr``
(evaluation non-members scoring at least as high) and ``tpr`` (evaluation members scoring at least as high; Carlini
et al. 2022, arXiv 2112.03570, read attacks at low FPR). The records are the N members the *leading* attack
(:func:`leading_attack`) scores highest; each says which split it is in. What the report shows:
``docs/attacks.md`` ("Which records leak"); why: ``docs/internals-training-stats.md``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

#: Default number of exposed records in a report (``--exposed``).
DEFAULT_EXPOSED = 10


@dataclass(frozen=True)
class ScoredAttack:
    """What ranking needs of one attack: its scores on the pooled audit rows and how strong it is."""

    scores: np.ndarray
    auc: float | None
    tpr: Mapping[float, float | None]  # TPR at each summary FPR, None where unresolvable


def leading_attack(attacks: Mapping[str, ScoredAttack]) -> str | None:
    """The attack with the highest TPR at the lowest FPR where any attack's TPR was measured.

    Ties (and the case where no TPR could be measured) are broken by AUC, then by name.
    """
    if not attacks:
        return None
    fprs = sorted({f for a in attacks.values() for f, t in a.tpr.items() if t is not None})

    def key(name: str) -> tuple:
        a = attacks[name]
        t = a.tpr.get(fprs[0]) if fprs else None
        return (-1.0 if t is None else t, -1.0 if a.auc is None else a.auc, name)

    return max(attacks, key=key)


def _operating_points(scores: np.ndarray, eval_in: np.ndarray, eval_out: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(TPR, FPR) on the evaluation split of the threshold "score ≥ s" for each s in ``scores``."""
    si, so = np.sort(eval_in), np.sort(eval_out)
    tpr = (len(si) - np.searchsorted(si, scores, side="left")) / max(len(si), 1)
    fpr = (len(so) - np.searchsorted(so, scores, side="left")) / max(len(so), 1)
    return tpr, fpr


def exposed_members(
    attacks: Mapping[str, ScoredAttack],
    membership: np.ndarray,
    calibration: np.ndarray,
    member_index: np.ndarray,
    labels: np.ndarray,
    n: int = DEFAULT_EXPOSED,
) -> dict[str, Any] | None:
    """The ``n`` most exposed members (module docstring), as the report's ``exposed`` section.

    Args:
        attacks: every membership attack that ran (diagnostics left out by the caller).
        membership: ``[rows]`` bool, the pooled audit rows' true membership.
        calibration: ``[rows]`` bool, the calibration split.
        member_index: ``[rows]`` each member row's index in the members file (−1 for non-members).
        labels: ``[rows]`` class labels.
        n: how many records (0: none).

    Returns:
        ``{"attack": leading attack, "n": n, "records": [...]}`` or None when no attack ran or n is 0.
    """
    lead = leading_attack(attacks)
    if lead is None or n <= 0:
        return None
    membership = np.asarray(membership, dtype=bool)
    calibration = np.asarray(calibration, dtype=bool)
    members = np.flatnonzero(membership)
    view: dict[str, dict[str, np.ndarray]] = {}
    for name, a in attacks.items():
        s = np.asarray(a.scores, dtype=np.float64)
        ms = s[members]
        order = np.argsort(-ms, kind="stable")
        rank = np.empty(len(ms), dtype=np.int64)
        rank[order] = np.arange(1, len(ms) + 1)
        tpr, fpr = _operating_points(ms, s[~calibration & membership], s[~calibration & ~membership])
        view[name] = {"score": ms, "rank": rank, "tpr": tpr, "fpr": fpr}
    top = np.argsort(-view[lead]["score"], kind="stable")[:n]
    records = []
    for j in top:
        row = members[j]
        records.append(
            {
                "member_index": int(member_index[row]),
                "label": int(labels[row]),
                "split": "calibration" if calibration[row] else "evaluation",
                "attacks": {
                    name: {
                        "score": float(v["score"][j]),
                        "rank": int(v["rank"][j]),
                        "fpr": float(v["fpr"][j]),
                        "tpr": float(v["tpr"][j]),
                    }
                    for name, v in view.items()
                },
            }
        )
    return {
        "attack": lead,
        "n": len(records),
        "n_members": len(members),
        "n_eval_members": int(np.sum(~calibration & membership)),
        "n_eval_nonmembers": int(np.sum(~calibration & ~membership)),
        "records": records,
    }


__all__ = ["DEFAULT_EXPOSED", "ScoredAttack", "exposed_members", "leading_attack"]
