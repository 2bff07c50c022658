"""DP-SGD's primitives: training a model with Opacus (:mod:`.train`, :mod:`.opacus_runner`), its noise
(:mod:`.noise`) and its privacy accounting (:mod:`.accounting`); a run's settings and record (:mod:`.records`,
no torch).

Below both the claim audits (:mod:`privgate.audits`) and the ε search that hardens a model (:mod:`privgate.dp`).
Details: ``docs/remediation.md``.
"""
