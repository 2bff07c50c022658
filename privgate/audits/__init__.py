"""Audits of privacy *claims* and of federations, beyond a single model.

* :mod:`privgate.audits.ldp` — ``privgate audit ldp``: a lower bound on a local randomiser's ε from the
  adversary instantiations of Matsumoto et al. 2022 (arXiv 2206.09122);
* :mod:`privgate.audits.dpsgd` — ``privgate audit dpsgd``: one run, m canaries (Steinke et al. 2023, 2305.08846);
* :mod:`privgate.audits.federated` — who in a federation can infer whose data.

A claim is ``fail`` only when a bound exceeds it, ``inconclusive`` when the audit could never have (the model
gate's semantics). Submodules are imported on use (torch loads with them).
"""
