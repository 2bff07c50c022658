"""The report's ``remediation`` section, typed: the ε search's rows, its two ε and the DP statement.

Written by :func:`privgate.dp.remediate.remediate`, read by every format through
:mod:`privgate.report.remediation`; every field has a default (a search cut short, an older report still
loads) and unknown keys are ignored. Two ε, never to be confused (docs/remediation.md): the **training ε**
of the one DP-SGD run, and the **released ε** including the search (random stopping: Papernot & Steinke
2022, arXiv 2110.03620), always ≥ the training ε. The DP statement follows Ponomareva et al. 2023
("How to DP-fy ML", arXiv 2303.00654, §5.5).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from privgate.report.numbers import finite_or_none


class _Section(BaseModel):
    model_config = ConfigDict(extra="ignore")


class CheckCell(_Section):
    """One check of a candidate (or of the original): its value, interval, status, the reason and — inconclusive —
    the audit size that would decide it (:attr:`privgate.report.model.CheckResult.needed`)."""

    id: str
    value: float | None = None
    ci: list[float | None] | None = None
    status: str = "inconclusive"
    reason: str | None = None
    needed: dict[str, int] | None = None

    _v = field_validator("value", mode="before")(finite_or_none)

    @field_validator("ci", mode="before")
    @classmethod
    def _ci(cls, v: Any) -> Any:
        return None if v is None else [finite_or_none(x) for x in v]

    @classmethod
    def of(cls, check: Any) -> CheckCell:
        """The cell of a decided :class:`~privgate.report.model.CheckResult`."""
        return cls(
            id=check.id, value=check.value, ci=check.ci, status=check.status, reason=check.reason, needed=check.needed
        )


class DPRun(_Section):
    """What one DP-SGD run did (:class:`privgate.dpsgd.train.DPTraining`); ``epsilon`` is its training ε."""

    target_epsilon: float | None = None
    epsilon: float | None = Field(default=None, description="The accountant's ε of this run alone (training ε).")
    delta: float | None = None
    noise_multiplier: float | None = None
    max_grad_norm: float | None = None
    sample_rate: float | None = None
    steps: int | None = None
    epochs: int | None = None
    batch_size: int | None = None
    accountant: str | None = None
    n_train: int | None = None
    seconds: float | None = None
    calibration_seconds: float | None = None
    accountant_note: str | None = None
    architecture_changes: list[str] = Field(default_factory=list)
    grad_sample_mode: str | None = None

    _v = field_validator("epsilon", mode="before")(finite_or_none)


class SearchRow(_Section):
    """One candidate of the search: a DP run at a target ε, or a step of a capacity ladder (``step``, ``setting``)."""

    epsilon: float | None = Field(default=None, description="The target ε of the candidate's training run.")
    step: int | None = Field(default=None, description="Capacity search: the ladder's step (1 = least regularised).")
    setting: dict[str, Any] | None = Field(default=None, description="Capacity search: the step's set_params.")
    fit_seconds: float | None = None
    utility: float | None = None
    utility_ci: list[float] | None = None
    utility_ok: bool = True
    checks: list[CheckCell] = Field(default_factory=list)
    privacy: str | None = None
    verdict: str | None = None
    accepted: bool = False
    training: DPRun = Field(default_factory=DPRun)
    audit_seconds: float | None = None
    in_search: bool = True
    trial: int | None = Field(default=None, description="Random stopping: the trial (1, 2, …) that trained it.")
    released_epsilon: float | None = Field(
        default=None, description="The released ε of the search up to and including this candidate."
    )
    reason: str | None = Field(
        default=None, description="Why the search did not take this candidate (null for the one it took)."
    )


class Original(_Section):
    verdict: str | None = None
    utility: float | None = None
    utility_ci: list[float] | None = None
    checks: list[CheckCell] = Field(default_factory=list)


class UtilitySpec(_Section):
    metric: str = "accuracy"
    data: str | None = None
    floor: float | None = None
    rule: str | None = None
    baseline: dict[str, Any] | None = Field(
        default=None,
        description="Accuracy on the same rows of a model that ignores its input (privgate.stats.trivial): "
        "majority (always the training labels' most common label), prior (guessing at their frequencies), label, n.",
    )

    def baseline_line(self) -> str | None:
        """``always predicting 'fair' scores 0.7370 on these rows, guessing at the training frequencies 0.4100``."""
        b = self.baseline
        if not b or not isinstance(b.get("majority"), (int, float)) or not isinstance(b.get("prior"), (int, float)):
            return None
        return (
            f"always predicting the most common label {str(b.get('label'))!r} scores {b['majority']:.4f} on these "
            f"rows, guessing at the training labels' frequencies {b['prior']:.4f}"
        )


class ClipRun(_Section):
    max_grad_norm: float
    accuracy: float
    good: bool


class Hyperparameter(_Section):
    """One DP-SGD hyper-parameter and where it came from (never noise-free training on the members)."""

    name: str
    value: Any = None
    source: str

    def shown(self) -> str:
        """The value as text: numbers to 4 significant digits, ``—`` when there is none."""
        if self.value is None:
            return "—"
        return f"{self.value:.4g}" if isinstance(self.value, float) else str(self.value)


class SearchSettings(_Section):
    epochs: int | None = None
    batch_size: int | None = None
    max_grad_norm: float | None = None
    max_grad_norm_mode: str | None = None
    clip_search: list[ClipRun] = Field(default_factory=list)
    clip_search_data: str | None = Field(default=None, description="The rows the clip-norm search trained on.")
    delta: float | None = None
    delta_rule: str | None = None
    accountant: str | None = None
    max_physical_batch_size: int | None = None
    n_train: int | None = None
    start: str | None = None


class Chosen(_Section):
    epsilon: float | None = None
    epsilon_spent: float | None = None
    utility: float | None = None
    noise_multiplier: float | None = None
    max_grad_norm: float | None = None
    sample_rate: float | None = None
    steps: int | None = None
    delta: float | None = None
    accountant: str | None = None


class Trials(_Section):
    """Random stopping: the distribution of the number of trials, and the number drawn."""

    distribution: str
    mean: float
    shape: float | None = None
    gamma: float | None = None
    drawn: int | None = None
    description: str | None = None


class Accounting(_Section):
    """The released ε: the guarantee of the handed-out model including the search that chose it."""

    method: Literal["compose", "random_stopping"] = "compose"
    epsilon: float | None = Field(default=None, description="Released ε (δ below), the search included.")
    delta: float | None = None
    accountant: str | None = None
    candidates: int = Field(default=0, description="DP-SGD runs on the members this bound covers.")
    rdp_epsilon: float | None = None
    prv_epsilon: float | None = None
    naive_sum: float | None = Field(default=None, description="Σ of the runs' training ε (basic composition).")
    per_run_epsilon: float | None = Field(default=None, description="Random stopping: ε of one run of the search.")
    trials: Trials | None = None
    max_total_epsilon: float | None = None
    basis: str = Field(default="", description="The theorem the bound rests on.")
    note: str | None = None

    _v = field_validator("epsilon", "rdp_epsilon", "prv_epsilon", "naive_sum", mode="before")(finite_or_none)


class DPStatement(_Section):
    """The DP statement of a hardened model (Ponomareva et al. 2023, arXiv 2303.00654, §5.5)."""

    model_kind: str = Field(default="tabular", description="What was trained: tabular (DP-SGD from scratch), …")
    unit: Literal["record", "user"] = "record"
    unit_note: str = ""
    neighbouring: str = "add or remove one record"
    accountant: str = ""
    delta: float = 0.0
    sampling: str = "Poisson"
    sample_rate: float = 0.0
    noise_multiplier: float = 0.0
    max_grad_norm: float = 0.0
    epochs: int = 0
    steps: int = 0
    batch_size: int = 0
    n_train: int = 0
    public: list[str] = Field(default_factory=list, description="What the guarantee treats as public.")
    training_epsilon: float | None = Field(default=None, description="ε of the one run that made this model.")
    released_epsilon: float | None = Field(default=None, description="ε of the handed-out model, the search included.")
    search: str = ""
    candidates: int = 0
    hyperparameters: list[Hyperparameter] = Field(default_factory=list)
    caveats: list[str] = Field(default_factory=list)

    def line(self) -> str:
        """One line that says which ε is which."""
        return epsilon_line(self.training_epsilon, self.released_epsilon, self.delta, self.candidates, self.search)


def epsilon_line(
    training: float | None, released: float | None, delta: float | None, candidates: int, search: str
) -> str:
    """``DP: training ε = 18.1 (this model's run alone); released ε = 27.5 (…search…), δ = 1.1e-04``."""
    t = "n/a" if training is None else f"{training:.3g}"
    r = "∞" if released is None else f"{released:.3g}"
    d = "" if delta is None else f", δ = {delta:.2g}"
    return (
        f"DP: training ε = {t} (this model's DP-SGD run alone); released ε = {r} (the guarantee of the handed-out "
        f"model, including the {search or 'search'} over {candidates} candidate run(s)){d}"
    )


class CapacityStatement(_Section):
    """What a capacity search's model is, and is not: an empirical result with no DP guarantee (no ε)."""

    estimator: str = ""
    varied: dict[str, Any] = Field(
        default_factory=dict, description="The model's own values of what the ladder varies."
    )
    chosen: dict[str, Any] = Field(default_factory=dict, description="The handed-out model's settings.")
    ladder: str = Field(default="", description="Where the ladder came from.")
    candidates: int = Field(default=0, description="Candidates fitted on the members and audited.")
    confidence: float | None = Field(default=None, description="Each candidate's audit confidence (Bonferroni).")
    selection_bits: float | None = Field(
        default=None,
        description="log2 of the ladder's length: what the choice can say about the members beyond the model.",
    )
    guarantee: str = ""
    caveats: list[str] = Field(default_factory=list)
    dp_alternative: str = ""


def setting_text(step: dict[str, Any]) -> str:
    """``classifier__min_samples_leaf=16, classifier__max_leaf_nodes=7`` (a Pipeline's step prefixes name where)."""
    return ", ".join(
        f"{k}={v!r}" if isinstance(v, str) else f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}"
        for k, v in step.items()
    )


