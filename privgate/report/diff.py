"""Compare two reports: did the new model leak significantly more than the base, by more than a tolerance?

``privgate diff BASE.json NEW.json``, as pure functions over two :class:`~privgate.report.model.Report`:
:func:`comparability` refuses (exit 2) reports of another schema, policy or audit data; :func:`diff_reports`
gives every shared check's and attack's change new − base with a one-sided interval
(:mod:`privgate.stats.difference`). The error budget α = 1 − confidence is shared by the m comparisons
(Bonferroni): a change **regressed** only when its lower bound at α/m is above its tolerance. Tolerances
come from the policy's ``regression:`` section, overridden by ``--tolerance`` (docs/policies.md); the metric
by metric evidence and the decision rule are in docs/ci.md and docs/internals-core.md.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from privgate.errors import PrivgateError
from privgate.policy.sections import DEFAULT_METRIC_TOLERANCES, DEFAULT_TOLERANCE, Metric
from privgate.report.comparable import NotComparable, comparability
from privgate.report.evidence import (
    Side,
    attack_auc_estimate,
    attack_side,
    check_estimate,
    check_side,
    from_interval,
)
from privgate.report.model import CheckResult, Report
from privgate.stats import difference as dstats

#: Row statuses.
REGRESSED, IMPROVED, NOT_SIGNIFICANT, WITHIN, NOT_COMPARED = (
    "regressed",
    "improved",
    "not significant",
    "within tolerance",
    "not compared",
)

EXIT_OK, EXIT_REGRESSION, EXIT_NOT_COMPARABLE = 0, 1, 2


# --------------------------------------------------------------------------- the comparison


@dataclass(frozen=True)
class Row:
    """One compared metric: a check (by id) or an attack's AUC (by attack name)."""

    kind: str  # "check" | "attack"
    id: str
    metric: str  # "accuracy", "tpr_at_fpr@0.001", "auc", ...
    base: Side | None
    new: Side | None
    status: str
    reason: str
    tolerance: float | None = None
    change: float | None = None
    change_ci: tuple[float, float] | None = None
    p_value: float | None = None
    method: str = ""

    @property
    def compared(self) -> bool:
        return self.change is not None


@dataclass
class Diff:
    """Everything ``privgate diff`` found: the rows, the error budget behind them, and notes."""

    base: Report
    new: Report
    base_name: str
    new_name: str
    alpha: float
    tolerances: dict[str, float]
    rows: list[Row] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def comparisons(self) -> int:
        """m: how many changes were tested (the Bonferroni divisor)."""
        return sum(r.compared for r in self.rows)

    @property
    def level(self) -> float:
        """The one-sided level of each test, α/m."""
        return dstats.bonferroni_level(self.alpha, self.comparisons)

    @property
    def regressions(self) -> list[Row]:
        return [r for r in self.rows if r.status == REGRESSED]

    @property
    def exit_code(self) -> int:
        return EXIT_REGRESSION if self.regressions else EXIT_OK

    @property
    def summary(self) -> str:
        m = self.comparisons
        if self.regressions:
            shown = self.regressions[:3]
            worst = "; ".join(
                f"{r.id} {r.metric} {signed(r.change)} [{signed(r.change_ci[0])}, {signed(r.change_ci[1])}], "
                f"p = {p_text(r.p_value)}"
                for r in shown
                if r.change_ci
            )
            more = f" (and {len(self.regressions) - len(shown)} more)" if len(self.regressions) > len(shown) else ""
            return (
                f"REGRESSION: {len(self.regressions)} of {m} comparisons got worse by more than their tolerance, "
                f"beyond the noise of both reports: {worst}{more}"
            )
        counts = {s: sum(r.status == s for r in self.rows) for s in (IMPROVED, NOT_SIGNIFICANT, WITHIN, NOT_COMPARED)}
        parts = [f"{n} {s}" for s, n in counts.items() if n]
        return (
            f"NO REGRESSION: {m} comparisons, none significantly worse by more than its tolerance ({', '.join(parts)})"
        )


def signed(v: float | None) -> str:
    """``+0.367``: a change with its sign, 3 decimals; ``n/a`` when missing."""
    return "n/a" if v is None or not math.isfinite(v) else f"{v:+.3f}"


def p_text(p: float | None) -> str:
    """A p-value for people: two significant digits, scientific below 0.001."""
    if p is None:
        return "n/a"
    if p <= dstats.P_FLOOR:
        return f"< {dstats.P_FLOOR:.0e}"
    return f"{p:.2g}" if p >= 1e-3 else f"{p:.1e}"


#: The metrics a tolerance can be set for (every metric a check can bound, all leaks: higher is worse).
METRICS = tuple(m.value for m in Metric)


