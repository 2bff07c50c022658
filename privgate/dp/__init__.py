"""Remediation with differential privacy: the ε search (:mod:`.remediate`) over DP-SGD (:mod:`privgate.dpsgd`).

A failing model is retrained with DP-SGD (Abadi et al. 2016, arXiv 1607.00133) through Opacus (Yousefpour et
al. 2021, arXiv 2109.12298) at decreasing ε, each candidate re-attacked, until the policy passes within its
utility floor; (ε, δ)-DP caps any membership attack's balanced accuracy at (e^ε + δ)/(1 + e^ε) (Kairouz, Oh &
Viswanath 2015, arXiv 1311.0776). Opacus and this package's names are imported lazily: ``privgate harden``
refused on its input, or naming its output (:mod:`.hardened`), never imports torch. Details:
``docs/remediation.md``, ``docs/internals-dp-audits.md``.
"""

from __future__ import annotations

from privgate.lazy import exports

_WHERE = {
    "search_clip_norm": "privgate.dp.clip",
    "DPRecipe": "privgate.dp.recipe",
    "DPSettings": "privgate.dpsgd.records",
    "DPTraining": "privgate.dpsgd.records",
    "make_private_module": "privgate.dpsgd.train",
    "train_dp": "privgate.dpsgd.train",
}


__getattr__, __dir__ = exports(__name__, _WHERE, globals())


__all__ = ["DPRecipe", "DPSettings", "DPTraining", "make_private_module", "search_clip_norm", "train_dp"]
