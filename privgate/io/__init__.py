"""Writing files safely: atomic and all-or-nothing writes, output-path guards, staged artefacts, interrupts.

Nothing a user owns is overwritten or left half-written (:mod:`privgate.io.atomic`,
:mod:`privgate.io.guards`); a run's outputs appear together at its end
(:mod:`privgate.io.staging`).
"""
