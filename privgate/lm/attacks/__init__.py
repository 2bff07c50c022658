"""Membership attacks on causal language models, one family per module, registered in :mod:`privgate.attacks`.

* :mod:`~privgate.lm.attacks.loss` — ``lm_loss`` (Yeom et al. 2018);
* :mod:`~privgate.lm.attacks.zlib` — ``zlib`` (Carlini et al. 2021);
* :mod:`~privgate.lm.attacks.reference` — ``reference_ratio`` (Carlini et al. 2021);
* :mod:`~privgate.lm.attacks.mink` — ``min_k`` (Shi et al. 2023), ``min_k_pp`` (Zhang et al. 2024);
* :mod:`~privgate.lm.attacks.lira` — ``lm_lira`` (Carlini et al. 2022), ``lm_rmia`` (Zarifzadeh et al. 2024),
  with references privgate fine-tunes from a recipe on population text;
* :mod:`~privgate.lm.attacks.learned` — ``lm_learned``, a cross-fitted combination of them all;
* :mod:`~privgate.lm.attacks.measures` — ``canary_exposure`` and ``extraction``, which measure a metric
  (exposure in bits, extraction rate) instead of scoring membership.
"""
