"""Hardening a scikit-learn model: its own capacity ladder, searched by the gate — an empirical result, no DP.

The scikit-learn kind's half of the one search (:func:`privgate.dp.remediate.search`, the protocol in
:mod:`privgate.dp.task`): instead of an ε schedule it walks :mod:`privgate.dp.capacity`'s ladder; each
candidate is a ``sklearn.base.clone`` of the whole model with the step's ``set_params``, fitted on the members
and re-audited with its own clones as reference models. It hands out a model that passed these attacks on
this data with **no differential-privacy guarantee**, and a card that says so. The choice among L steps is
stated by auditing each at confidence ``1 − (1 − c)/L`` (Bonferroni; Papernot & Steinke 2022, arXiv
2110.03620) and as at most log₂ L bits (``docs/sklearn.md``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from privgate.dp.candidates import Candidate, search_schedule
from privgate.dp.capacity import MAX_LADDER_SECONDS, Ladder, cost_problem, ladder, setting_text, walked
from privgate.dp.hardened import not_skops, skops_output
from privgate.dp.search import Searched
from privgate.dp.task import HardenTask
from privgate.dp.utility import measure_utility, utility_data, utility_floor
from privgate.errors import PolicyError, PrivgateError
from privgate.gate import check_model
from privgate.inputs.data import AuditData, Dataset
from privgate.inputs.target import Target
from privgate.options import RunOptions
from privgate.policy import Policy, as_policy
from privgate.report.model import Report
from privgate.report.remediation_section import CapacityStatement, DPRun, RemediationSection, SearchRow
from privgate.stats.trivial import trivial_accuracy
from privgate.threads import limit_threads

DP_ALTERNATIVE = (
    "train a torch model over the same features (the pipeline's encoded columns as numbers) and harden it with "
    "DP-SGD: privgate harden MODEL.pt --recipe module:RECIPE --policy … gives a released ε that counts the "
    "search (docs/remediation.md)"
)


@dataclass
class CapacityCandidate(Candidate):
    """One step of the capacity ladder, fitted and re-audited (no ε: ``epsilon`` is NaN, ``training`` None)."""

    step: int = 0
    setting: dict[str, Any] = field(default_factory=dict)
    fit_seconds: float = 0.0

    none_pass = "no setting of the capacity ladder passes the checks"
    strongest = "the most regularised"
    beyond = "every stronger setting would lose more utility"
    taken = "it takes the least regularised accepted step"

    @property
    def where(self) -> str:
        return f"step {self.step} ({setting_text(self.setting)})"

    def is_row(self, row: SearchRow) -> bool:
        return row.step == self.step

    def row(self, in_search: bool = True, released_epsilon: float | None = None) -> SearchRow:
        return SearchRow(
            step=self.step, setting=dict(self.setting), fit_seconds=round(self.fit_seconds, 3), training=DPRun(),
            **self.outcome(in_search),
        )  # fmt: skip


class CapacityTask(HardenTask):
    """A scikit-learn model's capacity search (module docstring).

    Args:
        target: the scikit-learn model under audit (never modified, never refitted).
        data: the audit data; utility is measured on its population, else its non-members.
        policy: the policy, with ``remediation`` (``capacity``: the ladder, else privgate's) and ``utility``.
        train: the full member set the candidates are fitted on (default: the audit's members).
        output: where the hardened model goes (a ``.skops`` file; its card beside it).
        max_seconds: the longest the walk may be estimated to take (:func:`privgate.dp.capacity.cost_problem`).

    Raises:
        PolicyError: remediation is not enabled, a step of the policy's ladder names no parameter of the model or
            raises a costly one above the model's own; :meth:`walk`: the walk's estimated time is over the limit.
    """

    candidate = CapacityCandidate
    method = "capacity"
    nothing = "no_setting"
    trainings = "candidate fit(s)"

    def __init__(
        self,
        target: Target,
        data: AuditData,
        policy: Policy,
        *,
        train: Dataset | None = None,
        output: Any = None,
        max_seconds: float = MAX_LADDER_SECONDS,
    ) -> None:
        from privgate.dp.settings import require_enabled

        require_enabled(policy)
        self.target, self.data, self.policy, self.output = target, data, policy, output
        self.max_seconds = max_seconds
        self.audit_recipe = None  # the gate's reference models are each audited model's own clones
        self.model = target.model
        self.members = train or data.members
        self.n_units = len(self.members)
        self.ladder: Ladder = ladder(self.model.estimator, self.n_units, policy.remediation.capacity, policy.name)
        steps = max(1, len(self.ladder.steps))
        self.confidence = 1.0 - (1.0 - policy.confidence) / steps  # Bonferroni over the ladder (module docstring)
        self.audit_policy = policy.split_budget(steps)  # every level's budget: an extended policy's checks too
        self._rows: tuple[Any, np.ndarray] | None = None

    @classmethod
    def open(cls, settings: Any, run: RunOptions) -> CapacityTask:
        """The task of ``settings``: the policy checked before the model and data are loaded."""
        from privgate.dp.settings import check_can_remediate, require_enabled
        from privgate.inputs.door import load_inputs

        pol = as_policy(settings.policy)
        require_enabled(pol)
        i = load_inputs(dataclasses.replace(settings, policy=pol), run.seed)
        if i.target.kind != "sklearn":  # a pickle that held a torch model: DP-SGD, which needs its recipe
            check_can_remediate(pol, None)
        given = settings.model if isinstance(settings.model, (str, Path)) else "model.skops"
        out = Path(settings.output_model) if settings.output_model else skops_output(given)
        if out.suffix.lower() != ".skops":  # a pickle's output named like a torch model's (hardened_outputs)
            raise PrivgateError(not_skops(out))
        return cls(i.target, i.data, i.policy, train=i.members, output=out)

    # ------------------------------------------------------------------ the candidates

    def utility(self, target: Any) -> tuple[float, list[float]]:
        held_out = utility_data(self.data)  # after the original's audit: the tables aligned with the model
        self.utility_source = held_out.source
        return measure_utility(target, held_out, self.policy.confidence)

    def floor(self, original: float) -> tuple[float | None, str]:
        """The policy's floor, and never below beating a constant model on the held-out rows."""
        names = [str(c) for c in self.model.classes_]
        trivial = trivial_accuracy(self.members.y, utility_data(self.data).y)
        self.baseline = trivial.as_dict(names)
        return utility_floor(self.policy.utility, original, trivial, names[trivial.label])

    def plan(self, run: RunOptions) -> None:
        """No DP-SGD settings: the search walks :meth:`walk` instead (:func:`privgate.dp.remediate.search`)."""
        return None

    def _training_rows(self) -> tuple[Any, np.ndarray]:
        """The members as the model was fitted on them (its frame) and their label values, aligned once."""
        if self._rows is None:
            members = self.members
            if members.schema is not None:  # a table: its columns in the model's order, labels through classes_
                from privgate.inputs.table_fit import aligned

                members = aligned(members, self.model)  # as the audit aligns it (the same on an aligned table)
            self._rows = self.model.rows(members.x), self.model.classes_[np.asarray(members.y, dtype=np.int64)]
        return self._rows

    def fit(self, step: dict[str, Any], seed: int) -> Any:
        """A fresh clone of the model with ``step``'s settings, fitted on the members (module docstring)."""
        from sklearn.base import clone

        est = clone(self.model.estimator)
        params = est.get_params(deep=True)
        unset = sorted(k for k in params if (k == "random_state" or k.endswith("__random_state")) and params[k] is None)
        seeded = {k: int(np.random.SeedSequence([int(seed), 0xCA9, i]).generate_state(1)[0] % (2**31 - 1))
                  for i, k in enumerate(unset)}  # fmt: skip
        rows, labels = self._training_rows()
        try:
            return est.set_params(**seeded, **step).fit(rows, labels)
        except Exception as exc:  # noqa: BLE001 - scikit-learn's own refusal of a setting, as one sentence
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
            raise PolicyError(
                f"policy '{self.policy.name}': the model cannot be fitted with {setting_text(step)} "
                f"(from {self.ladder.source}): {first}"
            ) from None

    def as_target(self, estimator: Any, label: str) -> Target:
        """A fitted candidate as the gate audits it: read as the original is (its frame, its classes)."""
        from privgate.inputs.targets.sklearn import SklearnModel

        model = SklearnModel(estimator, f"<{label}>")
        model.bind(self.model.schema)
        return Target(model, source=f"<{label}>", fmt="sklearn")

    def _candidate(self, i: int, floor: float | None, run: RunOptions) -> CapacityCandidate:
        step = self.ladder.steps[i]
        label = f"capacity step {i + 1} ({setting_text(step)})"
        run.say(f"{label}: fitting")
        t0 = time.perf_counter()
        with limit_threads(run.threads):
            est = self.fit(step, run.seed)
        seconds = time.perf_counter() - t0
        target = self.as_target(est, label)
        folder = f"capacity-step-{i + 1}"
        report = check_model(
            target,
            self.data,
            self.audit_policy,
            options=run.replace(
                artefacts_dir=str(Path(run.artefacts_dir) / folder) if run.artefacts_dir else None,
                progress=lambda msg: run.say(f"{label}: {msg}"),
            ),
        )
        util, ci = self.utility(target)
        return CapacityCandidate(
            math.nan, est, None, None, report, util, ci, floor, step=i + 1, setting=dict(step), fit_seconds=seconds
        )

    def walk(
        self, section: RemediationSection, floor: float | None, run: RunOptions, on_row: Any
    ) -> tuple[Searched, list[Candidate]]:
        """Walk the ladder with the policy's strategy; each candidate's row as soon as it is decided."""
        rem = self.policy.remediation
        section.ladder, section.strategy = [dict(s) for s in self.ladder.steps], rem.strategy
        if rem.search == "random_stopping":
            section.search = "compose"  # random stopping counts a DP search's ε; a ladder has none to count
        if rem.audit:
            section.audit_summary = "not run: the one-run audit measures a DP-SGD run's ε, and this search claims none"
        tried: dict[int, CapacityCandidate] = {}

        def evaluate(i: int) -> CapacityCandidate:
            c = tried[i] = self._candidate(i, floor, run)
            row = c.row()
            section.rows.append(row)
            if on_row:
                on_row(row)
            return c

        if not self.ladder.steps:
            reason = (
                f"the model's own settings ({_text(self.ladder.fitted)}) are already past the end of "
                f"{self.ladder.source}; name stronger ones in the policy (remediation.capacity)"
            )
            return Searched(None, "privacy", reason), []
        n = len(self.ladder.steps)
        problem = cost_problem(n, rem.strategy, self.original_seconds, self.max_seconds)
        if problem:
            raise PolicyError(f"policy '{self.policy.name}': {problem}")
        run.say(f"capacity search: up to {walked(n, rem.strategy)} candidate(s), each fitted and audited")
        chosen, broke, reason = search_schedule(evaluate, n, rem.strategy)
        candidates = [tried[i] for i in sorted(tried)]
        section.rows.sort(key=lambda r: r.step or 0)
        section.trainings = len(candidates)
        section.selection_leakage = self.selection_statement(len(candidates), "", "")
        return Searched(chosen, broke, reason, list(candidates)), list(candidates)

    # ------------------------------------------------------------------ what the section says

    def selection_statement(self, n: int, basis: str, clip_from: str) -> str:
        steps = len(self.ladder.steps)
        return (
            f"{n} candidate(s) were fitted on the members and audited; only the chosen one is handed out. The choice "
            f"among the ladder's {steps} step(s) was made on the members' attack scores, so it can reveal at most "
            f"log2({steps}) = {math.log2(max(steps, 1)):.3g} bits about them beyond the model itself, and each "
            f"candidate was audited at confidence {self.confidence:.4g} (Bonferroni over the {steps} steps) so the "
            f"chosen one's checks hold at the policy's {self.policy.confidence:g}. There is no ε: this is not "
            "differential privacy."
        )

    def utility_phrase(self, value: float, original: float, floor: float | None) -> str:
        return f" with utility {value:.4f} (original {original:.4f}" + (
            f", floor {floor:.4f})" if floor is not None else ")"
        )

    def hardened(
        self, section: RemediationSection, chosen: CapacityCandidate, original: float, floor: float | None, n: int
    ) -> str:
        """The hardened ending: the capacity statement and the reason; returns the report's summary."""
        steps = len(self.ladder.steps)
        section.status = "hardened"
        section.capacity = CapacityStatement(
            estimator=self.ladder.estimator,
            varied={k: _plain(v) for k, v in self.ladder.fitted.items()},
            chosen={k: _plain(v) for k, v in chosen.setting.items()},
            ladder=self.ladder.source,
            candidates=n,
            confidence=round(self.confidence, 6),
            selection_bits=round(math.log2(max(steps, 1)), 4),
            guarantee="none: an empirical result — these attacks, on this data, at this confidence — with no "
            "differential-privacy guarantee and no ε",
            caveats=[
                "a stronger attack, other audit data or another release (the whole model where the policy audited "
                "an API) can leak more than these checks measured; nothing bounds what an attack not run here finds",
                f"the candidates were fitted on the {self.n_units} members given to privgate: a model trained on more "
                "rows should be hardened with all of them",
                self.selection_statement(n, "", ""),
            ],
            dp_alternative=DP_ALTERNATIVE,
        )
        passes = "passes every check" if chosen.report.verdict == "pass" else "passes every check the data can resolve"
        section.reason = (
            f"the capacity search's {chosen.where} {passes}"
            + self.utility_phrase(chosen.utility, original, floor)
            + "; no DP guarantee (an empirical result)"
        )
        return f"{chosen.report.summary} — hardened: {section.reason}; {n} {self.trainings}"

    def files(self, report: Report, chosen: Candidate) -> tuple[Report, dict[Path, tuple[str, bytes]]]:
        """The chosen pipeline as a ``.skops`` file, its card beside it; the report describes them."""
        from privgate.dp.card import capacity_card, card_path
        from privgate.inputs.targets.sklearn import describe_estimator, import_skops

        assert isinstance(chosen, CapacityCandidate) and report.remediation is not None
        out = Path(self.output)
        data = import_skops().dumps(chosen.model)
        card = capacity_card(report.remediation, model_file=str(out), verdict=report.verdict, summary=report.summary)
        card_bytes = card.encode("utf-8")
        files = {
            out: ("hardened model", data),
            card_path(out): ("hardened model's card (no DP guarantee)", card_bytes),
        }
        written = {
            "skops": str(out),
            "skops_sha256": hashlib.sha256(data).hexdigest(),
            "model_card": str(card_path(out)),
            "model_card_sha256": hashlib.sha256(card_bytes).hexdigest(),
        }
        section = report.remediation.model_copy(update={"output": written, "input_sha256": self.target.sha256})
        described = {
            "path": str(out),
            "format": "skops",
            "sha256": written["skops_sha256"],
            "estimator": describe_estimator(chosen.model),
            "settings": {k: _plain(v) for k, v in chosen.setting.items()},
            "hardened_from": {"path": str(self.target.source), "sha256": self.target.sha256},
            "dp": None,
            **{k: report.target[k] for k in ("accuracy", "outputs") if k in report.target},
        }
        return report.model_copy(update={"remediation": section, "target": described}), files


def _plain(v: Any) -> Any:
    return (
        v.item() if isinstance(v, np.generic) else v if isinstance(v, (int, float, str, bool, type(None))) else str(v)
    )


def _text(values: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in values.items()) or "—"


__all__ = ["DP_ALTERNATIVE", "CapacityCandidate", "CapacityTask"]
