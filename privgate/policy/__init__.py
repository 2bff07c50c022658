"""Policies: what leakage is acceptable for a model, as a validated YAML file.

A policy names the sensitivity of the training data, how the model is released,
the confidence level of every interval, how a check is decided, the attacks to
run and the checks on their metrics. The built-in policies ``public``,
``internal``, ``confidential`` and ``strict`` ship inside the package; their
reasoning is written as comments in their YAML files.

The link between a balanced membership-inference accuracy threshold and ε is
the hypothesis-testing view of differential privacy (Kairouz, Oh & Viswanath
2015, arXiv 1311.0776): an (ε, δ)-DP training algorithm bounds any attack's
balanced accuracy by (e^ε + δ) / (1 + e^ε), so "accuracy below 80 %" is the
accuracy an ε = ln 4 ≈ 1.39 guarantee would allow.
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