def capacity_rows(st: CapacityStatement) -> list[tuple[str, str]]:
    """The capacity statement as (field, value) rows, for the reports and the model card."""
    conf = "—" if st.confidence is None else f"{st.confidence:.4g}"
    bits = "—" if st.selection_bits is None else f"{st.selection_bits:.3g}"
    return [
        ("guarantee", st.guarantee),
        ("estimator", st.estimator),
        ("settings (the model's own)", setting_text(st.varied) or "—"),
        ("settings (handed out)", setting_text(st.chosen) or "—"),
        ("ladder", st.ladder),
        ("candidates fitted on the members", str(st.candidates)),
        ("each candidate's audit confidence", conf),
        ("selection (bits, at most)", bits),
        ("a DP guarantee instead", st.dp_alternative),
    ]


class RemediationSection(_Section):
    """``report.remediation``: what the DP-SGD search (or a scikit-learn model's capacity search) did and hands out."""

    method: Literal["dp", "capacity"] = Field(
        default="dp",
        description="dp: DP-SGD or DP fine-tuning over an ε schedule; capacity: a scikit-learn "
        "model's own regularisation ladder, no DP guarantee.",
    )
    status: str | None = None  # not_needed | cannot_help | hardened | no_epsilon | audit_failed | budget_exceeded
    reason: str | None = None
    first_broken: str | None = None
    strategy: str | None = None
    search: str = "compose"
    schedule: list[float] = Field(default_factory=list)
    original: Original | None = None
    utility: UtilitySpec | None = None
    settings: SearchSettings | None = None
    trainings: int = 0
    clip_search_trainings: int = 0
    chosen_epsilon: float | None = None
    chosen: Chosen | None = None
    best_not_released: SearchRow | None = Field(
        default=None, description="With budget_exceeded: the best candidate trained, not handed out."
    )
    rows: list[SearchRow] = Field(default_factory=list)
    architecture_changes: list[str] = Field(default_factory=list)
    accounting: Accounting | None = None
    statement: DPStatement | None = None
    ladder: list[dict[str, Any]] = Field(default_factory=list, description="Capacity search: the steps to try.")
    capacity: CapacityStatement | None = None
    selection_leakage: str | None = None
    output: dict[str, str] | None = None
    input_sha256: str | None = None
    audit: dict[str, Any] | None = None
    audit_summary: str | None = None
    seconds: float | None = None

    @classmethod
    def opening(
        cls, remediation: Any, original: Any, utility: float, utility_ci: tuple[float, float], spec: UtilitySpec
    ) -> RemediationSection:
        """The section as a search starts: the policy's schedule, the original model's audit and utility."""
        return cls(
            strategy=remediation.strategy if remediation.search == "compose" else "random_stopping",
            search=remediation.search,
            schedule=list(remediation.epsilons),
            original=Original(
                verdict=original.verdict,
                utility=round(utility, 6),
                utility_ci=[round(v, 6) for v in utility_ci],
                checks=[CheckCell.of(c) for c in original.checks],
            ),
            utility=spec,
        )

    def epsilon_line(self) -> str | None:
        """The one line naming the training ε and the released ε; without a hardened model, what the runs spent."""
        if self.statement is not None:
            return self.statement.line()
        acc = self.accounting
        if acc is None or acc.epsilon is None or not acc.candidates:
            return None
        spent = acc.epsilon if acc.method == "compose" else acc.epsilon
        return (
            f"DP: no model handed out; the {acc.candidates} DP-SGD run(s) on the members spent ε = {spent:.3g} "
            f"together ({search_name(acc.method)}), δ = {acc.delta:.2g}"
        )


