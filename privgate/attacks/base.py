"""The attack protocol: an attack turns a target and audit inputs into per-example scores.

Attacks never see which audit examples are members: the context gives them the
pooled audit inputs (members and non-members shuffled together) and the gate
attaches the true membership afterwards. They never compute metrics or verdicts.
"""

from __future__ import annotations

import inspect
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from privgate.attacks.catalogue import ThreatModel
from privgate.options import RunOptions

if TYPE_CHECKING:
    from collections.abc import Callable

    from privgate.attacks.budget import CostFacts
    from privgate.attacks.crossfit import CalibrationLabels
    from privgate.inputs.data import Dataset
    from privgate.inputs.target import Target
    from privgate.recipe import Recipe


@dataclass
class AttackContext:
    """What an attack may use. ``x``/``y`` are the pooled audit examples, membership hidden.

    Attributes:
        target: the model under audit.
        x, y: the pooled audit inputs and labels (members and non-members
            shuffled together).
        population: more same-distribution rows known to be outside the
            training set, when given.
        recipe: how the target was trained, when given.
        options: this attack's own options, from the policy.
        run: the run's settings (:class:`privgate.options.RunOptions`): its
            seed, its thread budget — torch's intra-op threads, BLAS and
            OpenMP; the gate runs each attack inside
            :func:`privgate.threads.limit_threads`, and attacks that
            fit scikit-learn models keep ``n_jobs`` at 1 and pass the budget on
            to anything that starts its own threads — and the reference-model
            cache and engine.
    """

    target: Target
    x: np.ndarray
    y: np.ndarray
    population: Dataset | None = None
    recipe: Recipe | None = None
    options: dict[str, Any] = field(default_factory=dict)
    run: RunOptions = field(default_factory=RunOptions)
    #: reference models trained earlier in this run, by their number: attacks asking for as many share them
    #: (:func:`privgate.attacks.reference.build_references`)
    ensembles: dict[int, Any] = field(default_factory=dict, repr=False)
    #: the most reference models any attack of this run will ask for: the first to ask trains that many, and
    #: every attack reads the first of them it needs (:mod:`privgate.attacks.sharing`); 0: each trains its own
    planned_models: int = 0

    @property
    def seed(self) -> int:
        """The run's seed (every attack derives its random streams from it)."""
        return self.run.seed

    @property
    def threads(self) -> int | None:
        """The run's thread budget (``None``: one thread)."""
        return self.run.threads

    @cached_property
    def device(self) -> str:
        """Where the attack's tensors live: the run's device, ``auto`` resolved (``cpu`` or ``cuda``)."""
        return self.run.resolved().device

    def per_row(self, fn: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> np.ndarray:
        """``fn(log_proba, y)`` of the target on every audit example, streamed a chunk of rows at a time.

        ``fn`` maps a chunk's ``[rows, classes]`` log-probabilities (float64, from
        log-softmax: no saturation) and labels to one value per row, using each
        row alone; memory holds one chunk's matrix, not all of them
        (:meth:`privgate.inputs.target.Target.map_rows`). Prefer it to
        :attr:`log_proba`, which holds ``[n, classes]`` float64 at once.
        """
        return self.target.map_rows(self.x, self.y, fn)

    @cached_property
    def proba(self) -> np.ndarray:
        """The target's class probabilities ``[n, classes]`` on the audit examples (computed once, held)."""
        return self.target.predict_proba(self.x)

    @cached_property
    def log_proba(self) -> np.ndarray:
        """Log class probabilities ``[n, classes]`` (from log-softmax, no saturation), computed once and held.

        For statistics of one row at a time use :meth:`per_row`, whose memory does
        not grow with the number of audit rows times the number of classes.
        """
        return self.target.log_proba(self.x)

    @cached_property
    def labels(self) -> np.ndarray:
        """The target's predicted labels on the audit examples (computed once, a chunk of rows at a time)."""
        return self.target.predict(self.x)


@dataclass
class AttackResult:
    """Per-example membership scores (higher = more likely member) and what they cost.

    An attack that learns how to score from examples of known membership (the
    learned attack, two-sided thresholds) leaves ``scores`` as a label-free
    placeholder and sets ``fitted``: the gate calls it once with
    :class:`~privgate.attacks.crossfit.CalibrationLabels` — the calibration
    split's membership, never the evaluation split's — and uses what it returns
    (cross-fitted, see :mod:`privgate.attacks.crossfit`) as the scores.
    """

    attack: str
    threat_model: ThreatModel
    scores: np.ndarray
    seconds: float = 0.0
    models_trained: int = 0
    groups: np.ndarray | None = None  # class labels when thresholds are class-dependent
    options: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    extras: dict[str, Any] = field(default_factory=dict)
    fitted: Callable[[CalibrationLabels], np.ndarray] | None = None


class Attack(ABC):
    """Base class of every attack.

    Subclasses set ``name`` and ``threat_model``, declare their options as
    keyword arguments of ``__init__`` (unknown options are a policy error), and
    implement :meth:`run`, which returns one score per audit example.

    Attributes:
        name: the name policies use.
        threat_model: the access the attack needs (``black-box``, ``label-only``, ``white-box``).
        needs_recipe: it trains reference models, so it needs the recipe.
        diagnostic: it looks at the data only, never at the model (the blind
            baseline): it is reported, but never decides a ``best`` check.
        reads_structure: a white-box attack that reads a fitted model's structure (a scikit-learn model's trees),
            not a torch module's weights.
        numeric_rows: it adds noise to the rows or learns from their numbers, so it cannot run on a table with
            text columns. The kind of target decides both (:mod:`privgate.attacks.contexts.sklearn`).
    """

    name: ClassVar[str]
    threat_model: ClassVar[ThreatModel]
    needs_recipe: ClassVar[bool] = False
    diagnostic: ClassVar[bool] = False
    reads_structure: ClassVar[bool] = False
    numeric_rows: ClassVar[bool] = False

    def __init__(self, **options: Any) -> None:
        if options:
            raise TypeError(self._unknown(options))
        self.options: dict[str, Any] = {}

    @classmethod
    def option_names(cls) -> list[str]:
        """The options this attack accepts: the keyword arguments of its ``__init__``."""
        params = inspect.signature(cls.__init__).parameters.values()
        kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
        return [p.name for p in params if p.name != "self" and p.kind in kinds]

    @classmethod
    def _unknown(cls, options: dict[str, Any]) -> str:
        from privgate.errors import shown
        from privgate.inputs.suggest import did_you_mean

        first = sorted(options, key=str)[0]
        known = cls.option_names()
        more = f" and {len(options) - 1} more" if len(options) > 1 else ""
        return (
            f"unknown option {shown(first)}{more}{did_you_mean(first, known)}"
            f" (options of '{getattr(cls, 'name', cls.__name__)}': {', '.join(known) or 'none'})"
        )

    def estimated_seconds(self, facts: CostFacts) -> float | None:
        """Seconds this attack, with its options, is expected to take on ``facts`` (:mod:`privgate.attacks.budget`).

        The default is one pass of the target over the audit rows; an attack
        that queries more, trains or fits says so. None: not known.
        """
        return facts.pass_s

    @abstractmethod
    def run(self, ctx: AttackContext) -> AttackResult:
        """Score every audit example in ``ctx``.

        Args:
            ctx: the target, the pooled audit inputs and, when available, the
                population data and the training recipe.

        Returns:
            An :class:`AttackResult` with one score per row of ``ctx.x``.
        """


class AttackSkipped(Exception):
    """Raised by an attack that cannot run on this target/data; the message says why.

    The gate records the attack as skipped and any check on it as inconclusive,
    and the rest of the audit goes on.
    """
