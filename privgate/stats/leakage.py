"""Statistics for leakage that is not a membership score: reconstruction similarity,
attribute-inference advantage and the members a released tree model isolates.

These metrics need the true membership, which attacks never see: an attack puts in
``AttackResult.extras["estimates"][metric]`` either a :class:`privgate.stats.Estimate` or a :class:`Measure`
(per-example quantities computed blind, with ``estimate(membership, confidence) -> Estimate``), and the gate calls
it on all audit examples (no threshold is picked on them, so no calibration split). The interval choices are on
each class and in ``docs/whitebox.md``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np
from scipy import stats as _st
from scipy.special import gammaln

from privgate.stats.binomial import bonferroni, clopper_pearson
from privgate.stats.membership import Estimate

#: Fewest classes with both members and non-members for a similarity interval.
MIN_CLASSES = 3


@runtime_checkable
class Measure(Protocol):
    """Per-example quantities computed blind; the gate supplies the hidden membership."""

    metric: str

    def estimate(self, membership: np.ndarray, confidence: float) -> Estimate:
        """The metric with its interval, given the audit examples' true membership."""


# --------------------------------------------------------------------------- similarity


def expected_max_of_subset(values: np.ndarray, k: int) -> float:
    """E[max of a uniformly random k-subset] of ``values`` (without replacement), exactly.

    With the values sorted ascending v₍₁₎ ≤ … ≤ v₍ₙ₎, the maximum of a random
    k-subset is v₍ⱼ₎ with probability C(j−1, k−1) / C(n, k) for j ≥ k. Used to
    compare "nearest member" with "nearest non-member" over pools of the same
    size: the maximum over a larger pool is larger by chance alone.
    """
    v = np.sort(np.asarray(values, dtype=float))
    n = len(v)
    if not 1 <= k <= n:
        raise ValueError(f"k must be in 1..{n}, got {k}")
    j = np.arange(k, n + 1)
    logw = gammaln(j) - gammaln(k) - gammaln(j - k + 1) - (gammaln(n + 1) - gammaln(k + 1) - gammaln(n - k + 1))
    w = np.exp(logw)
    return float(np.dot(w / w.sum(), v[k - 1 :]))


def _class_gaps(sim: np.ndarray, groups: np.ndarray, membership: np.ndarray) -> list[dict[str, float]]:
    rows = []
    for c in np.unique(groups):
        sel = groups == c
        s_in, s_out = sim[sel & membership], sim[sel & ~membership]
        if len(s_in) == 0 or len(s_out) == 0:
            continue
        k = min(len(s_in), len(s_out))
        a, b = expected_max_of_subset(s_in, k), expected_max_of_subset(s_out, k)
        rows.append(
            {
                "class": int(c),
                "n_members": len(s_in),
                "n_nonmembers": len(s_out),
                "pool": k,
                "member": a,
                "nonmember": b,
                "gap": a - b,
            }
        )
    return rows


