"""privgate: a privacy gate for trained machine-learning models.

>>> import privgate
>>> report = privgate.check("model.pt", "strict", "members.npz", "nonmembers.npz", recipe="recipe:RECIPE")
>>> report.verdict
'fail'

The public names are imported on first use (PEP 562), so ``import privgate``
and light CLI commands (``--version``, ``policy schema``) do not pay for torch.
"""

from __future__ import annotations

from privgate.lazy import exports

__version__ = "0.1.0"

#: public name -> module that defines it
_EXPORTS = {
    # the jobs (privgate.api) and their settings (privgate.settings)
    "check": "privgate.api",
    "harden": "privgate.api",
    "audit_ldp": "privgate.api",
    "audit_dpsgd": "privgate.api",
    "audit_federation": "privgate.api",
    "simulate_federation": "privgate.api",
    "plan": "privgate.api",
    "write_records": "privgate.api",
    "Hardening": "privgate.api",
    "Simulation": "privgate.api",
    "CheckSettings": "privgate.settings",
    "HardenSettings": "privgate.settings",
    "LdpAuditSettings": "privgate.settings",
    "DpsgdAuditSettings": "privgate.settings",
    "FederationAuditSettings": "privgate.settings",
    "SimulationSettings": "privgate.settings",
    "RunOptions": "privgate.options",
    "AuditData": "privgate.inputs.data",
    "Dataset": "privgate.inputs.data",
    "PrivgateError": "privgate.errors",
    "check_model": "privgate.gate",
    "Policy": "privgate.policy",
    "load_policy": "privgate.policy",
    "Recipe": "privgate.recipe",
    "TreeRecipe": "privgate.tree_recipe",
    "train_model": "privgate.training.loop",
    "BaseReport": "privgate.report.model",
    "CheckResult": "privgate.report.model",
    "Report": "privgate.report.model",
    "Target": "privgate.inputs.target",
    # the assertions pytest_privgate re-exports; they import neither pytest nor torch
    "assert_epsilon_below": "privgate.assertions",
    "assert_exposure_below": "privgate.assertions",
    "assert_inversion_below": "privgate.assertions",
    "assert_mia_below": "privgate.assertions",
    "assert_policy": "privgate.assertions",
}


__getattr__, __dir__ = exports("privgate", _EXPORTS, globals())

__all__ = ["__version__", *_EXPORTS]
