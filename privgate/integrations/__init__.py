"""Gating where a model is trained: callbacks that run a policy's audit at the end of training.

:mod:`privgate.integrations.lightning` (a Lightning ``Callback``, the ``lightning`` extra) and
:mod:`privgate.integrations.hf_trainer` (a Hugging Face ``TrainerCallback``, the ``lm`` extra) each import their
library only when imported; both call :func:`privgate.api.check` through :mod:`privgate.integrations.gate`.
"""
