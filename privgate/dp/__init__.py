"""Remediation with differential privacy: DP-SGD retraining (:mod:`.train`) and the ε search (:mod:`.remediate`).

DP-SGD (Abadi et al. 2016, arXiv 1607.00133) bounds how much any one training
example can change the trained model, so it bounds every membership-inference
attack at once: an (ε, δ)-DP training run caps any attack's balanced accuracy at
(e^ε + δ)/(1 + e^ε) (Kairouz, Oh & Viswanath 2015, arXiv 1311.0776). privgate
retrains a failing model with DP-SGD through Opacus (Yousefpour et al. 2021,
arXiv 2109.12298) at decreasing ε and re-attacks each candidate until the policy
passes within its utility floor.

Opacus is imported lazily (inside the functions that train), so importing
privgate stays fast for audits that never remediate.
"""

from __future__ import annotations

from privgate.dp.clip import search_clip_norm
from privgate.dp.recipe import DPRecipe
from privgate.dp.train import DPSettings, DPTraining, make_private_module, train_dp

__all__ = ["DPRecipe", "DPSettings", "DPTraining", "make_private_module", "search_clip_norm", "train_dp"]
