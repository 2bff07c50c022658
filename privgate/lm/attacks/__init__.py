"""Membership attacks on causal language models, one family per module, registered in :mod:`privgate.attacks`.

``lm_loss`` (:mod:`~privgate.lm.attacks.loss`, Yeom et al. 2018); ``zlib`` and ``reference_ratio``
(:mod:`~privgate.lm.attacks.zlib`, :mod:`~privgate.lm.attacks.reference`, Carlini et al. 2021); ``min_k`` and
``min_k_pp`` (:mod:`~privgate.lm.attacks.mink`, Shi et al. 2023; Zhang et al. 2024); ``lm_lira`` and ``lm_rmia``
(:mod:`~privgate.lm.attacks.lira`, Carlini et al. 2022; Zarifzadeh et al. 2024), with references privgate fine-tunes
from a recipe; ``lm_learned`` (:mod:`~privgate.lm.attacks.learned`), a cross-fitted combination of them all; and the
measurements ``canary_exposure`` and ``extraction`` (:mod:`~privgate.lm.attacks.measures`).
"""
