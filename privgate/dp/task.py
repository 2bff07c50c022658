"""What the one ε search asks of a kind of model: train a candidate, measure it, audit it, state its guarantee.

The search (:func:`privgate.dp.remediate.search`) is one state machine for every kind of model; a
:class:`HardenTask` supplies what differs — tabular DP-SGD retraining
(:class:`privgate.dp.tabular_task.TabularTask`), a scikit-learn model's capacity, DP fine-tuning of a Hugging Face
folder's public base (registered by the language-model package as a ``privgate.harden_tasks`` entry point). The kind
is decided once, at the door (:func:`privgate.inputs.targets.is_huggingface`); tasks are named ``"module:Class"``
and imported on first use. Each kind's part: ``docs/internals-dp-audits.md``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from privgate.lazy import load
from privgate.plugins import registered

if TYPE_CHECKING:
    from pathlib import Path

    from privgate.dp.candidates import Candidate
    from privgate.dp.search import Searched
    from privgate.dpsgd.records import DPSettings, DPTraining
    from privgate.options import RunOptions
    from privgate.policy import Policy
    from privgate.report.model import Report
    from privgate.report.remediation_section import Hyperparameter, RemediationSection, SearchSettings

#: Family of model → the task that hardens it (the families this package hardens itself).
TASKS = {
    "tabular": "privgate.dp.tabular_task:TabularTask",
    "sklearn": "privgate.dp.capacity_task:CapacityTask",
}
#: The entry-point group other packages register harden tasks in.
GROUP = "privgate.harden_tasks"

#: Files a scikit-learn model comes in: without a recipe, its capacity is searched (no DP-SGD to run).
SKLEARN_SUFFIXES = (".skops", ".joblib", ".pkl", ".pickle")


class Plan:
    """How every candidate of one search trains: the DP-SGD settings, and where each came from (for the report)."""

    def __init__(
        self,
        settings: DPSettings,
        section: SearchSettings,
        hyper: list[Hyperparameter],
        clip_from: str,
        clip_trainings: int = 0,
    ) -> None:
        self.settings, self.section, self.hyper = settings, section, hyper
        self.clip_from, self.clip_trainings = clip_from, clip_trainings


class HardenTask:
    """The kind-specific half of hardening (module docstring). Attributes a task sets:

    Attributes:
        policy: the policy, with its ``remediation`` and ``utility`` sections.
        target, data, audit_recipe: what the gate audits the original on (and the recipe it gets).
        n_units: the number of units of privacy (training rows, records or users): it sets q and δ.
        trained_as: a candidate's label (``DP-SGD``, ``DP fine-tune``); ``training``: the training, in a sentence
            (``DP-SGD``, ``DP fine-tuning``); ``trainings``: how the summary counts them.
        metric, utility_source: the utility and the held-out data it is measured on.
        candidate: the :class:`~privgate.dp.candidates.Candidate` type (whether utility is higher- or lower-better).
        original_seconds: how long the original model's audit took (the search sets it once it is known), what a
            task that walks its own schedule estimates the walk's time from.
    """

    policy: Policy
    #: The policy each candidate is audited under, when stricter than ``policy`` (a capacity search's budget split).
    audit_policy: Policy | None = None
    target: Any
    data: Any
    audit_recipe: Any = None
    n_units: int = 0
    trained_as = "DP-SGD"
    training = "DP-SGD"
    trainings = "training(s)"
    metric = "accuracy"
    utility_source = ""
    original_seconds = 0.0
    #: The held-out baselines (:meth:`privgate.stats.trivial.Trivial.as_dict`) when utility is accuracy (set by floor).
    baseline: dict[str, Any] | None = None
    candidate: type[Candidate]
    #: ``dp``: a DP search over an ε schedule (``plan`` returns its settings); ``capacity``: no DP, ``plan``
    #: returns ``None`` and the task walks its own schedule (:meth:`walk`, :meth:`hardened`).
    method = "dp"
    #: The status when no candidate is accepted.
    nothing = "no_epsilon"

    @classmethod
    def open(cls, settings: Any, run: RunOptions) -> HardenTask:
        """The task of ``settings`` (a :class:`~privgate.settings.HardenSettings`): bad input refused, inputs loaded."""
        raise NotImplementedError

    def utility(self, target: Any) -> tuple[float, list[float]]:
        """Held-out utility of an audited model (the original, or a candidate as :meth:`audited` made it)."""
        raise NotImplementedError

    def floor(self, original: float) -> tuple[float | None, str]:
        """The utility floor (a perplexity ceiling) and the rule that set it."""
        raise NotImplementedError

    def plan(self, run: RunOptions) -> Plan | None:
        """The search's DP-SGD settings, fixed once after the original audit (it may train, e.g. the clip search);
        ``None`` for a search without DP, which the task walks itself."""
        raise NotImplementedError

    def walk(
        self, section: RemediationSection, floor: float | None, run: RunOptions, on_row: Any
    ) -> tuple[Searched, list[Candidate]]:
        """A search without DP (``plan`` gave ``None``): its candidates, each row sent to ``on_row`` when decided."""
        raise NotImplementedError

    def hardened(self, section: RemediationSection, chosen: Candidate, original: float, floor: float | None,
                 n: int) -> str:  # fmt: skip
        """A search without DP: the hardened ending's section and the report's summary."""
        raise NotImplementedError

    def train(self, epsilon: float, sigma: float, seed: int, run: RunOptions) -> tuple[Any, DPTraining]:
        """One candidate trained with DP-SGD at σ from the public start: the model and its DP record."""
        raise NotImplementedError

    def audited(self, model: Any, record: DPTraining, label: str) -> tuple[Any, Any]:
        """The candidate as the gate audits it: its target and the recipe the gate gets."""
        raise NotImplementedError

    # ------------------------------------------------------------------ what the section says

    def selection_statement(self, n: int, basis: str, clip_from: str) -> str:
        raise NotImplementedError

    def utility_phrase(self, value: float, original: float, floor: float | None) -> str:
        """``with utility … (original …, floor …)`` of the hardened ending."""
        raise NotImplementedError

    def utility_of(self, value: float) -> str:
        """One candidate's utility in a sentence (``utility 0.9123``)."""
        raise NotImplementedError

    def reason(self, reason: str | None, floor: float | None) -> str | None:
        """The search's reason for finding no ε, in this kind's words (and when the floor is the baseline's, so)."""
        b = self.baseline
        if reason and floor is not None and b and b.get("floor") == floor and "utility floor" in reason:
            reason += (
                f" — the floor is the baseline's: a model no better than always predicting the most common label "
                f"{str(b.get('label'))!r} ({b['majority']:.4f} on these rows) is never handed out"
            )
        return reason

    def statement(self) -> dict[str, Any]:
        """The DP statement's parts that depend on the kind: ``public``, ``model_kind``, ``unit``, ``unit_note``."""
        raise NotImplementedError

    def sampling(self) -> str | None:
        """How units join a step, when not rows (``None``: the statement's default)."""
        return None

    def one_run_audit(self, chosen: Candidate, settings: DPSettings, run: RunOptions) -> dict[str, Any] | str:
        """The one-run audit of the chosen settings (``remediation.audit``), or why it was not run."""
        raise NotImplementedError

    def files(self, report: Report, chosen: Candidate) -> tuple[Report, dict[Path, tuple[str, bytes]]]:
        """The hardened model's files to write (and the report describing them)."""
        raise NotImplementedError


