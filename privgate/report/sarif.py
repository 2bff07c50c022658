"""SARIF 2.1.0: failed and inconclusive checks as code-scanning results.

One ``rule`` per metric, one ``result`` per check that did not pass (``error`` for a violation, ``warning``
for an undecided check), pointing at the check's line in the policy file (the model file for a built-in
policy), relative to ``%SRCROOT%``. A report is data (docs/threat-model.md): rendering opens, stats or
resolves no path the report names; lines come from ``policy.check_lines``. Specification: OASIS SARIF
2.1.0 (errata 01), https://docs.oasis-open.org/sarif/sarif/v2.1.0/
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any
from urllib.parse import quote

from privgate.report.exposed import view as exposed_view
from privgate.report.labels import check_message
from privgate.report.model import CheckResult, Report
from privgate.report.remediation import section_of
from privgate.report.safe import clean, deep

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"

#: Rule per metric: (name, short description, full description).
RULES: dict[str, tuple[str, str, str]] = {
    "accuracy": (
        "MembershipInferenceAccuracy",
        "Membership-inference accuracy above the policy's bound",
        "Balanced accuracy of a membership-inference attack at a threshold calibrated on a disjoint split "
        "(0.5 = guessing). An (ε, δ)-DP model bounds it by (e^ε + δ)/(1 + e^ε) (Kairouz et al. 2015).",
    ),
    "auc": (
        "MembershipInferenceAUC",
        "Membership-inference AUC above the policy's bound",
        "Area under the ROC curve of a membership-inference attack on the evaluation split.",
    ),
    "advantage": (
        "MembershipInferenceAdvantage",
        "Membership advantage (TPR − FPR) above the policy's bound",
        "Membership advantage max(TPR − FPR) of an attack (Yeom et al. 2018, arXiv 1709.01604).",
    ),
    "tpr_at_fpr": (
        "MembershipInferenceLowFPR",
        "True-positive rate at a low false-positive rate above the policy's bound",
        "TPR of a membership-inference attack at a fixed low FPR, the regime where real exposure shows "
        "(Carlini et al. 2022, arXiv 2112.03570).",
    ),
    "epsilon_lb": (
        "EmpiricalEpsilonLowerBound",
        "An attack proves a privacy loss ε above the policy's bound",
        "Empirical ε lower bound implied by an attack's TPR/FPR with Clopper-Pearson intervals "
        "(Jagielski et al. 2020, arXiv 2006.07709; Nasr et al. 2021, arXiv 2101.04535).",
    ),
    "similarity": (
        "ModelInversionSimilarity",
        "Model-inversion reconstructions too similar to training examples",
        "Similarity of white-box model-inversion reconstructions to real training examples (Fredrikson et al. 2015).",
    ),
    "attribute_advantage": (
        "AttributeInferenceAdvantage",
        "Attribute-inference gain above the policy's bound",
        "Attribute-inference accuracy gain over the best guess from the population (Yeom et al. 2018).",
    ),
    "isolated_fraction": (
        "TreeLeafIsolation",
        "Members isolated in small leaves of the released trees above the policy's bound",
        "Share of training records that fall, in some tree of the released model, into a leaf holding fewer than k "
        "training rows (SACRO-ML's structural attack; Preen & Smith 2025, arXiv 2502.09396).",
    ),
    "utility": (
        "UtilityFloor",
        "Model utility below the policy's floor",
        "Held-out accuracy of the model, a floor used by DP remediation.",
    ),
}


def rule_id(metric: str) -> str:
    return f"privgate/{metric}"


def _rule(metric: str) -> dict[str, Any]:
    name, short, full = RULES.get(
        metric, (metric.title().replace("_", ""), f"{metric} above the policy's bound", f"Policy bound on {metric}.")
    )
    return {
        "id": rule_id(metric),
        "name": name,
        "shortDescription": {"text": short},
        "fullDescription": {"text": full},
        "defaultConfiguration": {"level": "note" if metric == EXPOSED_RULE else "error"},
        "help": {
            "text": f"{full} Lower the leakage (e.g. retrain with DP-SGD: privgate check --remediate) or, if "
            f"justified, change the check's 'max' in the policy."
        },
        "properties": {
            "tags": ["privacy", "security", "membership-inference"],
            "security-severity": "7.5",
            "precision": "high",
        },
    }


def _uri(path: str) -> tuple[str, str | None]:
    """(uri, uriBaseId): relative to %SRCROOT% (the working directory) when inside it, by the path's text alone."""
    text = clean(path, newlines=False)
    try:
        cwd = os.getcwd()
        absolute = os.path.normpath(os.path.join(cwd, text))  # '..' resolved as text: no file system access
        rel = os.path.relpath(absolute, cwd)
    except (ValueError, OSError):  # another drive (Windows), no working directory: a name, not a file
        return quote(text), None
    if rel != ".." and not rel.startswith(".." + os.sep):
        return Path(rel).as_posix(), "%SRCROOT%"
    return Path(absolute).as_uri(), None


