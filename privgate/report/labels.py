"""One-line texts about a decided check, shared by every report format and the pytest assertions.

A check's message names the attack, the metric, the value with its interval,
the threshold and the sample sizes, then the gate's reason, so a CI log line or
a failed test says everything needed to judge the number without opening the
JSON report.
"""

from __future__ import annotations

import contextlib
from typing import Any

from privgate.report.model import AttackSummary, BaseReport, CheckResult, RatePoint, Report
from privgate.report.numbers import is_finite_number, num

#: Attack statuses that mean "this attack never produced scores".
NOT_RUN = ("unavailable", "skipped", "error")


def plain(v: Any) -> str:
    """Any table value as text: ``""`` for None, ``true``/``false``, floats to 4 significant digits."""
    if v is None:
        return ""
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def interval(ci: list[float | None] | None, digits: int = 3) -> str:
    """``[lo, hi]``, or an empty string when the interval is missing."""
    if not ci or len(ci) != 2 or ci[0] is None or ci[1] is None:
        return ""
    return f"[{num(ci[0], digits)}, {num(ci[1], digits)}]"


def metric_label(c: CheckResult) -> str:
    """``accuracy``, ``tpr_at_fpr@0.001``, ``epsilon_lb (δ=1e-05)``."""
    if c.fpr is not None:
        return f"{c.metric}@{c.fpr:g}"
    if c.metric == "epsilon_lb" and c.delta is not None:
        return f"{c.metric} (δ={c.delta:g})"
    return c.metric


def attack_label(c: CheckResult) -> str:
    """``loss``, or ``best → modified_entropy`` when a 'best' check was decided by one attack."""
    return f"{c.attack} → {c.chosen_attack}" if c.chosen_attack else c.attack


def bound_label(c: CheckResult) -> str:
    """The threshold as a bound: ``≤ 0.8`` (``≥`` would never appear: every metric is a leak bounded above)."""
    return f"≤ {c.threshold:g}"


def achieved_fpr(fpr: float | None, ci: list[float | None] | None) -> str:
    """``FPR 0.012 [0.004, 0.028]``: the false-positive rate a TPR was really measured at."""
    if fpr is None:
        return ""
    return f"FPR {num(fpr)} {interval(ci)}".strip()


def rate_label(p: RatePoint) -> str:
    """A TPR-at-FPR cell: ``0.100 [0.020, 0.250] at FPR 0.012 [0.004, 0.028]``, or why there is none."""
    if not p.resolvable:
        return "too few non-members"
    if not p.measurable:
        return "not measurable (ties)"
    at = achieved_fpr(p.fpr_achieved, p.fpr_ci)
    return f"{num(p.tpr)} {interval(p.ci)}".strip() + (f" at {at}" if at else "")


def check_fpr_label(c: CheckResult) -> str:
    """For a TPR@FPR check: ``at FPR 0.012 [0.004, 0.028] (target 0.01)``; else empty."""
    if c.fpr is None or c.value is None:
        return ""
    at = achieved_fpr(c.details.get("fpr_achieved"), c.details.get("fpr_ci"))
    return f"at {at} (target {c.fpr:g})" if at else ""


def value_label(c: CheckResult) -> str:
    """``0.912 [0.871, 0.945] (95% CI)`` or ``n/a``; a TPR check adds the FPR it was measured at."""
    if c.value is None:
        return "n/a"
    ci = interval(c.ci)
    if not ci:
        return num(c.value)
    kind = "lower bound" if c.metric == "epsilon_lb" else "CI"
    fpr = check_fpr_label(c)
    return f"{num(c.value)} {ci} ({c.confidence:.1%} {kind})".replace(".0%", "%") + (f" {fpr}" if fpr else "")


def origin_label(c: CheckResult, report: BaseReport | None) -> str:
    """``inherited from internal`` for a check of an extended policy; else empty."""
    if report is None or not c.policy or c.policy == report.policy.get("name"):
        return ""
    return f"inherited from {c.policy}"


def attack_summary(report: BaseReport | None, name: str) -> AttackSummary | None:
    if report is None:
        return None
    if not isinstance(report, Report):  # only check/harden reports have an attack table
        return None
    return next((a for a in report.attacks if a.name == name), None)


def unavailable_reason(c: CheckResult, report: BaseReport | None) -> str | None:
    """Why the check's attack never ran (not implemented, not applicable, skipped), or None."""
    if c.attack == "best":
        if (
            report is not None
            and c.value is None
            and isinstance(report, Report)
            and report.attacks
            and all(a.status in NOT_RUN for a in report.attacks)
        ):
            return "no attack ran: " + "; ".join(f"{a.name}: {a.reason}" for a in report.attacks)
        return None
    a = attack_summary(report, c.attack)
    if a is not None and a.status in NOT_RUN:
        return a.reason or f"attack '{c.attack}' did not run"
    return None


def sizes_label(c: CheckResult, report: BaseReport | None) -> str:
    """Sample sizes behind the number: the evaluation split, and the whole audit set."""
    parts = []
    if c.n_members or c.n_nonmembers:
        parts.append(f"evaluation split {c.n_members} members / {c.n_nonmembers} non-members")
    if report is not None:
        d = getattr(report, "data", None)
        with contextlib.suppress(KeyError, TypeError):
            parts.append(f"audit set {d['members']['n']} members / {d['nonmembers']['n']} non-members")
    return "; ".join(parts) if parts else "no samples"