@dataclass(frozen=True)
class ReconstructionSimilarity:
    """Metric ``similarity``: how much closer reconstructions are to training records than to unseen ones.

    One reconstruction per class (model inversion, Fredrikson, Jha & Ristenpart
    2015, doi:10.1145/2810103.2813677). For class c let S⁺_c be the similarity
    of the reconstruction to its *nearest member* of class c and S⁻_c to its
    nearest *non-member* of class c, each taken as the expected maximum over a
    random pool of k_c = min(#members_c, #non-members_c) records
    (:func:`expected_max_of_subset`), so unequal pool sizes do not bias the
    comparison. The per-class gap is d_c = S⁺_c − S⁻_c and the reported value is
    the mean gap over the K classes: 0 when reconstructions resemble the class
    as a whole, positive when they resemble the specific training records.

    Interval: a paired Student-t interval over classes, mean(d) ± t_{K−1}·sd(d)/√K.
    The classes are the independent units (each has its own reconstruction and
    its own records); with K ≈ 10 a bootstrap over classes under-covers, and a
    per-record interval would pretend the records of one class are independent
    evidence about one reconstruction. ``details`` also gives an exact one-sided
    sign test of "closer to a member than to a non-member" (k of K classes,
    p = P[Binom(K, ½) ≥ k]), which needs no distributional assumption.
    Unresolvable with fewer than :data:`MIN_CLASSES` classes holding both
    members and non-members.

    Args:
        similarity: per audit example, its similarity to its class's reconstruction.
        groups: per audit example, its class (the reconstruction it was compared with).
        measure: name of the similarity (``cosine`` or ``ssim``).
        secondary: other similarities of the same pairs, summarised in ``details`` only.
    """

    similarity: np.ndarray
    groups: np.ndarray
    measure: str = "cosine"
    secondary: Mapping[str, np.ndarray] = field(default_factory=dict)
    metric: str = "similarity"

    def estimate(self, membership: np.ndarray, confidence: float) -> Estimate:
        m = np.asarray(membership, dtype=bool)
        g = np.asarray(self.groups)
        rows = _class_gaps(np.asarray(self.similarity, dtype=float), g, m)
        n1, n0 = int(m.sum()), int((~m).sum())
        K = len(rows)
        if K < MIN_CLASSES:
            return Estimate.unresolved(
                self.metric,
                f"only {K} class(es) have both members and non-members in the audit data; the similarity gap's "
                f"interval is over classes and needs at least {MIN_CLASSES} (with fewer classes, bound the "
                "inversion attack's auc or accuracy instead: its scores are the same similarities)",
                confidence,
                n1,
                n0,
            )
        d = np.array([r["gap"] for r in rows])
        mean = float(d.mean())
        half = float(_st.t.ppf(1 - (1 - confidence) / 2, K - 1) * d.std(ddof=1) / math.sqrt(K))
        closer = int(np.sum(d > 0))
        details = {
            "measure": self.measure,
            "interval": "paired Student-t over classes",
            "classes": K,
            "member_similarity": float(np.mean([r["member"] for r in rows])),
            "nonmember_similarity": float(np.mean([r["nonmember"] for r in rows])),
            "closer_to_member": closer,
            "sign_test_p": float(_st.binom.sf(closer - 1, K, 0.5)),
            "per_class": [{k: (round(v, 6) if isinstance(v, float) else v) for k, v in r.items()} for r in rows],
        }
        for name, values in self.secondary.items():
            other = _class_gaps(np.asarray(values, dtype=float), g, m)
            details[f"{name}_gap"] = float(np.mean([r["gap"] for r in other]))
            details[f"{name}_member_similarity"] = float(np.mean([r["member"] for r in other]))
            details[f"{name}_nonmember_similarity"] = float(np.mean([r["nonmember"] for r in other]))
        return Estimate(self.metric, mean, mean - half, mean + half, confidence, n1, n0, details=details)


# --------------------------------------------------------------------------- attribute inference


def paired_advantage(b: int, c: int, n: int, confidence: float) -> tuple[float, float, float]:
    """Exact (conservative) interval for Δ = P(A right, B wrong) − P(A wrong, B right).

    With n paired guesses, b of which only A gets right and c only B: Δ = q(2p − 1)
    where q = P(discordant) and p = P(A right | discordant). q gets a
    Clopper-Pearson interval from (b + c, n) and p from (b, b + c) (exact
    conditionally on b + c, hence unconditionally), each at 1 − α/2; Δ is then
    bounded by the extremes of q(2p − 1) over the box, which holds jointly at
    1 − α (Bonferroni). This is the exact McNemar construction, extended to the
    unconditional difference; it never under-covers. Returns (Δ̂, lo, hi).
    """
    if n <= 0:
        return float("nan"), -1.0, 1.0
    per = bonferroni(confidence, 2)
    q_lo, q_hi = clopper_pearson(b + c, n, per)
    p_lo, p_hi = clopper_pearson(b, b + c, per) if b + c > 0 else (0.0, 1.0)
    lo_f, hi_f = 2 * p_lo - 1, 2 * p_hi - 1
    lo = q_hi * lo_f if lo_f < 0 else q_lo * lo_f
    hi = q_hi * hi_f if hi_f > 0 else q_lo * hi_f
    return (b - c) / n, lo, hi


