"""The tabular kind: a classifier on rows of features (tables, images), audited from its outputs or weights.

Members and non-members are pooled and shuffled with the seed (:func:`audit_rows`) and read through an
:class:`~privgate.attacks.base.AttackContext` (through the policy's ``serves:`` surface when served by an API);
reference models are shared (:mod:`privgate.attacks.sharing`); a probe fixes how outputs are read and measures the
accuracy on each side (:func:`privgate.inputs.sanity.inspect_target`). The blind baseline (Das, Zhang & Tramèr
2024, arXiv 2406.16201) is its diagnostic, its findings warnings (:func:`privgate.attacks.blind.soundness_warnings`).
Exposed members of grey-image data are shown as images in the artefacts folder.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from privgate import stats
from privgate.attacks import available_attacks, threat_model_of
from privgate.attacks.base import AttackContext
from privgate.attacks.contexts.base import AuditKind, Pooled, cache_warnings, pooled_order
from privgate.inputs.data import AuditData
from privgate.inputs.surface import surface_of
from privgate.inputs.target import Target
from privgate.options import RunOptions
from privgate.recipe import Recipe
from privgate.threads import limit_threads

if TYPE_CHECKING:  # the policy and the report are layers above the attacks
    from privgate.policy import Policy
    from privgate.report.model import AttackSummary


@dataclass(frozen=True)
class AuditRows:
    """The pooled audit rows in the order the attacks see them, split as the gate measures them.

    Attributes:
        x, y: inputs and labels, members and non-members shuffled together (seeded).
        membership: the true membership (never shown to an attack).
        calibration: the calibration split (thresholds, learned scores); the rest is the evaluation split.
        member_rows: each member's row in the members file as given; −1 for non-members.
        rows: each row's 0-based index in its own file as given (members or non-members file).
    """

    x: np.ndarray
    y: np.ndarray
    membership: np.ndarray
    calibration: np.ndarray
    member_rows: np.ndarray
    rows: np.ndarray | None = None


def audit_rows(data: AuditData, seed: int) -> AuditRows:
    """Pool, shuffle and split the audit data as the gate does (benchmarks compare peers on these rows)."""
    n1, n0 = len(data.members), len(data.nonmembers)
    y = np.r_[data.members.y, data.nonmembers.y]
    membership = np.r_[np.ones(n1, bool), np.zeros(n0, bool)]
    rows = np.r_[data.member_rows if data.member_rows is not None else np.arange(n1), np.full(n0, -1)]
    own = np.r_[rows[:n1], data.nonmember_rows if data.nonmember_rows is not None else np.arange(n0)]
    perm = pooled_order(n1, n0, seed)
    # attacks never see membership, nor its order
    y, membership, rows, own = y[perm], membership[perm], rows[perm], own[perm]
    # x = pooled x[perm], written in place: pooled row j goes to where[j], so no pooled copy of x is made
    where = np.empty_like(perm)
    where[perm] = np.arange(len(perm))
    x = np.empty((n1 + n0, *data.members.x.shape[1:]), dtype=np.result_type(data.members.x, data.nonmembers.x))
    x[where[:n1]] = data.members.x
    x[where[n1:]] = data.nonmembers.x
    return AuditRows(x, y, membership, stats.calibration_mask(membership, seed), rows, own)


def policy_warnings(policy: Policy) -> list[str]:
    """A warning when the policy names no attacks and its checks ran the default family."""
    if not policy.uses_default_attacks():
        return []
    family = "label-only" if policy.served().output == "label" else "black-box"
    return [
        f"the policy lists no attacks; its checks ran the default {family} family "
        f"({', '.join(policy.attacks_to_run())})"
    ]


#: The attacks that query the views of a recipe's ``augment`` (:mod:`privgate.attacks.views`).
VIEW_ATTACKS = ("lira", "rmia")


def unaugmented_warning(recipe: Recipe | None, x: np.ndarray, ran: dict[str, Any]) -> list[str]:
    """A warning when LiRA or RMIA ran on images with a training function that declares no augmentation.

    privgate cannot see whether the user's loop crops or flips; if it does, the
    attacks read the unaugmented images only (Carlini et al. 2022, arXiv
    2112.03570, §V) and may understate the leak. The recipe says it with ``augment``.
    """
    asked = [a for a in VIEW_ATTACKS if a in ran]
    if (
        recipe is None
        or not getattr(recipe, "own_loop", False)
        or recipe.augment is not None
        or x.ndim != 4
        or not asked
    ):
        return []
    return [
        f"recipe '{recipe.name}' is a training function that declares no augmentation, so {' and '.join(asked)} "
        "queried each image once, as it is; if your loop crops or flips, declare it to query the views it trained "
        'on: Recipe(train_fn=train, augment=Augment(crop_padding=4, flip=True)) (docs/attacks.md, "A model trained '
        'by your own loop")'
    ]


class TabularAudit(AuditKind):
    """An audit of a tabular target (module docstring).

    Args:
        target: the model under audit (moved to the run's device as a copy, seen through the policy's surface).
        data: known members and non-members (and optional population data).
        policy: the policy; recipe: how the target was trained (reference-model attacks need it).
        run: the run's options, resolved.
    """

    def __init__(self, target: Target, data: AuditData, policy: Policy, recipe: Recipe | None, run: RunOptions):
        super().__init__()
        self.surface = surface_of(policy)  # an API release: every query answered as the API answers it
        self.target = target.to_device(run.device).serving(self.surface)
        self.data, self.policy, self.shown_policy, self.recipe, self.run = data, policy, policy, recipe, run
        self.rows = r = audit_rows(data, run.seed)
        self.pooled = Pooled(r.membership, r.calibration, r.member_rows, r.y, r.rows)
        self.ctx = AttackContext(target=self.target, x=r.x, y=r.y, population=data.population, recipe=recipe, run=run)
        self.registry = available_attacks()
        self.sanity: Any = None
        if recipe is not None:
            from privgate.attacks.sharing import planned_models

            served = {  # the attacks the loop will not skip for the API's surface
                name: o for name, o in self.todo().items() if name in self.registry and self._served(name)
            }
            population = 0 if data.population is None else len(data.population)
            self.ctx.planned_models = planned_models(served, self.registry, population)

    def _served(self, name: str) -> bool:
        return (
            self.surface is None
            or self.registry[name].diagnostic
            or not self.surface.not_applicable(threat_model_of(name))
        )

    def inspect(self) -> None:
        """The data fit the target, and how its outputs are read is fixed from a probe (scored in the thread budget)."""
        from privgate.inputs.sanity import inspect_target

        given = (self.data.members, self.data.nonmembers, self.data.population)
        with limit_threads(self.run.threads):
            self.data.check_against(self.target)
            now = (self.data.members, self.data.nonmembers, self.data.population)
            if any(a is not b for a, b in zip(given, now)):
                self._pool()  # a table aligned with the model (its columns, its classes), rows dropped: pooled again
            self.sanity = inspect_target(self.target, self.data, self.recipe, self.policy.confidence)
        dropped = self.data.dropped
        if dropped is not None and dropped.total and "blind" not in self.todo():
            from privgate.attacks.blind import BlindAttack  # dropped rows may shift a side: the baseline says

            self.diagnostics.append(BlindAttack())

    def _pool(self) -> None:
        """The members and non-members pooled, shuffled and split as the attacks read them."""
        self.rows = r = audit_rows(self.data, self.run.seed)
        self.pooled = Pooled(r.membership, r.calibration, r.member_rows, r.y, r.rows)
        self.ctx.x, self.ctx.y, self.ctx.population = self.rows.x, self.rows.y, self.data.population

    def unavailable(self, name: str) -> tuple[str, str] | None:
        threat = threat_model_of(name)
        if name not in self.registry:
            return "unavailable", f"'{name}' is not implemented in this version of privgate"
        if not self._served(name):
            return "skipped", self.surface.not_applicable(threat)
        if threat == "white-box" and not self.target.white_box:
            return (
                "skipped",
                f"'{name}' needs the model's weights (white-box), but the target is {self.target.fmt} without a "
                "torch module",
            )
        if self.registry[name].needs_recipe and self.recipe is None:
            return "skipped", f"'{name}' trains reference models and needs a recipe (--recipe module:attr)"
        return None

    def exposed(self, section: dict[str, Any], run: RunOptions) -> dict[str, Any]:
        """Each exposed member of grey-image data as an image in the artefacts folder (when there is one)."""
        from privgate.attacks.inversion import image_shape
        from privgate.io.artefacts import save_artefacts
        from privgate.io.png import png_bytes

        if not run.artefacts_dir:
            return section
        shape, _ = image_shape(self.rows.x, self.recipe)
        if shape is None or len(shape) != 2:  # grey images only; colour images would need their channel order
            return section
        where = {int(m): i for i, m in enumerate(self.rows.member_rows) if m >= 0}
        x = self.rows.x.reshape(len(self.rows.x), -1)
        lo, hi = float(x.min()), float(x.max())
        files = {}
        for rec in section["records"]:
            img = x[where[rec["member_index"]]].reshape(shape)
            scaled = np.clip((img - lo) / max(hi - lo, 1e-12), 0, 1) * 255
            f = max(1, 48 // max(shape))
            files[f"member-{rec['member_index']}.png"] = png_bytes(
                scaled.repeat(f, 0).repeat(f, 1).round().astype(np.uint8)
            )
        paths = dict(zip(sorted(files), save_artefacts("exposed", files, run.artefacts_dir)))
        for rec in section["records"]:
            rec["image"] = paths[f"member-{rec['member_index']}.png"]
        return section

    def target_facts(self) -> dict[str, Any]:
        """The target, with its accuracy on members and non-members and how its outputs are read."""
        return {**self.target.describe(), **(self.sanity.describe() if self.sanity is not None else {})}

    def data_facts(self) -> dict[str, Any]:
        return self.data.describe()

    def warnings(self, ran: dict[str, Any], summaries: list[AttackSummary]) -> list[str]:
        from privgate.attacks.blind import soundness_warnings

        return (
            list(self.data.warnings)
            + policy_warnings(self.policy)
            + (self.sanity.warnings if self.sanity is not None else [])
            + soundness_warnings(summaries)  # blind: Das 2024
            + cache_warnings(ran)
            + unaugmented_warning(self.recipe, self.rows.x, ran)
        )


__all__ = ["AuditRows", "TabularAudit", "VIEW_ATTACKS", "audit_rows", "policy_warnings", "unaugmented_warning"]
