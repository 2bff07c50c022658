"""The policy schema (pydantic): sensitivity, release, confidence, decision, attacks, checks, `extends`.

Every field is validated on construction, with the rules of the decision model
(:mod:`privgate.decision`); a validator that concerns one field raises a
:class:`~privgate.inputs.validation.FieldError` so the message points at its line.
"""

from __future__ import annotations

from enum import Enum
from typing import Any, Literal

from pydantic import (
    Field,
    PrivateAttr,
    ValidationInfo,
    field_validator,
    model_validator,
)

from privgate.errors import shown
from privgate.inputs.suggest import did_you_mean
from privgate.inputs.validation import FieldError
from privgate.policy.sections import (
    Metric,
    Regression,
    Remediation,
    Utility,
)
from privgate.policy.sections import Strict as _Strict
from privgate.policy.serves import LABEL_ATTACKS, Serves, check_release

#: The attacks a policy that lists none runs for its checks: the cheap black-box family
#: (Yeom et al. 2018; Salem et al. 2019; Song & Mittal 2021), with class-dependent
#: thresholds where they help, and the learned attack over the same signals (cross-fitted
#: on the calibration split, :mod:`privgate.attacks.learned`) — the attacks of ``internal``.
#: Named in ``attacks:`` a policy can run anything else.
DEFAULT_ATTACKS: dict[str, dict[str, Any]] = {
    "loss": {},
    "confidence": {},
    "entropy": {},
    "modified_entropy": {"class_dependent": True},
    "true_class_confidence": {"class_dependent": True},
    "correctness": {},
    "learned": {},
}

#: The metric → the only attacks that measure it (others produce membership scores).
MEASURED_BY = {
    "similarity": ("inversion",),
    "attribute_advantage": ("attribute",),
    "exposure": ("canary_exposure",),  # language models: privgate.lm.attacks.measures
    "extraction_rate": ("extraction",),
    "isolated_fraction": ("structural",),  # privgate.attacks.structural
}


class Sensitivity(str, Enum):
    public = "public"
    internal = "internal"
    confidential = "confidential"
    strictly_confidential = "strictly_confidential"


class Release(str, Enum):
    api = "api"
    model = "model"


class Decision(str, Enum):
    """How a check's interval is turned into a status.

    ``upper_bound`` (default, the conservative side for privacy): pass only when
    the upper confidence bound is within the threshold; fail when the point
    estimate is over it; inconclusive when only the upper bound is over it (the
    data cannot rule a violation out). ``point``: compare the point estimate.
    """

    upper_bound = "upper_bound"
    point = "point"


#: Metrics a federated check may bound (membership metrics of attacker × victim pairs).
FEDERATED_METRICS = ("auc", "accuracy", "advantage", "tpr_at_fpr")


class Federated(_Strict):
    """Where a check applies in a federation (``privgate fl audit``): which attacker × victim pairs, which round.

    The check's ``max`` bounds the largest value over the pairs: it passes when
    every pair's upper bound is within ``max`` and fails when any pair's lower
    bound is above it, every interval Bonferroni-corrected over the pairs (and
    the candidate attacks of ``best``) the check ranges over.
    """

    pairs: Literal["others", "self", "all", "neighbours", "non_neighbours"] = Field(
        default="others",
        description="others: victim ≠ attacker; self: victim = attacker; all; neighbours: victim adjacent to the "
        "attacker in the topology; non_neighbours: neither the attacker nor adjacent to it.",
    )
    round: int | Literal["final", "all"] = Field(
        default="final", description="'final', a round number (1-based) or 'all' (every round, corrected for)."
    )
    attackers: list[str] | None = Field(default=None, description="Node names that attack (default: every node).")

    @field_validator("round")
    @classmethod
    def _round(cls, v: int | str) -> int | str:
        if isinstance(v, int) and v < 1:
            raise ValueError("round numbers start at 1")
        return v


