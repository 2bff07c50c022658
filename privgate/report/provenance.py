"""What every report records besides its findings: the run's provenance, the policy, the verdict line.

One builder each, used by every job (:mod:`privgate.api`): :func:`environment`
(seed, threads, device, library versions), :func:`policy_facts` (the policy and
the chain it extends) and :func:`summary_line` (the verdict line the console
ends with and CI logs show).
"""

from __future__ import annotations

import platform
import sys
from collections.abc import Iterable
from importlib import metadata
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from privgate.options import RunOptions
    from privgate.policy import Policy
    from privgate.report.model import CheckResult

#: Libraries whose versions every report records.
CORE_LIBRARIES = ("privgate", "torch", "numpy", "scipy", "scikit-learn", "opacus", "pydantic")


def version_of(package: str) -> str | None:
    """The installed version of ``package``, or ``None`` when it is not installed."""
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def environment(run: RunOptions, libraries: Iterable[str] = ()) -> dict[str, Any]:
    """What the report records of the run's settings and the software it ran on.

    ``threads`` is how many threads the run used and ``threads_reason`` why
    (a flag, a variable, the config, or the cores this process may use);
    ``device`` is where the run's tensors lived (``auto`` resolved; with the
    GPU's model for ``cuda``), ``device_requested`` what was asked for and
    ``device_reason`` why it is that device (``auto``'s estimate in one
    sentence: :func:`privgate.device.choose_device`) and, where ``auto`` made an
    estimate, ``device_estimate`` (seconds on each device and the costs charged,
    measured or cached: :mod:`privgate.calibration`); ``devices`` the devices reference-model groups spread
    over (``--devices``, asked for as ``devices_requested``; which group ran where is each attack's
    ``extras.placement``); ``engine`` is the engine
    setting — what each attack's reference models actually ran on is in its
    ``extras.engine`` and ``extras.kernel``. ``libraries`` adds the versions of a
    job's own dependencies (networkx for federations, transformers for language models).
    """
    from privgate.device import describe_device

    run = run.resolved()
    return {
        "seed": run.seed,
        "threads": run.threads,
        "threads_reason": run.threads_reason,
        "engine": run.engine,
        "executor": run.executor,
        "models_per_task": run.models_per_task,
        **describe_device(run.device),
        "device_requested": run.device_requested,
        "device_reason": run.device_reason,
        "devices": list(run.device_list or (run.device,)),
        **({"devices_requested": str(run.devices)} if run.devices is not None else {}),
        **({"device_estimate": run.device_estimate} if run.device_estimate else {}),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "versions": {p: version_of(p) for p in (*CORE_LIBRARIES, *libraries)},
    }


def policy_facts(policy: Policy) -> dict[str, Any]:
    """What the report records about the policy, including the chain it extends."""
    facts: dict[str, Any] = {
        "name": policy.name,
        "sensitivity": policy.sensitivity.value,
        "release": policy.release.value,
        "confidence": policy.confidence,
        "decision": policy.decision.value,
        "source": policy.source,
        "regression": policy.regression.resolved(),  # tolerances of privgate diff
    }
    if str(policy.source or "").endswith((".yaml", ".yml")) and policy.check_lines:
        facts["check_lines"] = policy.check_lines  # for SARIF: read back from the report, the file never opened
    if policy.parent is not None:
        facts["extends"] = [
            {"name": p.name, "source": p.source, "confidence": p.confidence} for p in policy.chain()[:-1]
        ]
    if policy.uses_default_attacks():
        facts["default_attacks"] = True
    return facts


def summary_line(verdict: str, checks: list[CheckResult], what: str = "checks") -> str:
    """``FAIL: 9 checks (3 fail, 5 inconclusive, 1 pass); first: <id> — <reason>``."""
    if not checks:
        return "PASS: the policy requires no checks."
    counts = {s: sum(c.status == s for c in checks) for s in ("pass", "fail", "inconclusive")}
    parts = [f"{counts[s]} {s}" for s in ("fail", "inconclusive", "pass") if counts[s]]
    first = next((c for c in checks if c.status == verdict), None) if verdict != "pass" else None
    tail = f"; first: {first.id} — {first.reason}" if first else ""
    return f"{verdict.upper()}: {len(checks)} {what} ({', '.join(parts)}){tail}"


__all__ = ["CORE_LIBRARIES", "environment", "policy_facts", "summary_line", "version_of"]
