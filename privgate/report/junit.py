"""JUnit XML: one ``<testcase>`` per policy check, for CI test dashboards.

The layout follows the de-facto schema that Jenkins, GitLab, GitHub test
reporters and pytest's ``--junitxml`` share (``testsuites`` > ``testsuite`` >
``testcase``). A failed check is a ``<failure>``; an inconclusive one is an
``<error>`` (the check could not be decided, which is not a pass); both carry the
check's full message (:func:`privgate.report.labels.check_message`).
"""

from __future__ import annotations

import socket
import xml.etree.ElementTree as ET

from privgate.report.exposed import view as exposed_view
from privgate.report.labels import attack_summary, check_message, target_accuracy
from privgate.report.model import Report
from privgate.report.remediation import section_of
from privgate.report.safe import xml as _clean
from privgate.report.safe import xml_tree


def _seconds(report: Report, attack: str | None) -> float:
    a = attack_summary(report, attack) if attack else None
    return float(a.seconds) if a is not None else 0.0


def render_junit(report: Report) -> str:
    """The report as a JUnit XML document (UTF-8, with declaration)."""
    policy = str(report.policy.get("name", "policy"))
    suite_name = f"privgate.{policy}"
    counts = {s: sum(c.status == s for c in report.checks) for s in ("pass", "fail", "inconclusive")}
    attrs = {
        "tests": str(len(report.checks)),
        "failures": str(counts["fail"]),
        "errors": str(counts["inconclusive"]),
        "skipped": "0",
        "time": f"{report.duration_s:.3f}",
    }
    root = ET.Element("testsuites", {"name": "privgate", **attrs})
    suite = ET.SubElement(
        root, "testsuite", {"name": suite_name, **attrs, "timestamp": report.started, "hostname": socket.gethostname()}
    )
    props = ET.SubElement(suite, "properties")
    for key, value in (
        ("verdict", report.verdict),
        ("policy", policy),
        ("policy_source", report.policy.get("source")),
        ("target", report.target.get("path")),
        ("target_sha256", report.target.get("sha256")),
        ("seed", report.environment.get("seed")),
        ("privgate_version", report.privgate_version),
        ("target_accuracy", target_accuracy(report)),
    ):
        if value is not None:
            ET.SubElement(props, "property", {"name": key, "value": _clean(str(value))})
    rem = section_of(report)
    st = rem.statement if rem is not None else None
    if st is not None:  # the hardened model's two ε, named, and the line that says which is which
        for key, value in (
            ("dp_training_epsilon", st.training_epsilon),
            ("dp_released_epsilon", st.released_epsilon),
            ("dp_delta", st.delta),
            ("dp_epsilons", st.line()),
        ):
            ET.SubElement(props, "property", {"name": key, "value": _clean(str(value))})
    cap = rem.capacity if rem is not None else None
    if cap is not None:  # a scikit-learn model hardened by its capacity: what it is, and that it has no ε
        for key, value in (("hardened_settings", ", ".join(f"{k}={v}" for k, v in cap.chosen.items())),
                           ("dp_guarantee", "none (capacity search: an empirical result, no ε)")):  # fmt: skip
            ET.SubElement(props, "property", {"name": key, "value": _clean(str(value))})
    for c in report.checks:
        case = ET.SubElement(
            suite,
            "testcase",
            {"classname": suite_name, "name": c.id, "time": f"{_seconds(report, c.chosen_attack or c.attack):.3f}"},
        )
        message = _clean(check_message(c, report))
        if c.status == "fail":
            node = ET.SubElement(case, "failure", {"message": message, "type": "privgate.fail"})
            node.text = message
        elif c.status == "inconclusive":
            node = ET.SubElement(case, "error", {"message": message, "type": "privgate.inconclusive"})
            node.text = message
        else:
            ET.SubElement(case, "system-out").text = message
    exposed = exposed_view(report)
    if exposed is not None:  # which records leak: a property per record, the table in the suite's output
        for row, rec in zip(exposed.rows, exposed.records):
            mine = rec["attacks"][exposed.attack]
            ET.SubElement(
                props,
                "property",
                {
                    "name": f"exposed.{row[0]}",
                    "value": _clean(
                        f"member {rec['member_index']} ({exposed.attack} score {mine['score']:.4g}, "
                        f"FPR {mine['fpr']:.4g}, TPR {mine['tpr']:.4g})"
                    ),
                },
            )
        text = [exposed.intro, " | ".join(exposed.header)] + [" | ".join(r) for r in exposed.rows]
        ET.SubElement(suite, "system-out").text = _clean("\n".join(text))
    if report.warnings:
        ET.SubElement(suite, "system-err").text = _clean("\n".join(report.warnings))
    xml_tree(root)  # every name, message and property: only characters XML 1.0 allows (privgate.report.safe)
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


__all__ = ["render_junit"]
