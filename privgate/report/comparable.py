"""Can two reports be compared? Only when they measured the same things on the same data.

:func:`comparability` returns None, or one sentence naming the first difference: the policy as the report
records it (checks, thresholds, attacks and options, confidence, decision rule — not its file path), or
the audit data's ``data.sha256``, one SHA-256 per set (members, non-members, population, after any
balancing sub-sample) so the reason says which differs. Used by ``privgate diff``
(:mod:`privgate.report.diff`).
"""

from __future__ import annotations

from typing import Any

from privgate.errors import PrivgateError
from privgate.report.model import CheckResult, Report


class NotComparable(PrivgateError):
    """The two reports measure different things: different schema, policy or audit data (exit 2)."""


# --------------------------------------------------------------------------- can they be compared?


def _policy_signature(r: Report) -> dict[str, Any]:
    """What makes two reports' numbers comparable, as recorded in the report (not the file path)."""
    pol = r.policy or {}
    return {
        "name": pol.get("name"),
        "sensitivity": pol.get("sensitivity"),
        "release": pol.get("release"),
        "confidence": pol.get("confidence"),
        "decision": pol.get("decision"),
        "extends": [(p.get("name"), p.get("confidence")) for p in pol.get("extends") or []],
    }


def _check_signature(c: CheckResult) -> dict[str, Any]:
    return {
        "attack": c.attack,
        "metric": c.metric,
        "max": c.threshold,
        "fpr": c.fpr,
        "delta": c.delta,
        "policy": c.policy,
    }


def comparability(base: Report, new: Report, base_name: str = "BASE", new_name: str = "NEW") -> str | None:
    """Why ``base`` and ``new`` cannot be compared (one sentence), or None when they can."""
    if base.schema_version != new.schema_version:
        return (
            f"{base_name} has report schema version {base.schema_version} and {new_name} {new.schema_version}; "
            "reports of different schema versions cannot be compared (re-run privgate check on the baseline)"
        )
    names = (base_name, new_name)
    return (
        _policies(base, new, *names)
        or _checks(base, new, *names)
        or _attacks(base, new, *names)
        or _data(base, new, *names)
    )


def _policies(base: Report, new: Report, base_name: str, new_name: str) -> str | None:
    """The first policy setting the two reports differ in, or None."""
    bp, np_ = _policy_signature(base), _policy_signature(new)
    for key in bp:
        if bp[key] != np_[key]:
            return (
                f"the reports were made with different policies: {key} is {bp[key]!r} in {base_name} and "
                f"{np_[key]!r} in {new_name}"
            )
    return None


def _checks(base: Report, new: Report, base_name: str, new_name: str) -> str | None:
    """How the two reports' checks differ (which, or one's settings), or None."""
    bc, nc = {c.id: _check_signature(c) for c in base.checks}, {c.id: _check_signature(c) for c in new.checks}
    if set(bc) != set(nc):
        only_b, only_n = sorted(set(bc) - set(nc)), sorted(set(nc) - set(bc))
        what = "; ".join(
            x
            for x in (
                f"only in {base_name}: {', '.join(only_b)}" if only_b else "",
                f"only in {new_name}: {', '.join(only_n)}" if only_n else "",
            )
            if x
        )
        return f"the reports were made with different policies: their checks differ ({what})"
    for cid, sig in bc.items():
        for key in sig:
            if sig[key] != nc[cid][key]:
                return (
                    f"the reports were made with different policies: check '{cid}' has {key} {sig[key]!r} in "
                    f"{base_name} and {nc[cid][key]!r} in {new_name}"
                )
    return None


def _attacks(base: Report, new: Report, base_name: str, new_name: str) -> str | None:
    """How the two reports' attacks differ (which, or one's options), or None."""
    ba, na = {a.name: a.options for a in base.attacks}, {a.name: a.options for a in new.attacks}
    if set(ba) != set(na):
        return (
            f"the reports were made with different policies: attacks {sorted(ba)} in {base_name}, "
            f"{sorted(na)} in {new_name}"
        )
    for name, opts in ba.items():
        if opts != na[name]:
            return (
                f"the reports were made with different policies: attack '{name}' runs with options {opts} in "
                f"{base_name} and {na[name]} in {new_name}"
            )
    return None


def _data(base: Report, new: Report, base_name: str, new_name: str) -> str | None:
    """Why the reports cannot be shown to audit the same data, or None."""
    for name, rep in ((base_name, base), (new_name, new)):
        if not (rep.data or {}).get("sha256"):
            return (
                f"{name} carries no fingerprint of its audit data (data.sha256; reports of privgate "
                f"{rep.privgate_version} and older have none), so it cannot be shown to audit the same data; "
                "re-run privgate check to make it"
            )
    if base.data["sha256"] != new.data["sha256"]:
        parts = [
            f"{role} sha256 {_short(base.data.get(role))} vs {_short(new.data.get(role))}"
            for role in ("members", "nonmembers", "population")
            if _digest(base.data.get(role)) != _digest(new.data.get(role))
        ]
        which = f" ({'; '.join(parts)})" if parts else ""
        return (
            f"the reports audit different data{which}: a change in a metric could come from the data, not the "
            "model; audit both models on the same members and non-members"
        )
    return None


def _digest(d: Any) -> str | None:
    return d.get("sha256") if isinstance(d, dict) else None


def _short(d: Any) -> str:
    digest = _digest(d)
    return f"{digest[:12]}…" if digest else "none"


__all__ = ["NotComparable", "comparability"]
