"""Audits of privacy *claims* and of federations, beyond a single model.

The mechanism audits ask whether an LDP randomiser or a DP-SGD trainer that
claims ε delivers it; the federated-learning audits ask who in a federation can
infer whose data. They report through the same semantics as the model gate:
bounds valid at a stated confidence, pass / fail / inconclusive, exit codes.

* :mod:`privgate.audits.ldp` — ``privgate audit ldp``: Matsumoto et al.'s (2022) adversary
  instantiations against a local randomiser (LDP-SGD or the user's), a lower
  bound on its ε from K trials per adversary × distinguisher cell.
* :mod:`privgate.audits.dpsgd` — ``privgate audit dpsgd``: one training run
  with m canaries and the lower bound of Steinke, Nasr & Jagielski 2023
  (arXiv 2305.08846), white-box on privgate's own DP-SGD or black-box on the
  user's trainer.

A claim is ``fail`` only when a bound exceeds it, and ``inconclusive`` when the
audit could never have. Submodules are imported on use (torch loads with them).
"""