def kind_of(model: Any, recipe: Any = None) -> str:
    """Which task hardens ``model`` (a path or a model in memory): ``huggingface`` for a model folder;
    ``sklearn`` for a scikit-learn model given without a recipe (a ``.skops``, joblib or pickle file, or a
    fitted estimator); else ``tabular`` (DP-SGD of the recipe). Reads no file."""
    import os
    from pathlib import Path

    from privgate.inputs.targets import is_huggingface

    if is_huggingface(model):
        return "huggingface"
    if recipe is None:
        if isinstance(model, (str, os.PathLike)):
            if Path(model).suffix.lower() in SKLEARN_SUFFIXES:
                return "sklearn"
        elif callable(getattr(model, "get_params", None)) or "sklearn" in (
            getattr(model, "target_kind", None),
            getattr(getattr(model, "model", None), "target_kind", None),  # a Target holding one
        ):
            return "sklearn"
    return "tabular"


def task_class(model: Any, recipe: Any = None) -> type[HardenTask]:
    """The task that hardens ``model`` with ``recipe`` (:func:`kind_of`), imported on first use."""
    kind = kind_of(model, recipe)
    where = TASKS.get(kind) or tasks().get(kind)  # a built-in task reads no package's metadata
    if where is None:
        raise KeyError(f"no harden task registered for {kind!r} models ({GROUP} entry points: reinstall privgate)")
    return load(where)


def tasks() -> dict[str, str]:
    """Every family of model and the ``"module:Class"`` task that hardens it: :data:`TASKS` and the registered."""
    return {**registered(GROUP), **TASKS}


__all__ = ["GROUP", "SKLEARN_SUFFIXES", "TASKS", "HardenTask", "Plan", "kind_of", "task_class", "tasks"]
