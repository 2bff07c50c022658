"""privgate: a privacy gate for trained machine-learning models.

>>> import privgate
>>> report = privgate.check("model.pt", "strict", "members.npz", "nonmembers.npz", recipe="recipe:RECIPE")
>>> report.verdict
'fail'
"""

from __future__ import annotations

__version__ = "0.1.0"

from privgate.api import check  # noqa: E402
from privgate.data import AuditData, Dataset  # noqa: E402
from privgate.errors import PrivgateError  # noqa: E402
from privgate.gate import audit  # noqa: E402
from privgate.policy import Policy, load_policy  # noqa: E402
from privgate.recipe import Recipe  # noqa: E402
from privgate.report.model import CheckResult, Report  # noqa: E402
from privgate.target import Target  # noqa: E402

__all__ = [
    "AuditData",
    "CheckResult",
    "Dataset",
    "Policy",
    "PrivgateError",
    "Recipe",
    "Report",
    "Target",
    "__version__",
    "audit",
    "check",
    "load_policy",
]
