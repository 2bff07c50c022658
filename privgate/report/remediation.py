"""Reading ``report.remediation`` for display: the ε search as rows, the two ε and the DP statement.

:mod:`privgate.dp.remediate` owns the typed
:class:`~privgate.report.remediation_section.RemediationSection`; this module flattens it into the same
table columns for every format: ``ε``, ``trial``, ``utility`` (with ``_ci``, ``_ok``), a value and a status
per check, ``privacy``, ``verdict``, ``accepted``, ``ε spent`` (training ε), ``σ`` and ``released ε``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from privgate.report.model import BaseReport, Report
from privgate.report.remediation_section import (
    RemediationSection,
    SearchRow,
    capacity_rows,
    setting_text,
    statement_rows,
)

SPENT, SIGMA, RELEASED = "ε spent", "σ", "released ε"
EPSILON_KEY = "epsilon"


@dataclass
class RemediationView:
    """The ε search flattened for tables and plots, and the DP statement for text."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    columns: list[str] = field(default_factory=list)
    epsilon_key: str | None = EPSILON_KEY
    utility_keys: list[str] = field(default_factory=list)
    leakage_keys: list[str] = field(default_factory=list)
    chosen_epsilon: float | None = None
    utility_floor: float | None = None
    facts: dict[str, Any] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)
    epsilon_line: str | None = None
    statement: list[tuple[str, str]] = field(default_factory=list)
    #: How the section is headed, and its statement (a DP statement, or a capacity search's "no DP guarantee").
    title: str = "Remediation (DP-SGD)"
    head: str | None = None
    statement_title: str = "DP statement"
    hyperparameters: list[tuple[str, str, str]] = field(default_factory=list)
    caveats: list[str] = field(default_factory=list)

    @property
    def plottable(self) -> bool:
        """At least two rows with a positive finite ε and a utility or leakage number."""
        ys = self.utility_keys + self.leakage_keys
        good = [
            r
            for r in self.rows
            if finite(r.get(EPSILON_KEY)) and r[EPSILON_KEY] > 0 and any(finite(r.get(k)) for k in ys)
        ]
        return len(good) >= 2


def finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _flatten(row: SearchRow, with_trial: bool, with_released: bool) -> dict[str, Any]:
    capacity = row.step is not None  # a capacity search's step: its settings, no ε, no DP run
    out: dict[str, Any] = (
        {"step": row.step, "setting": setting_text(row.setting or {})} if capacity else {EPSILON_KEY: row.epsilon}
    )
    if with_trial and not capacity:
        out["trial"] = row.trial
    out["utility"] = row.utility
    if row.utility_ci is not None and len(row.utility_ci) == 2:
        out["utility_ci"] = f"[{row.utility_ci[0]:.4g}, {row.utility_ci[1]:.4g}]"
    out["utility_ok"] = row.utility_ok
    for c in row.checks:
        out[c.id] = c.value
        out[f"{c.id} status"] = c.status
    out.update(privacy=row.privacy, verdict=row.verdict, accepted=row.accepted)
    if capacity:
        out["fit_seconds"] = row.fit_seconds
        return out
    out[SPENT] = row.training.epsilon
    out[SIGMA] = row.training.noise_multiplier
    if with_released:
        out[RELEASED] = row.released_epsilon
    return out


def section_of(report: BaseReport) -> RemediationSection | None:
    """``report.remediation`` as the typed section (a dict set by ``model_copy`` is validated here, once);
    None for a report without one (any job but check and harden)."""
    rem = getattr(report, "remediation", None)
    if rem is None or isinstance(rem, RemediationSection):
        return rem
    return RemediationSection.model_validate(rem)


def chosen_epsilon(remediation: RemediationSection | dict[str, Any] | None) -> float | None:
    """The ε the search settled on, or None (no remediation, or none was acceptable)."""
    if remediation is None:
        return None
    rem = remediation if isinstance(remediation, RemediationSection) else RemediationSection.model_validate(remediation)
    return rem.chosen_epsilon


def view(report: Report) -> RemediationView | None:
    """The remediation of ``report`` for display, or None when the report has none."""
    rem = section_of(report)
    if rem is None:
        return None
    with_trial = any(r.trial is not None for r in rem.rows)
    with_released = any(r.released_epsilon is not None for r in rem.rows)
    rows = [_flatten(r, with_trial, with_released) for r in rem.rows]
    columns: list[str] = []
    for r in rows:
        columns += [k for k in r if k not in columns]
    check_ids = list(dict.fromkeys(c.id for r in rem.rows for c in r.checks))
    floor = rem.utility.floor if rem.utility else None
    facts: dict[str, Any] = {
        "strategy": rem.strategy,
        "schedule": ", ".join(f"{e:g}" for e in rem.schedule) if rem.schedule else None,
        "trainings": rem.trainings if rem.status not in ("not_needed", "cannot_help") else None,
        "clip_search_trainings": rem.clip_search_trainings or None,
        "search": rem.search if rem.accounting else None,
        "status": rem.status,
        "first_broken": rem.first_broken,
    }
    acc = rem.accounting
    if acc is not None and acc.epsilon is not None:
        facts["released ε"] = f"{acc.epsilon:.4g} (δ = {acc.delta:.3g}, {acc.accountant})"
    if acc is not None and acc.max_total_epsilon is not None:
        facts["max_total_epsilon"] = acc.max_total_epsilon
    facts["seconds"] = rem.seconds
    if finite(floor):
        facts["utility floor"] = floor
    if rem.utility is not None and rem.utility.baseline_line():
        facts["utility baseline"] = rem.utility.baseline_line()
    notes = {
        k: v
        for k, v in (
            ("reason", rem.reason),
            ("selection_leakage", rem.selection_leakage),
            ("accounting", acc.basis if acc is not None and acc.basis else None),
            ("audit", rem.audit_summary),
        )
        if v
    }
    st = rem.statement
    view = RemediationView(
        rows=rows,
        columns=columns,
        utility_keys=["utility"] if any(finite(r.get("utility")) for r in rows) else [],
        leakage_keys=[k for k in check_ids if any(finite(r.get(k)) for r in rows)],
        chosen_epsilon=rem.chosen_epsilon,
        utility_floor=float(floor) if finite(floor) else None,
        facts={k: v for k, v in facts.items() if v is not None},
        notes=notes,
        epsilon_line=rem.epsilon_line(),
        statement=statement_rows(st) if st is not None else [],
        hyperparameters=[(h.name, h.shown(), h.source) for h in st.hyperparameters] if st is not None else [],
        caveats=list(st.caveats) if st is not None else [],
    )
    if rem.method == "capacity":
        _capacity(view, rem)
    return view


def _capacity(view: RemediationView, rem: RemediationSection) -> None:
    """A scikit-learn model's capacity search: no ε anywhere, its ladder, and its statement of no DP guarantee."""
    view.title, view.epsilon_key, view.statement_title = (
        "Remediation (capacity search, no DP guarantee)",
        None,
        ("No DP guarantee"),
    )
    chosen = next((r for r in rem.rows if r.accepted and rem.status == "hardened"), None)
    view.head = (
        f"Chosen: step {chosen.step} ({setting_text(chosen.setting or {})})" if chosen else "No setting was chosen."
    )
    if rem.ladder:  # the steps it could try (a capacity search has no ε schedule)
        view.facts["ladder"] = "; ".join(setting_text(s) for s in rem.ladder)
    st = rem.capacity
    if st is not None:
        view.statement, view.caveats = capacity_rows(st), list(st.caveats)


__all__ = ["RemediationView", "chosen_epsilon", "finite", "section_of", "view"]