def _check_lines(report: Report) -> dict[str, int]:
    """The line of each check in the policy file, as ``check`` recorded it (``policy.check_lines``); only
    well-formed entries (a check id and a positive line), since a saved report may say anything."""
    lines = report.policy.get("check_lines")
    if not isinstance(lines, dict):
        return {}
    return {str(k): v for k, v in lines.items() if isinstance(v, int) and not isinstance(v, bool) and 0 < v < 1 << 31}


def _policy_file(report: Report) -> str | None:
    """The policy's file as the report names it (never opened); None for a built-in policy (no file here)."""
    source = report.policy.get("source")
    if not isinstance(source, str) or not source or "\0" in source:
        return None
    return source if source.endswith((".yaml", ".yml")) else None


def _location(report: Report, c: CheckResult, lines: dict[str, int]) -> dict[str, Any]:
    policy_file = _policy_file(report)
    logical = [{"name": c.id, "fullyQualifiedName": f"{report.policy.get('name')}/{c.id}", "kind": "member"}]
    if policy_file is not None:
        uri, base = _uri(policy_file)
        phys: dict[str, Any] = {"artifactLocation": {"uri": uri, **({"uriBaseId": base} if base else {})}}
        if c.id in lines:
            phys["region"] = {"startLine": lines[c.id]}
        return {"physicalLocation": phys, "logicalLocations": logical}
    model = str(report.target.get("path") or "")
    if model and not model.startswith("<"):
        uri, base = _uri(model)
        return {
            "physicalLocation": {"artifactLocation": {"uri": uri, **({"uriBaseId": base} if base else {})}},
            "logicalLocations": logical,
        }
    return {"logicalLocations": logical}


def _fingerprint(report: Report, c: CheckResult) -> str:
    key = "\0".join([str(report.policy.get("name")), c.id, str(report.target.get("path"))])
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:32]


#: The rule of an exposed training record (privgate.stats.exposed_members).
EXPOSED_RULE = "exposed_record"
RULES[EXPOSED_RULE] = (
    "ExposedTrainingRecord",
    "A training record the strongest membership-inference attack singles out",
    "A member of the training set that the leading attack scores among the highest: an attacker flagging everyone "
    "down to this record operates at the FPR given (Carlini et al. 2022, arXiv 2112.03570). Remove, deduplicate or "
    "down-weight it before retraining.",
)


#: Suffixes of the audit data files privgate reads (privgate.inputs.data, privgate.inputs.text).
_DATA_SUFFIXES = (".npz", ".pt", ".csv", ".jsonl", ".txt", ".json")


def _data_file(source: str) -> bool:
    """Whether a data source names a file, by its text (a ``module:function`` factory or ``<in memory>`` does not)."""
    return bool(source) and not source.startswith("<") and Path(source).suffix.lower() in _DATA_SUFFIXES


