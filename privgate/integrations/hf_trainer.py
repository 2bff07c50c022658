"""A Hugging Face ``TrainerCallback`` that gates the model when ``Trainer.train`` ends (:class:`PrivacyGateCallback`).

The model's ``forward`` is called with a batch of rows as its one argument and its ``logits`` read; the ``lm``
extra brings transformers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch import nn

from privgate.integrations.gate import GateSpec, PrivacyGateFailed

try:
    from transformers import TrainerCallback
except ImportError as exc:  # pragma: no cover - the extra is not installed
    raise ImportError("privgate.integrations.hf_trainer needs transformers: pip install 'privgate[lm]'") from exc


class PrivacyGateCallback(TrainerCallback):
    """Run a policy's audit on the trained model at ``on_train_end`` (on the main process only).

    Args are :class:`~privgate.integrations.gate.GateSpec`'s (policy, members, non-members, ``report=``,
    ``on_fail=``, and ``api.check``'s keywords), plus ``module``: which part of the model to audit. :attr:`report`
    is the last report.
    """

    def __init__(self, *args: Any, module: Callable[[nn.Module], nn.Module] | None = None, **kw: Any) -> None:
        self.spec, self.module = GateSpec(*args, **kw), module

    @property
    def report(self) -> Any:
        """The last report (also on the :class:`PrivacyGateFailed` raised)."""
        return self.spec.report

    def on_train_end(self, args: Any, state: Any, control: Any, model: nn.Module | None = None, **kw: Any) -> None:
        if model is not None and state.is_world_process_zero:
            self.spec.audit(model, self.module)


__all__ = ["PrivacyGateCallback", "PrivacyGateFailed"]
