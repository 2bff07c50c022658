"""Reading ``report.remediation`` for display: the ε search as rows, and the chosen ε.

The DP remediation (:mod:`privgate.dp.remediate`) owns the content of
``report.remediation``; the report formats only show it. This module reads it
tolerantly so a report from an older or newer privgate, or a search cut short,
still renders: every field is optional, and anything unexpected is shown as
it is or left out, never an error.

Shape written by :func:`privgate.dp.remediate.remediate` (all keys optional here)::

    {"status": "hardened", "reason": "...", "strategy": "ladder", "schedule": [50, 20, ...],
     "chosen_epsilon": 5.0, "trainings": 4, "utility": {"floor": 0.9, ...},
     "selection_leakage": "...",
     "rows": [{"epsilon": 50.0, "utility": 0.97, "utility_ci": [lo, hi], "utility_ok": true,
               "checks": [{"id": "mia-accuracy", "value": 0.71, "ci": [...], "status": "fail"}],
               "privacy": "fail", "verdict": "fail", "accepted": false,
               "training": {"epsilon": 49.8, "noise_multiplier": 0.4, ...}}, ...]}

A row's checks become columns ``mia-accuracy`` (value) and ``mia-accuracy
status``; of the DP-SGD training record only the ε actually spent and the noise
multiplier are shown. Rows may also be under ``steps``/``ladder``/``attempts``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from privgate.report.model import Report

ROW_KEYS = ("rows", "steps", "ladder", "attempts", "trials", "history", "runs")
EPSILON_KEYS = ("epsilon", "target_epsilon", "eps", "ε")
CHOSEN_KEYS = ("chosen_epsilon", "selected_epsilon", "final_epsilon")
SPENT, SIGMA = "ε spent", "σ"
#: Numeric row fields that are neither the utility nor a leakage measure.
BOOKKEEPING = (
    "delta",
    "seconds",
    "audit_seconds",
    "epochs",
    "noise_multiplier",
    "sigma",
    "max_grad_norm",
    "steps",
    "seed",
    "batch_size",
    "sample_rate",
    "duration_s",
    SPENT,
    SIGMA,
    "epsilon",
    "target_epsilon",
    "n_train",
    "calibration_seconds",
)
#: Row fields not worth a column.
HIDDEN = ("audit_seconds",)
#: Text facts long enough to get a paragraph of their own.
LONG_TEXT = 90


@dataclass
class RemediationView:
    """The ε search flattened for tables and plots."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    columns: list[str] = field(default_factory=list)
    epsilon_key: str | None = None
    utility_keys: list[str] = field(default_factory=list)
    leakage_keys: list[str] = field(default_factory=list)
    chosen_epsilon: float | None = None
    utility_floor: float | None = None
    facts: dict[str, Any] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)

    @property
    def plottable(self) -> bool:
        """At least two rows with a positive finite ε and a utility or leakage number."""
        if not self.epsilon_key:
            return False
        ys = self.utility_keys + self.leakage_keys
        good = [
            r
            for r in self.rows
            if finite(r.get(self.epsilon_key)) and r[self.epsilon_key] > 0 and any(finite(r.get(k)) for k in ys)
        ]
        return len(good) >= 2


def finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _flatten(row: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in row.items():
        if k in HIDDEN:
            continue
        if k == "training" and isinstance(v, dict):
            if "epsilon" in v:
                out[SPENT] = v["epsilon"]
            if "noise_multiplier" in v:
                out[SIGMA] = v["noise_multiplier"]
        elif isinstance(v, dict):
            scalars = {k2: v2 for k2, v2 in v.items() if not isinstance(v2, (dict, list))}
            nested = {k2: v2 for k2, v2 in v.items() if isinstance(v2, dict) and ("value" in v2 or "status" in v2)}
            if len(scalars) <= 6:
                out.update({f"{k}.{k2}": v2 for k2, v2 in scalars.items()})
            for k2, item in nested.items():
                _check_columns(out, str(k2), item)
        elif isinstance(v, list):
            if len(v) == 2 and all(finite(x) for x in v):
                out[k] = f"[{v[0]:.4g}, {v[1]:.4g}]"
            for item in v:
                if isinstance(item, dict) and "id" in item:
                    _check_columns(out, str(item["id"]), item)
        else:
            out[str(k)] = v
    return out


def _check_columns(out: dict[str, Any], name: str, item: dict[str, Any]) -> None:
    if "value" in item:
        out[name] = item["value"]
    if "status" in item:
        out[f"{name} status"] = item["status"]


def _find_rows(rem: dict[str, Any]) -> list[dict[str, Any]]:
    for key in ROW_KEYS:
        value = rem.get(key)
        if isinstance(value, list) and value and all(isinstance(r, dict) for r in value):
            return value
    return []


def chosen_epsilon(remediation: dict[str, Any] | None) -> float | None:
    """The ε the search settled on, or None (no remediation, or none was acceptable)."""
    if not isinstance(remediation, dict):
        return None
    for key in CHOSEN_KEYS:
        if finite(remediation.get(key)):
            return float(remediation[key])
    for key in ("chosen", "selected", "final"):
        v = remediation.get(key)
        if isinstance(v, dict):
            for k2 in EPSILON_KEYS:
                if finite(v.get(k2)):
                    return float(v[k2])
    return None


def view(report: Report) -> RemediationView | None:
    """The remediation of ``report`` for display, or None when the report has none."""
    rem = report.remediation
    if not isinstance(rem, dict) or not rem:
        return None
    rows = [_flatten(r) for r in _find_rows(rem)]
    columns: list[str] = []
    for r in rows:
        for k in r:
            if k not in columns:
                columns.append(k)
    eps_key = next((k for k in columns if k in EPSILON_KEYS), None)
    numeric = [k for k in columns if k != eps_key and any(finite(r.get(k)) for r in rows)]
    utility = [
        k for k in numeric if "utility" in k.lower() or k.lower() in ("accuracy", "test_accuracy", "val_accuracy")
    ]
    leakage = [k for k in numeric if k not in utility and k not in BOOKKEEPING and k.split(".")[-1] not in BOOKKEEPING]
    util = rem.get("utility")
    floor = util.get("floor") if isinstance(util, dict) else rem.get("utility_floor")
    facts: dict[str, Any] = {}
    notes: dict[str, str] = {}
    for k, v in rem.items():
        if k in CHOSEN_KEYS or v is None:
            continue
        if isinstance(v, str) and len(v) > LONG_TEXT:
            notes[k] = v
        elif isinstance(v, list) and v and all(finite(x) or isinstance(x, str) for x in v):
            facts[k] = ", ".join(f"{x:g}" if finite(x) else str(x) for x in v)
        elif not isinstance(v, (list, dict)):
            facts[k] = v
    if finite(floor):
        facts["utility floor"] = floor
    return RemediationView(
        rows,
        columns,
        eps_key,
        utility,
        leakage,
        chosen_epsilon(rem),
        float(floor) if finite(floor) else None,
        facts,
        notes,
    )


__all__ = ["RemediationView", "chosen_epsilon", "finite", "view"]
