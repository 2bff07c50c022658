"""Remediation with differential privacy: DP-SGD retraining (:mod:`.train`) and the ε search (:mod:`.remediate`).

DP-SGD (Abadi et al. 2016, arXiv 1607.00133) bounds how much any one training
example can change the trained model, so it bounds every membership-inference
attack at once: an (ε, δ)-DP training run caps any attack's balanced accuracy at
(e^ε + δ)/(1 + e^ε) (Kairouz, Oh & Viswanath 2015, arXiv 1311.0776). privgate
retrains a failing model with DP-SGD through Opacus (Yousefpour et al. 2021,
arXiv 2109.12298) at decreasing ε and re-attacks each candidate until the policy
passes within its utility floor.

Opacus is imported lazily (inside the functions that train), and so are this
package's names (torch comes with them): ``privgate harden`` refused on its
input, or naming its output (:mod:`.hardened`), never imports torch.
"""

from __future__ import annotations

import importlib
from typing import Any

_WHERE = {
    "search_clip_norm": "privgate.dp.clip",
    "DPRecipe": "privgate.dp.recipe",
    "DPSettings": "privgate.dp.train",
    "DPTraining": "privgate.dp.train",
    "make_private_module": "privgate.dp.train",
    "train_dp": "privgate.dp.train",
}


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'privgate.dp' has no attribute {name!r}")
    return getattr(importlib.import_module(_WHERE[name]), name)


__all__ = ["DPRecipe", "DPSettings", "DPTraining", "make_private_module", "search_clip_norm", "train_dp"]