class Check(_Strict):
    """One bound on one attack's metric: ``metric(attack) <= max``."""

    id: str = Field(pattern=r"^[A-Za-z0-9_.\-]+$", description="Stable identifier, used in reports and CI.")
    attack: str = Field(description="A registered attack name, or 'best' for the strongest attack that ran.")
    metric: Metric
    max: float = Field(description="Largest acceptable value of the metric.")
    fpr: float | None = Field(default=None, gt=0, lt=1, description="False-positive rate for tpr_at_fpr.")
    delta: float | None = Field(default=None, ge=0, lt=1, description="δ for epsilon_lb (default 1e-5).")
    federated: Federated | None = Field(
        default=None, description="A check of a federation (privgate fl audit), over attacker × victim pairs."
    )
    description: str | None = None

    @model_validator(mode="after")
    def _metric_options(self) -> Check:
        if self.metric is Metric.tpr_at_fpr and self.fpr is None:
            raise FieldError("metric", "metric 'tpr_at_fpr' needs 'fpr' (the false-positive rate, e.g. 0.001)")
        if self.metric is not Metric.tpr_at_fpr and self.fpr is not None:
            raise FieldError("fpr", f"'fpr' only applies to metric 'tpr_at_fpr', not '{self.metric.value}'")
        if self.metric is not Metric.epsilon_lb and self.delta is not None:
            raise FieldError("delta", f"'delta' only applies to metric 'epsilon_lb', not '{self.metric.value}'")
        if self.metric in (Metric.accuracy, Metric.auc) and not 0.0 <= self.max <= 1.0:
            raise FieldError("max", f"'max' for {self.metric.value} must be between 0 and 1, got {self.max}")
        if self.metric is Metric.extraction_rate and not 0.0 <= self.max <= 1.0:
            raise FieldError("max", f"'max' for extraction_rate must be between 0 and 1, got {self.max}")
        if self.metric in (Metric.epsilon_lb, Metric.exposure) and self.max < 0:
            raise FieldError("max", f"'max' for {self.metric.value} must be >= 0")
        if self.federated is not None and self.metric.value not in FEDERATED_METRICS:
            raise FieldError(
                "federated",
                f"a federated check bounds a membership metric of attacker × victim pairs "
                f"({', '.join(FEDERATED_METRICS)}), not '{self.metric.value}'",
            )
        return self


