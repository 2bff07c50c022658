"""Log a report to MLflow: the verdict, every check's value and interval, the attack table, the reports.

Optional (``pip install 'privgate[mlflow]'``); used by ``privgate check --mlflow`` or as
``log_report(report, model_version=("fraud-scorer", "3"))`` inside ``mlflow.start_run()``. With a model
version named, its tag ``privgate.verdict`` is set too, for registry promotion rules. Logging is a side
channel, never the verdict (:func:`prepare`, :func:`log_or_warn`): a tracking server that does not answer
or refuses a call is one warning line; only what the user typed wrong (MLflow missing, a bad
``--mlflow-model``, an unknown model version) is exit 2, before the audit. The tags, params, metrics and
artefacts written are listed in docs/ci.md (MLflow).
"""

from __future__ import annotations

import importlib.util
import re
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

from privgate.errors import PrivgateError
from privgate.report.model import Report
from privgate.report.numbers import is_finite_number

ARTIFACT_DIR = "privgate"
INSTALL_HINT = "pip install 'privgate[mlflow]'"
#: Seconds the probe of an HTTP tracking server waits for an answer.
PROBE_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class Logged:
    """Where a report went: the run, its experiment, the tracking URI, and the model version tagged (if any)."""

    run_id: str
    experiment_id: str
    tracking_uri: str
    model_version: tuple[str, str] | None = None


def available() -> bool:
    """Whether an MLflow client is installed (without importing it)."""
    return importlib.util.find_spec("mlflow") is not None


def require() -> None:
    """Raise one sentence when MLflow is missing (before any audit work is done)."""
    if not available():
        raise PrivgateError(f"--mlflow needs the MLflow client, which is not installed: {INSTALL_HINT}.")


def parse_model_version(spec: str) -> tuple[str, str]:
    """``NAME:VERSION`` → (name, version); the version is a positive integer."""
    name, sep, version = spec.rpartition(":")
    if not sep or not name or not version.isdigit() or int(version) < 1:
        raise PrivgateError(
            f"--mlflow-model: expected NAME:VERSION of a registered model version (e.g. fraud-scorer:3), got {spec!r}."
        )
    return name, version


def _key(*parts: str) -> str:
    """An MLflow metric/tag key: ``:`` → ``/``, anything else outside [/\\w.\\- ] → ``_``."""
    return re.sub(r"[^/\w.\- ]", "_", "/".join(p.replace(":", "/") for p in parts))


def report_metrics(report: Report) -> dict[str, float]:
    """Every number of the report MLflow can chart: checks (value, interval, threshold, n) and attacks."""
    out: dict[str, float] = {}
    for c in report.checks:
        vals = {
            "value": c.value,
            "lo": c.ci[0] if c.ci else None,
            "hi": c.ci[1] if c.ci else None,
            "threshold": c.threshold,
            "confidence": c.confidence,
            "n_members": c.n_members,
            "n_nonmembers": c.n_nonmembers,
        }
        out.update({_key("privgate", "check", c.id, k): float(v) for k, v in vals.items() if is_finite_number(v)})
    for a in report.attacks:
        if a.status != "ran":
            continue
        vals = {
            "auc": a.auc,
            "auc_lo": a.auc_ci[0] if a.auc_ci else None,
            "auc_hi": a.auc_ci[1] if a.auc_ci else None,
            "accuracy": a.accuracy,
            **{f"tpr_at_fpr_{p.fpr:g}": p.tpr for p in a.tpr_at_fpr},
        }
        out.update({_key("privgate", "attack", a.name, k): float(v) for k, v in vals.items() if is_finite_number(v)})
    return out


def attack_table(report: Report) -> list[dict[str, Any]]:
    """The attacks table as rows (what the Markdown and HTML reports show)."""
    return [
        {
            "attack": a.name,
            "threat_model": a.threat_model,
            "status": a.status,
            "reason": a.reason,
            "auc": a.auc,
            "auc_ci": a.auc_ci,
            "accuracy": a.accuracy,
            "accuracy_ci": a.accuracy_ci,
            "tpr_at_fpr": [
                {"fpr": p.fpr, "tpr": p.tpr, "ci": p.ci, "fpr_achieved": p.fpr_achieved} for p in a.tpr_at_fpr
            ],
            "n_members": a.n_members,
            "n_nonmembers": a.n_nonmembers,
            "seconds": a.seconds,
        }
        for a in report.attacks
    ]


def unreachable(uri: str, timeout: float = PROBE_TIMEOUT_S) -> str | None:
    """Why the HTTP tracking server at ``uri`` does not answer (a few words), or None when it does.

    Any HTTP answer to ``GET {uri}/health``, an error status included, counts
    as answering (a proxy may not route that path). URIs that are not
    ``http(s)://`` (``databricks``, ``sqlite:``, ``file:``) are not probed.
    """
    if not uri.lower().startswith(("http://", "https://")):
        return None
    try:
        with urllib.request.urlopen(f"{uri.rstrip('/')}/health", timeout=timeout):
            return None
    except urllib.error.HTTPError:
        return None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", None) or exc
        text = getattr(reason, "strerror", None) or str(reason) or type(reason).__name__
        return "timed out" if isinstance(reason, TimeoutError) else text.lower()


@dataclass(frozen=True)
class Plan:
    """What ``--mlflow`` / ``--mlflow-model`` will do after the audit: the model version to tag, or why nothing."""

    model_version: tuple[str, str] | None = None
    skipped: str | None = None  # the warning to print instead of logging (the server does not answer)