def tolerances_of(report: Report, overrides: Mapping[str, float] | None = None) -> dict[str, float]:
    """Tolerance per metric: the report's ``policy.regression`` (else the defaults of
    :class:`privgate.policy.Regression`), then ``overrides``.

    The gate records the policy's section with every metric's tolerance resolved
    (``{"tolerance": t, "metrics": {metric: t_m}}``). ``overrides`` maps a
    metric to its tolerance; the key ``"*"`` sets every metric first.
    """
    pol = report.policy or {}
    section = pol.get("regression") if isinstance(pol.get("regression"), dict) else None
    default = float((section or {}).get("tolerance", DEFAULT_TOLERANCE))
    per = dict(DEFAULT_METRIC_TOLERANCES) if section is None else {}
    per.update({str(k): float(v) for k, v in ((section or {}).get("metrics") or {}).items()})
    out = {m: per.get(m, default) for m in METRICS}
    if overrides:
        if "*" in overrides:
            out = {m: float(overrides["*"]) for m in out}
        out.update({m: float(v) for m, v in overrides.items() if m != "*"})
    return out


def _metric_label(c: CheckResult) -> str:
    if c.fpr is not None:
        return f"{c.metric}@{c.fpr:g}"
    return c.metric


@dataclass(frozen=True)
class _Pending:
    kind: str
    id: str
    metric: str
    tol_key: str
    base: Side | None
    new: Side | None
    estimates: tuple[dstats.Bounded, dstats.Bounded] | None
    method: str
    why: str


def _pending_checks(base: Report, new: Report, base_name: str, new_name: str) -> list[_Pending]:
    out = []
    base_checks = {c.id: c for c in base.checks}
    for c_new in new.checks:
        c_base = base_checks.get(c_new.id)
        if c_base is None:  # comparability() refuses this; kept for direct callers
            out.append(
                _Pending(
                    "check",
                    c_new.id,
                    _metric_label(c_new),
                    c_new.metric,
                    None,
                    check_side(c_new, None),
                    None,
                    "",
                    f"not in {base_name}",
                )
            )
            continue
        eb, _, why_b = check_estimate(c_base)
        en, mn, why_n = check_estimate(c_new)
        sb, sn = check_side(c_base, eb), check_side(c_new, en)
        if eb is None or en is None or type(eb) is not type(en):
            why = "; ".join(
                x
                for x in (f"{base_name}: {why_b}" if eb is None else "", f"{new_name}: {why_n}" if en is None else "")
                if x
            )
            if not why:  # one side has counts, the other only an interval: compare the intervals
                eb, _, _ = from_interval(c_base.value, c_base.ci, c_base.confidence)
                en, mn, _ = from_interval(c_new.value, c_new.ci, c_new.confidence)
                sb, sn = check_side(c_base, None), check_side(c_new, None)
                why = "" if eb is not None and en is not None else "the two reports give no comparable evidence"
            if why:
                out.append(_Pending("check", c_new.id, _metric_label(c_new), c_new.metric, sb, sn, None, "", why))
                continue
        out.append(_Pending("check", c_new.id, _metric_label(c_new), c_new.metric, sb, sn, (eb, en), mn, ""))
    return out


def _pending_attacks(base: Report, new: Report, base_name: str, new_name: str) -> list[_Pending]:
    out = []
    conf_b, conf_n = float(base.policy.get("confidence", 0.95)), float(new.policy.get("confidence", 0.95))
    base_attacks = {a.name: a for a in base.attacks}
    for a_new in new.attacks:
        a_base = base_attacks.get(a_new.name)
        if a_base is None or (a_base.status != "ran" and a_new.status != "ran"):  # listed in _notes
            continue
        eb, _, why_b = attack_auc_estimate(a_base, conf_b)
        en, method, why_n = attack_auc_estimate(a_new, conf_n)
        sb, sn = attack_side(a_base, conf_b), attack_side(a_new, conf_n)
        if eb is None or en is None:
            why = "; ".join(
                x
                for x in (f"{base_name}: {why_b}" if eb is None else "", f"{new_name}: {why_n}" if en is None else "")
                if x
            )
            out.append(_Pending("attack", a_new.name, "auc", "auc", sb, sn, None, "", why))
            continue
        out.append(_Pending("attack", a_new.name, "auc", "auc", sb, sn, (eb, en), method, ""))
    return out


