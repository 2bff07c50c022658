"""The distribution-shift guard as the language-model audit's diagnostic, run by the gate's one loop.

Duan et al. 2024 (MIMIR, arXiv 2402.07841): when the blind n-gram classifier
(:func:`privgate.lm.shift.distribution_shift`) tells the members' texts from the non-members' (its AUC interval
excludes ½), no membership check can pass on them (:meth:`DistributionShift.guard`). Like the tabular blind
baseline (Das et al. 2024, arXiv 2406.16201) it looks at the data, not the model, and never decides a ``best``
check. Every causal language-model audit runs it whatever the policy names, so it is not in the attack registry.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from privgate.attacks.base import Attack, AttackContext, AttackResult
from privgate.lm.attacks.context import lm_context
from privgate.report.model import AttackSummary

SHIFT = "distribution_shift"
#: What a passing membership check becomes inconclusive with when the guard finds the data biased.
GUARD = (
    "the audit data are biased (the distribution-shift guard separates members from non-members), so it cannot "
    "pass on them"
)


class DistributionShift(Attack):
    """The blind n-gram guard of the audit's texts (module docstring); its result is its :class:`ShiftReport`."""

    name = SHIFT
    threat_model = "black-box"
    diagnostic = True

    def run(self, ctx: AttackContext) -> AttackResult:
        lm = lm_context(ctx, self.name)
        t0 = time.perf_counter()
        extras: dict[str, Any]
        try:
            from privgate.lm.shift import distribution_shift
        except ImportError:
            extras = {"unavailable": "the distribution-shift guard is not available in this version of privgate"}
        else:
            conf = lm.policy.confidence
            extras = {"shift": distribution_shift(lm.members, lm.nonmembers, seed=ctx.seed, confidence=conf)}
        return AttackResult(self.name, self.threat_model, np.zeros(0), time.perf_counter() - t0, extras=extras)

    def summarise(self, result: AttackResult) -> AttackSummary:
        """The guard's line of the report: its AUC and interval, or why it could not be measured."""
        if "unavailable" in result.extras:
            return AttackSummary(
                name=SHIFT, threat_model="black-box", status="unavailable", reason=result.extras["unavailable"]
            )
        rep = result.extras["shift"]
        return AttackSummary(
            name=SHIFT,
            threat_model="black-box",
            status="ran" if rep.resolvable else "skipped",
            reason=rep.reason,
            auc=rep.auc,
            auc_ci=[rep.lo, rep.hi],
            n_members=rep.evaluation_members,
            n_nonmembers=rep.evaluation_nonmembers,
            seconds=round(result.seconds, 4),
            notes=["a blind n-gram classifier that never queries the model (Duan et al. 2024, arXiv 2402.07841)"],
            extras={
                "biased": rep.biased,
                "member_ngrams": rep.member_ngrams,
                "nonmember_ngrams": rep.nonmember_ngrams,
                "confidence": rep.confidence,
            },
        )


def shift_warning(result: AttackResult | None) -> str | None:
    """The report's warning when the guard found the audit data biased (``None`` when it did not)."""
    rep = None if result is None else result.extras.get("shift")
    if rep is None or not rep.biased:
        return None
    return (
        f"audit data biased: a blind n-gram classifier that never queries the model tells members from non-members "
        f"(AUC {rep.auc:.3f} [{rep.lo:.3f}, {rep.hi:.3f}]), so the attacks may measure that difference rather than "
        "what the model memorised (Duan et al. 2024); no membership check can pass on these data — draw members "
        "and non-members from one distribution, e.g. by a random split"
    )


__all__ = ["GUARD", "SHIFT", "DistributionShift", "shift_warning"]