def _uri() -> str:
    import mlflow

    return mlflow.get_tracking_uri()


def prepare(log: bool, model: str | None) -> Plan | None:
    """Before the audit: MLflow is installed, ``model`` is ``NAME:VERSION`` and, when the server answers, exists.

    Returns:
        None without ``--mlflow`` / ``--mlflow-model``; else a :class:`Plan`,
        whose ``skipped`` says why nothing will be logged when the tracking
        server does not answer (the audit runs all the same).

    Raises:
        PrivgateError: MLflow missing, a malformed ``NAME:VERSION``, or a
            version the registry says does not exist (exit code 2).
    """
    if not (log or model):
        return None
    require()
    version = parse_model_version(model) if model else None
    uri = _uri()
    down = unreachable(uri)
    if down is not None:
        return Plan(version, _warning(uri, f"no tracking server answers ({down})"))
    if version is not None:
        refused = check_model_version(*version)
        if refused is not None:
            return Plan(version, _warning(uri, refused))
    return Plan(version)


def _warning(uri: str, why: str) -> str:
    return f"MLflow ({uri}): {why}; nothing was logged, and the verdict and exit code are the audit's."


def log_or_warn(report: Report, plan: Plan) -> tuple[Logged | None, str | None]:
    """After the audit: log ``report`` as ``plan`` says; a failure is a warning line, never an exit code."""
    if plan.skipped is not None:
        return None, plan.skipped
    try:
        return log_report(report, model_version=plan.model_version), None
    except PrivgateError as exc:
        return None, str(exc).rstrip(".") + "; the verdict and exit code are the audit's."


def check_model_version(name: str, version: str) -> str | None:
    """Fail early, before the audit, when the registered model version does not exist.

    Returns:
        None when it exists; why not, when the server refuses the question
        (an error other than "does not exist": no permission, a wrong path).

    Raises:
        PrivgateError: the registry answers that there is no such version.
    """
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    try:
        MlflowClient().get_model_version(name, version)
    except MlflowException as exc:
        if exc.error_code == "RESOURCE_DOES_NOT_EXIST":
            raise PrivgateError(
                f"--mlflow-model {name}:{version}: no such registered model version in the MLflow registry "
                f"({_first_line(exc)})."
            ) from None
        return f"could not look up --mlflow-model {name}:{version} ({_first_line(exc)})"
    return None


def _first_line(exc: BaseException) -> str:
    """The first line of an MLflow error, up to its first sentence's end (a response body may follow)."""
    text = str(exc).strip().splitlines()
    line = text[0] if text else exc.__class__.__name__
    return line.split(". ")[0].rstrip(".")[:300]


def log_report(report: Report, *, model_version: tuple[str, str] | None = None) -> Logged:
    """Log ``report`` to the active MLflow run (starting one when none is active) and tag ``model_version``.

    Raises:
        PrivgateError: MLflow is missing, or refused a call (unreachable tracking
            server, file store not allowed, unknown model version): one sentence.
    """
    require()
    import mlflow
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    from privgate.report import render

    started_here = mlflow.active_run() is None
    try:
        run = mlflow.start_run() if started_here else mlflow.active_run()
        try:
            pol = report.policy or {}
            tags = {
                "privgate.verdict": report.verdict,
                "privgate.policy": str(pol.get("name")),
                "privgate.summary": report.summary[:5000],
                "privgate.version": report.privgate_version,
                "privgate.target_sha256": str((report.target or {}).get("sha256") or ""),
                "privgate.data_sha256": str((report.data or {}).get("sha256") or ""),
            }
            tags.update({_key(f"privgate.check.{c.id}"): c.status for c in report.checks})
            mlflow.set_tags(tags)
            mlflow.log_params(
                {
                    "privgate.policy": pol.get("name"),
                    "privgate.confidence": pol.get("confidence"),
                    "privgate.seed": report.environment.get("seed"),
                }
            )
            mlflow.log_metrics(report_metrics(report))
            mlflow.log_dict(attack_table(report), f"{ARTIFACT_DIR}/attacks.json")
            mlflow.log_text(render(report, "json"), f"{ARTIFACT_DIR}/privgate-report.json")
            mlflow.log_text(render(report, "markdown"), f"{ARTIFACT_DIR}/privgate-summary.md")
            mlflow.log_text(render(report, "html"), f"{ARTIFACT_DIR}/privgate-report.html")
            if model_version is not None:
                client = MlflowClient()
                name, version = model_version
                for key, value in (
                    ("privgate.verdict", report.verdict),
                    ("privgate.policy", str(pol.get("name"))),
                    ("privgate.run_id", run.info.run_id),
                ):
                    client.set_model_version_tag(name, version, key, value)
            return Logged(run.info.run_id, run.info.experiment_id, mlflow.get_tracking_uri(), model_version)
        finally:
            if started_here:
                mlflow.end_run()
    except MlflowException as exc:
        raise PrivgateError(
            f"MLflow ({mlflow.get_tracking_uri()}): could not log the report ({_first_line(exc).rstrip('.')})."
        ) from None


__all__ = [
    "ARTIFACT_DIR",
    "Logged",
    "Plan",
    "log_or_warn",
    "prepare",
    "unreachable",
    "attack_table",
    "available",
    "check_model_version",
    "log_report",
    "parse_model_version",
    "report_metrics",
    "require",
]
