"""Policies: what leakage is acceptable for a model, as a validated YAML file.

A policy names the training data's sensitivity, the release, the confidence of every interval, the decision
rule, the attacks and the checks on their metrics. The built-in ``public``, ``internal``, ``confidential``
and ``strict`` ship in the package, their reasoning as YAML comments. Accuracy thresholds follow the
hypothesis-testing view of DP (Kairouz, Oh & Viswanath 2015, arXiv 1311.0776): (ε, δ)-DP bounds balanced
accuracy by (e^ε + δ) / (1 + e^ε), so 80 % is what ε = ln 4 allows (docs/policies.md).
"""

from __future__ import annotations

from privgate.policy.loading import (
    POLICY_SUFFIXES,
    as_policy,
    builtin_policies,
    load_policy,
    parse_policy,
    policy_json_schema,
)
from privgate.policy.schema import (
    DEFAULT_ATTACKS,
    FEDERATED_METRICS,
    Check,
    Decision,
    Federated,
    Metric,
    Policy,
    Regression,
    Release,
    Remediation,
    Sensitivity,
    Utility,
)
from privgate.policy.serves import Serves

__all__ = [
    "DEFAULT_ATTACKS",
    "POLICY_SUFFIXES",
    "FEDERATED_METRICS",
    "Check",
    "Decision",
    "Federated",
    "Metric",
    "Policy",
    "Regression",
    "Release",
    "Remediation",
    "Sensitivity",
    "Serves",
    "Utility",
    "as_policy",
    "builtin_policies",
    "load_policy",
    "parse_policy",
    "policy_json_schema",
]
