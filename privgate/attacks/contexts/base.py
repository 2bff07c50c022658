"""What one audit of one kind of target gives the gate: the policy as it runs there, the pooled rows, the context.

The gate (:mod:`privgate.gate`) asks the target's kind (:func:`privgate.attacks.contexts.audit_kind`) for an
:class:`AuditKind` and runs the attacks it names on one shared context; adding a kind is a file and one line in
:data:`privgate.attacks.contexts.KINDS`. A kind may run **diagnostics** that look at the data, not the model (the
blind baseline, Das et al. 2024, arXiv 2406.16201; the shift guard, Duan et al. 2024, arXiv 2402.07841): they never
decide a ``best`` check, and one that finds the data unsound says so through :meth:`AuditKind.guards`, so no
membership check passes. Details: ``docs/internals-attacks-lm.md``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from privgate.attacks.base import Attack, AttackContext
    from privgate.options import RunOptions
    from privgate.policy import Policy
    from privgate.report.model import AttackSummary


@dataclass(frozen=True)
class Pooled:
    """The audit records in the order the attacks see them: members and non-members shuffled together (seeded).

    Attributes:
        membership: the true membership (never shown to an attack).
        calibration: the calibration split (thresholds, learned scores); the rest is the evaluation split.
        member_rows: each member's row in the members file as given; −1 for non-members.
        labels: each row's class label (language models: 0).
        rows: each row's 0-based index in its own file as given (members or non-members), when the kind knows it.
    """

    membership: np.ndarray
    calibration: np.ndarray
    member_rows: np.ndarray
    labels: np.ndarray
    rows: np.ndarray | None = None


def pooled_order(n_members: int, n_nonmembers: int, seed: int) -> np.ndarray:
    """The permutation that pools ``n_members`` members (first) and ``n_nonmembers`` non-members, from ``seed``."""
    return np.random.default_rng(np.random.SeedSequence([seed, 0xA11])).permutation(n_members + n_nonmembers)


class AuditKind:
    """One audit of one kind of target (module docstring); made by the kind's class from the gate's inputs.

    Attributes:
        policy: the policy as it runs on this kind (a language model's translated one): its attacks run and
            its checks are decided.
        shown_policy: the policy the report names (``policy_facts``).
        pooled: the pooled rows; ``ctx``: what the attacks read.
        missing, summaries: attacks reported before the loop (not applicable to this kind), with the reason.
        diagnostics: diagnostics the kind runs after the policy's attacks, whatever the policy names.
    """

    policy: Policy
    shown_policy: Policy
    pooled: Pooled
    ctx: AttackContext

    def __init__(self) -> None:
        self.missing: dict[str, str] = {}
        self.summaries: list[AttackSummary] = []
        self.diagnostics: list[Attack] = []

    # ------------------------------------------------------------------ what the loop asks

    def __enter__(self) -> AuditKind:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def inspect(self) -> None:
        """Checks of the target on its data before any attack runs (:func:`privgate.gate.check_model` only)."""

    def todo(self) -> dict[str, dict[str, Any]]:
        """The attacks to run, in order, with their options."""
        return self.policy.attacks_to_run()

    def unavailable(self, name: str) -> tuple[str, str] | None:
        """``(status, reason)`` when attack ``name`` cannot run on this target (``None``: it runs)."""
        return None

    def finish(self, ran: dict[str, Any], missing: dict[str, str]) -> None:
        """After the loop: what the kind adds to the reasons of the checks that have no attack."""

    # ------------------------------------------------------------------ what the report says

    def guards(self, ran: dict[str, Any]) -> list[str]:
        """Why no membership check can pass on these data (the diagnostics' findings); empty when it can."""
        return []

    def exposed(self, section: dict[str, Any], run: RunOptions) -> dict[str, Any]:
        """The ``exposed`` section with what shows each record (an image, its text)."""
        return section

    def target_facts(self) -> dict[str, Any]:
        raise NotImplementedError

    def data_facts(self) -> dict[str, Any]:
        raise NotImplementedError

    def warnings(self, ran: dict[str, Any], summaries: list[AttackSummary]) -> list[str]:
        raise NotImplementedError


def cache_warnings(ran: dict[str, Any]) -> list[str]:
    """The reference-model cache's warnings of every attack that ran, each once."""
    return list(dict.fromkeys(w for r in ran.values() for w in r.result.extras.get("cache_warnings", [])))


__all__ = ["AuditKind", "Pooled", "cache_warnings", "pooled_order"]
