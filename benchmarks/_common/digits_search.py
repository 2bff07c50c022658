"""The digits example's remediation search, as ``remediation/ladder_vs_bisect.py`` and ``search_cost.py`` run it.

:func:`digits_audit` loads the example's target, its audit rows and a policy and checks the original model once;
:func:`search` runs :func:`privgate.dp.remediate.remediate` with the policy's remediation settings updated.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DIGITS = ROOT / "examples" / "digits"
POLICY = DIGITS / "strict-remediate.yaml"


@dataclass
class DigitsAudit:
    """The digits example ready to remediate: the policy, target, members, audit rows and the original's report."""

    policy: object
    target: object
    recipe: object
    members: object
    data: object
    original: object


def digits_audit(policy_path: str | Path, seed: int, cache_dir: str | None = None) -> DigitsAudit:
    """Load ``examples/digits`` (its ``data.py``, ``recipe.py``, ``model.pt``) and check the original model once."""
    sys.path[:0] = [str(ROOT), str(DIGITS)]
    import data as digits_data  # examples/digits/data.py
    from recipe import RECIPE  # examples/digits/recipe.py

    from privgate.gate import check_model
    from privgate.inputs.data import AuditData, Dataset
    from privgate.inputs.target import Target
    from privgate.policy import load_policy

    policy = load_policy(policy_path)
    target = Target.load(DIGITS / "model.pt", recipe=RECIPE)
    members = Dataset(*digits_data.members(), "data:members")
    data = AuditData(
        members,
        Dataset(*digits_data.nonmembers(), "data:nonmembers"),
        Dataset(*digits_data.population(), "data:population"),
        seed=seed,
    )
    original = check_model(target, data, policy, recipe=RECIPE, seed=seed, cache_dir=cache_dir)
    return DigitsAudit(policy, target, RECIPE, members, data, original)


def search(audit: DigitsAudit, seed: int, update: dict, **remediate_kwargs: object) -> tuple[object, float]:
    """One remediation search with ``update`` applied to the policy's remediation settings: (outcome, seconds)."""
    from privgate.dp.remediate import remediate

    rem = audit.policy.remediation.model_copy(update=update)
    pol = audit.policy.model_copy(update={"remediation": rem})
    t = time.perf_counter()
    out = remediate(
        audit.target,
        audit.data,
        pol,
        audit.recipe,
        seed=seed,
        train=audit.members,
        original=audit.original,
        **remediate_kwargs,
    )
    return out, time.perf_counter() - t