def _decide(p: _Pending, tolerance: float, level: float) -> Row:
    assert p.estimates is not None
    ch = dstats.compare(p.estimates[0], p.estimates[1], tolerance, level)
    span = f"[{signed(ch.lo)}, {signed(ch.hi)}]"
    stat = f"p = {p_text(ch.p_value)} for 'worse by more than {tolerance:g}' (α/m = {level:.2g})"
    if ch.regressed:
        status = REGRESSED
        reason = f"worse by {ch.change:.3f} {span}: even the lower bound is above the tolerance {tolerance:g}; {stat}"
    elif ch.improved:
        status = IMPROVED
        reason = f"better by {-ch.change:.3f} {span}: even the upper bound is below −{tolerance:g}"
    elif abs(ch.change) <= tolerance:
        status = WITHIN
        reason = f"changed by {ch.change:+.3f} {span}, within the tolerance {tolerance:g}"
    else:
        status = NOT_SIGNIFICANT
        way = "worse" if ch.change > 0 else "better"
        side = "below" if ch.change > 0 else "above"
        reason = (
            f"{way} by {abs(ch.change):.3f} {span}, but the interval reaches {side} the tolerance: "
            f"within the noise of the two measurements; {stat}"
        )
    return Row(
        p.kind,
        p.id,
        p.metric,
        p.base,
        p.new,
        status,
        reason,
        tolerance,
        ch.change,
        (ch.lo, ch.hi),
        ch.p_value,
        p.method,
    )


def _notes(base: Report, new: Report, base_name: str, new_name: str) -> list[str]:
    notes = []
    if base.environment.get("seed") != new.environment.get("seed"):
        notes.append(
            f"the seeds differ ({base.environment.get('seed')} in {base_name}, "
            f"{new.environment.get('seed')} in {new_name}): "
            "the calibration/evaluation splits differ too, which the intervals account for"
        )
    if base.privgate_version != new.privgate_version:
        notes.append(
            f"made by different privgate versions ({base.privgate_version} and {new.privgate_version}): "
            "attacks may have changed"
        )
    sha_b, sha_n = (base.target or {}).get("sha256"), (new.target or {}).get("sha256")
    if sha_b and sha_b == sha_n:
        notes.append(f"both reports audit the same model file (sha256 {sha_b[:12]}…)")
    for c in new.checks:
        b = next((x for x in base.checks if x.id == c.id), None)
        if b is not None and b.status != c.status:
            notes.append(f"check {c.id}: {b.status} in {base_name}, {c.status} in {new_name}")
    idle = [
        a.name
        for a in new.attacks
        if a.status != "ran" and any(b.name == a.name and b.status != "ran" for b in base.attacks)
    ]
    if idle:
        notes.append(f"not run in either report, so not compared: {', '.join(idle)}")
    if base.verdict != new.verdict:
        notes.append(f"verdict: {base.verdict} in {base_name}, {new.verdict} in {new_name}")
    return notes


def diff_reports(
    base: Report,
    new: Report,
    tolerances: Mapping[str, float] | None = None,
    *,
    base_name: str = "BASE",
    new_name: str = "NEW",
) -> Diff:
    """Compare ``new`` with ``base`` check by check and attack by attack (module docstring).

    Args:
        base, new: reports of the same policy on the same audit data.
        tolerances: per-metric overrides (``"*"``: every metric) of the tolerances the
            new report's policy records (:func:`tolerances_of`).
        base_name, new_name: how messages name the two reports (their file names).

    Raises:
        NotComparable: different schema, policy or audit data (:func:`comparability`).
    """
    why = comparability(base, new, base_name, new_name)
    if why:
        raise NotComparable(why)
    tol = tolerances_of(new, tolerances)
    for metric, value in tol.items():
        if not (math.isfinite(value) and value >= 0):
            raise PrivgateError(f"--tolerance: the tolerance of {metric} must be a number >= 0, got {value:g}.")
    alpha = 1.0 - float(new.policy.get("confidence", 0.95))
    pending = _pending_checks(base, new, base_name, new_name) + _pending_attacks(base, new, base_name, new_name)
    m = sum(p.estimates is not None for p in pending)
    level = dstats.bonferroni_level(alpha, m)
    rows = []
    for p in pending:
        tolerance = tol.get(p.tol_key, DEFAULT_TOLERANCE)
        if p.estimates is None:
            rows.append(Row(p.kind, p.id, p.metric, p.base, p.new, NOT_COMPARED, p.why, tolerance))
        else:
            rows.append(_decide(p, tolerance, level))
    return Diff(base, new, base_name, new_name, alpha, tol, rows, _notes(base, new, base_name, new_name))


__all__ = [
    "DEFAULT_METRIC_TOLERANCES",
    "DEFAULT_TOLERANCE",
    "Diff",
    "IMPROVED",
    "METRICS",
    "NOT_COMPARED",
    "NOT_SIGNIFICANT",
    "REGRESSED",
    "Row",
    "WITHIN",
    "diff_reports",
    "p_text",
    "signed",
    "tolerances_of",
]
