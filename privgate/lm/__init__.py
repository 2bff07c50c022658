"""Language models: only what is specific to them; the door, the gate, the ε search and the DP runner are shared.

:mod:`privgate.lm.scoring` scores every record token by token; the causal-LM kind (:mod:`privgate.lm.audit`) shares
those numbers with :mod:`privgate.lm.attacks` and runs the shift guard (:mod:`privgate.lm.shift`); a sequence
classifier goes through :mod:`privgate.lm.classifier`. Canary exposure (:mod:`privgate.lm.canary_exposure`) and
verbatim extraction (:mod:`privgate.lm.extraction`) are measurements run as attacks; hardening is DP fine-tuning
(:mod:`privgate.lm.finetune`, :mod:`privgate.lm.harden`). Importing this package imports neither torch nor
transformers. Map: ``docs/architecture.md``.
"""
