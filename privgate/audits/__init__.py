"""Audits of privacy *claims*: does a mechanism or a training loop deliver the ε it states?

* :mod:`privgate.audits.ldp` — ``privgate audit ldp``: seed 001's adversary
  instantiations against a local randomiser (LDP-SGD or the user's), a lower
  bound on its ε from K trials per adversary × distinguisher cell.
* :mod:`privgate.audits.dpsgd` — ``privgate audit dpsgd``: one training run
  with m canaries and the lower bound of Steinke, Nasr & Jagielski 2023
  (arXiv 2305.08846), white-box on privgate's own DP-SGD or black-box on the
  user's trainer.

Every lower bound holds at the report's confidence; a claim is ``fail`` only
when a bound exceeds it, and ``inconclusive`` when the audit could never have.
Submodules are imported on use (torch loads with them).
"""

from __future__ import annotations