class Policy(_Strict):
    """A privacy policy. Construct with :func:`load_policy` to get file-aware errors.

    ``extends`` names another policy (a built-in, or a file relative to this
    one) whose attacks and checks this policy includes *verbatim*: they are run
    with the same options and decided exactly as the extended policy decides
    them, so this policy's verdict is never softer than that policy's on the
    same inputs. ``confidence`` is the probability that *every* decision in the
    report — inherited ones included — is right; the extended policy already
    spends ``1 − its confidence`` of that error budget, so an extending policy
    must declare a lower confidence and its own checks share the difference.
    """

    name: str
    extends: str | None = Field(
        default=None,
        description="A policy whose attacks and checks this one includes verbatim (built-in name or file).",
    )
    description: str = ""
    sensitivity: Sensitivity
    release: Release
    confidence: float = Field(default=0.95, gt=0.5, lt=1.0)
    decision: Decision = Decision.upper_bound
    attacks: dict[str, dict[str, Any]] = Field(default_factory=dict, description="Attacks to run, with their options.")
    checks: list[Check] = Field(default_factory=list)
    serves: Serves | None = Field(default=None, description="What an API release returns (release: api only).")
    utility: Utility | None = None
    remediation: Remediation = Field(default_factory=Remediation)
    regression: Regression = Field(default_factory=Regression, description="Tolerances of privgate diff.")
    _source: str | None = PrivateAttr(default=None)
    _parent: Policy | None = PrivateAttr(default=None)
    _check_lines: dict[str, int] = PrivateAttr(default_factory=dict)

    @property
    def source(self) -> str | None:
        """The file (or built-in name) the policy was loaded from."""
        return self._source

    @property
    def check_lines(self) -> dict[str, int]:
        """The line (1-based) of each of this policy's own checks in the YAML it was parsed from (for SARIF)."""
        return dict(self._check_lines)

    @property
    def parent(self) -> Policy | None:
        """The policy named by ``extends``, loaded and validated."""
        return self._parent

    def chain(self) -> list[Policy]:
        """This policy and every policy it extends, the most basic first."""
        out: list[Policy] = []
        p: Policy | None = self
        while p is not None:
            out.insert(0, p)
            p = p.parent
        return out

    def split_budget(self, ways: int) -> Policy:
        """This policy with the error budget of it and every policy it extends divided by ``ways`` (each confidence
        c becomes 1 − (1 − c)/ways): ``ways`` audits that all hold at once at this policy's confidence (Bonferroni)."""
        out = self.model_copy(update={"confidence": 1.0 - (1.0 - self.confidence) / max(1, ways)})
        out._parent = self.parent.split_budget(ways) if self.parent is not None else None
        return out

    @property
    def own_alpha(self) -> float:
        """The error budget of this policy's own checks: 1 − confidence, less what the extended policy spends."""
        spent = 1.0 - self.parent.confidence if self.parent is not None else 0.0
        return (1.0 - self.confidence) - spent

    @field_validator("attacks", mode="before")
    @classmethod
    def _attacks_none_options(cls, v: Any) -> Any:
        if isinstance(v, dict):
            return {k: ({} if opts is None else opts) for k, opts in v.items()}
        return v

    @model_validator(mode="after")
    def _consistent(self) -> Policy:
        from privgate.attacks.registry import KNOWN_ATTACKS, PLANNED, get_attack, threat_model_of

        check_release(self.serves, self.release.value)
        for name, options in self.attacks.items():
            if name not in KNOWN_ATTACKS:
                raise FieldError(
                    ("attacks", name),
                    f"unknown attack {shown(name)}{did_you_mean(name, KNOWN_ATTACKS)} (known: "
                    f"{', '.join(sorted(KNOWN_ATTACKS))})",
                )
            if not isinstance(options, dict):
                raise FieldError(("attacks", name), f"options must be a mapping, got {type(options).__name__}")
            if options and name not in PLANNED:  # the class checks its options' values: imported only for them
                _check_options(name, get_attack(name), options)
        ids: set[str] = set()
        for i, check in enumerate(self.checks):
            if check.id in ids:
                raise FieldError(("checks", i, "id"), f"{shown(check.id)} is used twice")
            ids.add(check.id)
            if check.attack != "best" and check.attack not in KNOWN_ATTACKS:
                raise FieldError(
                    ("checks", i, "attack"),
                    f"unknown attack {shown(check.attack)}{did_you_mean(check.attack, [*KNOWN_ATTACKS, 'best'])} "
                    f"(use 'best' or one of: {', '.join(sorted(KNOWN_ATTACKS))})",
                )
            if check.attack != "best" and threat_model_of(check.attack) == "white-box" and self.release is Release.api:
                raise FieldError(
                    ("checks", i, "attack"),
                    f"'{check.attack}' needs the model's weights, "
                    "but release is 'api' (an API-only release is attacked by black-box attacks)",
                )
            measured_by = MEASURED_BY.get(check.metric.value)
            if measured_by and check.attack not in ("best", *measured_by):
                raise FieldError(
                    ("checks", i, "metric"),
                    f"'{check.metric.value}' is measured only by {', '.join(measured_by)}, not by '{check.attack}'",
                )
        if self.sensitivity is not Sensitivity.public and not self.checks and self.extends is None:
            where = "checks" if "checks" in self.model_fields_set else "sensitivity"
            raise FieldError(where, f"a policy for {self.sensitivity.value} data needs at least one check")
        if (
            self.sensitivity is Sensitivity.strictly_confidential
            and self.release is Release.model
            and self.extends is None
        ):
            threats = {threat_model_of(c.attack) for c in self.checks if c.attack != "best"}
            if "white-box" not in threats:
                raise FieldError(
                    "checks",
                    "strictly confidential data released as a whole model needs at least one "
                    "check by a white-box attack (e.g. 'gradient')",
                )
            if not threats & {"black-box", "label-only"} and not any(c.attack == "best" for c in self.checks):
                raise FieldError(
                    "checks", "strictly confidential data released as a whole model needs black-box checks as well"
                )
        return self

    @model_validator(mode="after")
    def _resolve_extends(self, info: ValidationInfo) -> Policy:
        """Load the extended policy (built-in name, or a file relative to this one) and check they fit."""
        if self.extends is None:
            return self
        from privgate.attacks.registry import threat_model_of

        context = info.context or {}
        load = context.get("load")  # privgate.policy.loading.load_extended, passed by the loader
        if load is None:
            raise FieldError("extends", "a policy built in code cannot extend another (load it from YAML)")
        parent = load(self.extends, context.get("base"), tuple(context.get("chain", ())))
        if not self.confidence < parent.confidence:
            raise FieldError(
                "confidence",
                f"this policy extends '{parent.name}', whose decisions already hold at "
                f"{parent.confidence:g} confidence; its own checks need part of the error budget too, so its "
                f"confidence must be lower than {parent.confidence:g} (e.g. "
                f"{round(2.0 * parent.confidence - 1.0, 6):g})",
            )
        if parent.decision is not self.decision:
            raise FieldError(
                "decision",
                f"this policy extends '{parent.name}', which decides with '{parent.decision.value}'; "
                "an extending policy must decide the same way",
            )
        if self.release is Release.api and any(
            threat_model_of(c.attack) == "white-box" for p in parent.chain() for c in p.checks if c.attack != "best"
        ):
            raise FieldError(
                "release",
                f"this policy extends '{parent.name}', which has white-box checks; an API-only release "
                "cannot be attacked with the weights (use release: model, or extend a black-box policy)",
            )
        chain_checks = [c for p in parent.chain() for c in p.checks] + list(self.checks)
        if (
            self.sensitivity is Sensitivity.strictly_confidential
            and self.release is Release.model
            and not any(c.attack != "best" and threat_model_of(c.attack) == "white-box" for c in chain_checks)
        ):
            raise FieldError(
                "checks",
                "strictly confidential data released as a whole model needs at least one "
                "check by a white-box attack (e.g. 'gradient')",
            )
        inherited = parent.attacks_to_run()
        for name, options in self.attacks.items():
            if name in inherited and inherited[name] != options:
                raise FieldError(
                    ("attacks", name),
                    f"the extended policy '{parent.name}' runs it with options {inherited[name]}; "
                    "an extending policy runs the extended policy's attacks as they are (drop it here, or use "
                    "the same options)",
                )
        self._parent = parent
        return self

    def own_attacks(self) -> dict[str, dict[str, Any]]:
        """The attacks this policy adds: those under ``attacks`` and those its checks name.

        A policy (chain) that lists no attacks at all runs :data:`DEFAULT_ATTACKS`
        for its ``best`` checks, rather than ending every such check with "no
        attack ran".
        """
        out = dict(self.attacks)
        listed = any(p.attacks for p in self.chain())
        if not listed and any(c.attack == "best" and c.metric.value not in MEASURED_BY for c in self.checks):
            out = dict(LABEL_ATTACKS if self.served().output == "label" else DEFAULT_ATTACKS)
        for check in self.checks:
            if check.attack != "best":
                out.setdefault(check.attack, {})
        return out

    def attacks_to_run(self) -> dict[str, dict[str, Any]]:
        """Every attack the policy needs: the extended policy's, then its own."""
        out = self.parent.attacks_to_run() if self.parent is not None else {}
        for name, options in self.own_attacks().items():
            out.setdefault(name, options)
        return out

    def served(self) -> Serves:
        """What the API returns: this policy's ``serves``, else the extended one's, else every probability."""
        return self.serves or (self.parent.served() if self.parent is not None else Serves())

    def uses_default_attacks(self) -> bool:
        """Whether the attacks come from :data:`DEFAULT_ATTACKS` because the policy lists none."""
        return (
            not any(p.attacks for p in self.chain())
            and bool(self.attacks_to_run())
            and all(name in {**DEFAULT_ATTACKS, **LABEL_ATTACKS} for name in self.attacks_to_run())
        )


def _check_options(name: str, attack: type, options: dict[str, Any]) -> None:
    """Validate an attack's options by constructing it; the error names the option at fault when one alone fails."""
    try:
        attack(**options)
    except (TypeError, ValueError) as exc:
        culprit: tuple[Any, ...] = ()
        for key, value in options.items():
            try:
                attack(**{key: value})
            except (TypeError, ValueError):
                culprit = (key,)
                break
        raise FieldError(("attacks", name, *culprit), str(exc)) from None