def search_name(method: str) -> str:
    """How the one line names a search method."""
    return {"compose": "composed search", "random_stopping": "random-stopping search"}.get(method, method)


def statement_rows(st: DPStatement) -> list[tuple[str, str]]:
    """The statement as (field, value) rows, in the order of Ponomareva et al.'s checklist."""
    eps_t = "n/a" if st.training_epsilon is None else f"{st.training_epsilon:.4g}"
    eps_r = "∞" if st.released_epsilon is None else f"{st.released_epsilon:.4g}"
    return [
        ("model", st.model_kind),
        ("unit of privacy", f"{st.unit} — {st.unit_note}" if st.unit_note else st.unit),
        ("neighbouring datasets", st.neighbouring),
        ("training ε", f"{eps_t} (this model's DP-SGD run alone)"),
        ("released ε", f"{eps_r} (the handed-out model, the {st.search} over {st.candidates} run(s) included)"),
        ("δ", f"{st.delta:.3g}"),
        ("accountant", st.accountant),
        ("sampling", f"{st.sampling}, q = {st.sample_rate:.4g}"),
        ("noise multiplier σ", f"{st.noise_multiplier:.4g}"),
        ("clipping norm C", f"{st.max_grad_norm:g}"),
        ("epochs / steps", f"{st.epochs} / {st.steps} (expected batch {st.batch_size}, N = {st.n_train})"),
        ("public", "; ".join(st.public)),
    ]


__all__ = [
    "Accounting",
    "CapacityStatement",
    "CheckCell",
    "Chosen",
    "ClipRun",
    "DPRun",
    "DPStatement",
    "Hyperparameter",
    "Original",
    "RemediationSection",
    "SearchRow",
    "SearchSettings",
    "Trials",
    "UtilitySpec",
    "capacity_rows",
    "epsilon_line",
    "search_name",
    "setting_text",
    "statement_rows",
]