def _exposed_results(report: Report) -> list[dict[str, Any]]:
    """One ``note`` per exposed record, when the model did not pass (a passing model's top records are no finding)."""
    exposed = exposed_view(report)
    if exposed is None or report.verdict == "pass":
        return []
    source = str((report.data.get("members") or {}).get("source") or "")
    where: dict[str, Any] = {}
    if _data_file(source):
        uri, base = _uri(source)
        where = {"physicalLocation": {"artifactLocation": {"uri": uri, **({"uriBaseId": base} if base else {})}}}
    out = []
    for rec in exposed.records:
        mine = rec["attacks"][exposed.attack]
        text = (
            f"training record {rec['member_index']} (label {rec['label']}) is exposed: '{exposed.attack}' ranks it "
            f"{mine['rank']} of {report.exposed.get('n_members')} members, at FPR {mine['fpr']:.4g} "
            f"(TPR {mine['tpr']:.4g})"
        )
        logical = {"name": f"members[{rec['member_index']}]", "kind": "element"}
        key = "\0".join([str(report.target.get("path")), source, str(rec["member_index"])])
        out.append(
            {
                "ruleId": rule_id(EXPOSED_RULE),
                "kind": "review",
                "level": "note",
                "message": {"text": text},
                "locations": [{**where, "logicalLocations": [logical]}],
                "partialFingerprints": {
                    "privgateRecord/v1": hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:32]
                },
                "properties": {
                    "memberIndex": rec["member_index"],
                    "label": rec["label"],
                    "split": rec["split"],
                    "attack": exposed.attack,
                    "attacks": rec["attacks"],
                },
            }
        )
    return out


def render_sarif(report: Report) -> str:
    """The report as a SARIF 2.1.0 log with one run."""
    exposed = _exposed_results(report)
    metrics = sorted({c.metric for c in report.checks}) + ([EXPOSED_RULE] if exposed else [])
    index = {m: i for i, m in enumerate(metrics)}
    policy_file = _policy_file(report)
    lines = _check_lines(report) if policy_file else {}
    results = []
    for c in report.checks:
        if c.status == "pass":
            continue
        results.append(
            {
                "ruleId": rule_id(c.metric),
                "ruleIndex": index[c.metric],
                "kind": "fail",
                "level": "error" if c.status == "fail" else "warning",
                "message": {"text": check_message(c, report)},
                "locations": [_location(report, c, lines)],
                "partialFingerprints": {"privgateCheck/v1": _fingerprint(report, c)},
                "properties": {
                    "check": c.id,
                    "status": c.status,
                    "attack": c.attack,
                    "chosenAttack": c.chosen_attack,
                    "metric": c.metric,
                    "value": c.value,
                    "ci": c.ci,
                    "threshold": c.threshold,
                    "confidence": c.confidence,
                    "nMembers": c.n_members,
                    "nNonmembers": c.n_nonmembers,
                },
            }
        )
    results += [{**r, "ruleIndex": index[EXPOSED_RULE]} for r in exposed]
    run: dict[str, Any] = {
        "tool": {
            "driver": {
                "name": "privgate",
                "version": report.privgate_version,
                "semanticVersion": report.privgate_version,
                "rules": [_rule(m) for m in metrics],
            }
        },
        "invocations": [
            {
                "executionSuccessful": True,
                "exitCode": report.exit_code,
                "toolExecutionNotifications": [{"level": "warning", "message": {"text": w}} for w in report.warnings],
            }
        ],
        "results": results,
        "properties": {
            "verdict": report.verdict,
            "summary": report.summary,
            "policy": report.policy.get("name"),
            "target": report.target.get("path"),
            "seed": report.environment.get("seed"),
            "targetAccuracy": report.target.get("accuracy"),
        },
    }
    rem = section_of(report)
    if rem is not None and rem.statement is not None:  # the hardened model's DP statement, typed as in the JSON
        run["properties"]["dpEpsilons"] = rem.statement.line()
        run["properties"]["dpStatement"] = rem.statement.model_dump(mode="json")
    if rem is not None and rem.capacity is not None:  # a capacity search's statement: no DP guarantee, no ε
        run["properties"]["capacityStatement"] = rem.capacity.model_dump(mode="json")
    if policy_file is not None:
        uri, base = _uri(policy_file)
        run["artifacts"] = [{"location": {"uri": uri, **({"uriBaseId": base} if base else {})}, "roles": ["policy"]}]
    log = {"$schema": SARIF_SCHEMA, "version": "2.1.0", "runs": [run]}
    return json.dumps(deep(log), indent=2, ensure_ascii=False) + "\n"  # control bytes gone (report.safe)


__all__ = ["EXPOSED_RULE", "RULES", "render_sarif", "rule_id"]