@dataclass(frozen=True)
class PairedGuesses:
    """Metric ``attribute_advantage``: the attack's accuracy on members minus the baseline's.

    For each audit example the attack guesses its sensitive value from the
    model's outputs and the other columns (Fredrikson et al. 2014, USENIX
    Security; Yeom et al. 2018, arXiv 1709.01604; Mehnaz et al. 2022, arXiv
    2201.09370) and a model-free baseline guesses it from the population alone.
    The value is acc_attack(members) − acc_baseline(members), measured on the
    same members (paired), with the exact interval of :func:`paired_advantage`.
    ``details`` adds the same advantage on non-members and the member −
    non-member gap of the attack's accuracy (Yeom et al.'s attribute advantage):
    an advantage that is as large on non-members is population-level inference
    (Jayaraman & Evans 2022, arXiv 2209.01292), not memorisation.

    Args:
        attack_correct: per audit example, whether the attack's guess is right.
        baseline_correct: per audit example, whether the baseline's guess is right.
        baseline: name of the baseline, for the report.
    """

    attack_correct: np.ndarray
    baseline_correct: np.ndarray
    baseline: str = "population"
    metric: str = "attribute_advantage"

    def _counts(self, sel: np.ndarray) -> tuple[int, int, int]:
        a = np.asarray(self.attack_correct, dtype=bool)[sel]
        z = np.asarray(self.baseline_correct, dtype=bool)[sel]
        return int(np.sum(a & ~z)), int(np.sum(~a & z)), int(sel.sum())

    def estimate(self, membership: np.ndarray, confidence: float) -> Estimate:
        m = np.asarray(membership, dtype=bool)
        a = np.asarray(self.attack_correct, dtype=bool)
        z = np.asarray(self.baseline_correct, dtype=bool)
        n1, n0 = int(m.sum()), int((~m).sum())
        if n1 == 0:
            return Estimate.unresolved(self.metric, "no members in the audit data", confidence, n1, n0)
        b, c, n = self._counts(m)
        value, lo, hi = paired_advantage(b, c, n, confidence)
        acc_in, acc_out = float(a[m].mean()), (float(a[~m].mean()) if n0 else float("nan"))
        details = {
            "interval": "exact paired (Clopper-Pearson on discordant pairs, Bonferroni)",
            "baseline": self.baseline,
            "attack_accuracy_members": acc_in,
            "baseline_accuracy_members": float(z[m].mean()),
            "attack_accuracy_nonmembers": acc_out,
            "baseline_accuracy_nonmembers": float(z[~m].mean()) if n0 else float("nan"),
            "advantage_nonmembers": (float(a[~m].mean() - z[~m].mean()) if n0 else float("nan")),
            "member_nonmember_gap": acc_in - acc_out,
            "only_attack_right": b,
            "only_baseline_right": c,
        }
        return Estimate(self.metric, value, lo, hi, confidence, n1, n0, details=details)


# --------------------------------------------------------------------------- isolation (tree structure)


@dataclass(frozen=True)
class IsolatedFraction:
    """Metric ``isolated_fraction``: the share of members a released tree model isolates in leaves of fewer than k rows.

    A fitted decision tree, forest or boosted model stores how many training
    rows reached each leaf. A member that falls, in some tree, into a leaf
    holding fewer than ``k`` training rows is in a group too small to hide in:
    whoever holds the model learns that fewer than ``k`` training records lie in
    that region, with their labels (the k-anonymity and small-group risks of
    SACRO-ML's structural attack, Smith et al. 2022, arXiv 2212.01233; the
    structural metrics of Preen & Smith 2025, arXiv 2502.09396). The
    value is c / n over the audit's members, c of them isolated, with an exact
    Clopper-Pearson interval (Clopper & Pearson 1934) at the check's
    confidence; ``details`` gives the same share among non-members, which a
    model that isolates every region also scores high on.

    Args:
        smallest: per audit example, the fewest training rows of a leaf it falls into, over every tree.
        k: a leaf with fewer training rows isolates its examples.
    """

    smallest: np.ndarray
    k: int
    metric: str = "isolated_fraction"

    def estimate(self, membership: np.ndarray, confidence: float) -> Estimate:
        m = np.asarray(membership, dtype=bool)
        isolated = np.asarray(self.smallest) < self.k
        n1, n0 = int(m.sum()), int((~m).sum())
        if n1 == 0:
            return Estimate.unresolved(self.metric, "no members in the audit data", confidence, n1, n0)
        c = int(isolated[m].sum())
        lo, hi = clopper_pearson(c, n1, confidence)
        details = {
            "interval": "Clopper-Pearson",
            "k": self.k,
            "members_isolated": c,
            "nonmembers_isolated_fraction": float(isolated[~m].mean()) if n0 else float("nan"),
            "median_smallest_leaf_members": float(np.median(np.asarray(self.smallest)[m])),
        }
        return Estimate(self.metric, c / n1, lo, hi, confidence, n1, n0, details=details)
