"""A Lightning ``Callback`` that gates the model when ``fit`` ends (:class:`PrivacyGate`): ``privgate[lightning]``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch import nn

from privgate.integrations.gate import GateSpec, PrivacyGateFailed

try:
    from lightning.pytorch.callbacks import Callback
except ImportError as exc:  # pragma: no cover - the extra is not installed
    raise ImportError("privgate.integrations.lightning needs Lightning: pip install 'privgate[lightning]'") from exc


class PrivacyGate(Callback):
    """Run a policy's audit on the trained ``LightningModule`` when ``fit`` ends (on the global rank 0 only).

    Args are :class:`~privgate.integrations.gate.GateSpec`'s (policy, members, non-members, ``report=``,
    ``on_fail=``, and ``api.check``'s keywords), plus ``module``: which part of the ``LightningModule`` is the
    model (e.g. ``lambda m: m.net``; the module itself by default: its ``forward`` must return logits).
    :attr:`report` is the last report.
    """

    def __init__(self, *args: Any, module: Callable[[nn.Module], nn.Module] | None = None, **kw: Any) -> None:
        super().__init__()
        self.spec, self.module = GateSpec(*args, **kw), module

    @property
    def report(self) -> Any:
        """The last report (also on the :class:`PrivacyGateFailed` raised)."""
        return self.spec.report

    def on_fit_end(self, trainer: Any, pl_module: nn.Module) -> None:
        if trainer.is_global_zero:
            self.spec.audit(pl_module, self.module)


__all__ = ["PrivacyGate", "PrivacyGateFailed"]