def check_message(c: CheckResult, report: BaseReport | None = None) -> str:
    """The full one-line message of a check, e.g. for a JUnit failure or a failed assertion.

    ``FAIL mia-accuracy: attack best → loss, metric accuracy = 0.912 [0.871, 0.945]
    (95% CI), threshold ≤ 0.8; n = evaluation split 100 members / 100 non-members;
    audit set 200 members / 200 non-members — accuracy 0.912 [...] exceeds 0.8``
    """
    head = {"pass": "PASS", "fail": "FAIL", "inconclusive": "inconclusive"}[c.status]
    missing = unavailable_reason(c, report) if c.status == "inconclusive" else None
    if missing:
        head = "inconclusive: attack not available"
    body = (
        f"{c.id}: attack {attack_label(c)}, metric {metric_label(c)} = {value_label(c)}, "
        f"threshold {bound_label(c)}; n = {sizes_label(c, report)}"
    )
    return f"{head} — check {body} — {missing or c.reason}"


def over_budget_line(report: BaseReport | None) -> str | None:
    """``not run for want of time (budget_s = 5 s): boundary (≈ 9.4 s), gradient (≈ 14 s)``; None when all ran."""
    attacks = report.attacks if isinstance(report, Report) else []
    over = [(a.name, a.extras["budget"]) for a in attacks if isinstance(a.extras.get("budget"), dict)]
    if not over:
        return None
    names = ", ".join(f"{n} (≈ {b['estimated_s']:.2g} s)" for n, b in over)
    return f"not run for want of time (budget_s = {over[0][1]['budget_s']:g} s): {names}"


def verdict_badge(verdict: str | None) -> str:
    return {"pass": "✅ PASS", "fail": "❌ FAIL", "inconclusive": "⚠️ INCONCLUSIVE"}.get(verdict or "", "ℹ️ MEASURED")


def _rate(d: Any) -> str:
    if not isinstance(d, dict) or not isinstance(d.get("n"), int):
        return "n/a"
    return f"{num(d.get('value'))} {interval(d.get('ci'))} (n = {d['n']})".replace("  ", " ")


def target_accuracy(report: BaseReport) -> str | None:
    """``target accuracy: members 0.993 [0.976, 0.999] (n = 300) · non-members …`` (privgate.inputs.sanity), or None."""
    acc = (report.target or {}).get("accuracy")
    if not isinstance(acc, dict):
        return None
    conf = acc.get("confidence")
    level = f", {conf * 100:.4g}% {acc.get('interval', 'Clopper-Pearson')} CI" if isinstance(conf, (int, float)) else ""
    base = acc.get("trivial")
    constant = (
        f" · always {str(base.get('label'))!r} {num(base['majority'])}, at the label frequencies {num(base['prior'])}"
        if isinstance(base, dict) and is_finite_number(base.get("majority")) and is_finite_number(base.get("prior"))
        else ""
    )
    return (
        f"target accuracy: members {_rate(acc.get('members'))} · non-members {_rate(acc.get('nonmembers'))}"
        f"{constant}{level}"
    )


def target_served(report: BaseReport) -> str | None:
    """``served by the API: top-1 probabilities rounded to 2 decimals (12,345 queries)`` (privgate.inputs.surface)."""
    served = (report.target or {}).get("served")
    if not isinstance(served, dict):
        return None
    queries = served.get("queries")
    count = f" ({queries:,} queries)" if isinstance(queries, int) else ""
    reading = f" ({served['reading']})" if served.get("reading") else ""
    return f"served by the API: {served.get('description')}{count}; every attack saw only this{reading}"


def target_notes(report: BaseReport) -> list[str]:
    """Facts about the target every format shows: what the API serves, accuracy on both audit sets, output kind."""
    outputs = (report.target or {}).get("outputs")
    note = outputs.get("note") if isinstance(outputs, dict) else None
    ep = (report.target or {}).get("endpoint")  # a live endpoint (privgate.inputs.targets.endpoint): what it cost
    endpoint = (
        f"endpoint: {ep['queries']} queries in {ep['requests']} requests ({ep['retries']} retries), "
        f"{ep['seconds']:.1f} s; output '{ep['output']}'" + (f"; {ep['note']}" if ep.get("note") else "")
        if isinstance(ep, dict) and "queries" in ep
        else None
    )
    lines = (target_served(report), target_accuracy(report), f"target outputs: {note}" if note else None, endpoint)
    return [line for line in lines if line]


__all__ = [
    "NOT_RUN",
    "attack_label",
    "attack_summary",
    "bound_label",
    "achieved_fpr",
    "check_fpr_label",
    "check_message",
    "interval",
    "metric_label",
    "origin_label",
    "plain",
    "rate_label",
    "sizes_label",
    "target_accuracy",
    "target_notes",
    "target_served",
    "over_budget_line",
    "unavailable_reason",
    "value_label",
    "verdict_badge",
]
