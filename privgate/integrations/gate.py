"""The audit a training-loop callback runs: :func:`privgate.api.check` on the trained module, its report written,
the run failed (an exception whose message is the verdict line) or only logged, as the team chooses.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from torch import nn

from privgate.errors import PrivgateError
from privgate.settings import DataLike

log = logging.getLogger("privgate")

#: A report's format by its file's suffix (the formats ``privgate check`` writes).
REPORT_FORMATS = {".json": "json", ".md": "markdown", ".html": "html", ".xml": "junit", ".sarif": "sarif"}
ON_FAIL = ("raise", "log")


class PrivacyGateFailed(PrivgateError):
    """The trained model did not pass the policy (verdict ``fail`` or ``inconclusive``); the message is the verdict
    line ``privgate check`` prints, and :attr:`report` the full report."""

    def __init__(self, report: Any) -> None:
        super().__init__(report.summary)
        self.report = report


class Logits(nn.Module):
    """A trained module seen as privgate reads one: a batch of rows in, its logits out (a ``ModelOutput``'s or a
    mapping's ``logits``, a tuple's first item)."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, x: Any) -> Any:
        out = self.inner(x)
        if hasattr(out, "logits"):
            return out.logits
        if isinstance(out, Mapping):
            return out["logits"]
        return out[0] if isinstance(out, (tuple, list)) else out


class GateSpec:
    """What a callback audits and what it does with the verdict.

    Args:
        policy: a built-in policy name, a policy file or a :class:`~privgate.policy.Policy`.
        members: the rows the model was trained on, ``(x, y)`` arrays or a file (as ``privgate check --members``).
        nonmembers: rows of the same distribution it never saw.
        report: where the report is written; its format by suffix (:data:`REPORT_FORMATS`).
        on_fail: ``"raise"`` (the run fails with :class:`PrivacyGateFailed`) or ``"log"`` (a warning).
        check: further fields of :class:`~privgate.settings.CheckSettings` and
            :class:`~privgate.options.RunOptions` (``recipe=``, ``population=``, ``seed=`` …), as ``api.check``.
    """

    def __init__(
        self,
        policy: Any,
        members: DataLike,
        nonmembers: DataLike,
        report: str | Path = "privgate-report.json",
        on_fail: str = "raise",
        **check: Any,
    ) -> None:
        if on_fail not in ON_FAIL:
            raise PrivgateError(f"on_fail: {on_fail!r} is not one of {', '.join(ON_FAIL)}.")
        self.report_path = Path(report)
        self.format = REPORT_FORMATS.get(self.report_path.suffix.lower())
        if self.format is None:
            raise PrivgateError(
                f"{self.report_path}: the report's suffix names no format; use one of {', '.join(REPORT_FORMATS)}."
            )
        self.policy, self.members, self.nonmembers = policy, members, nonmembers
        self.on_fail, self.check = on_fail, check
        self.report: Any = None  # the last report

    def audit(self, model: nn.Module, pick: Callable[[nn.Module], nn.Module] | None = None) -> Any:
        """Audit ``model`` (or ``pick(model)``) as ``privgate check`` does, write the report, act on the verdict.

        The module's train/eval mode is restored afterwards. Returns the report; raises
        :class:`PrivacyGateFailed` when it does not pass and ``on_fail="raise"``.
        """
        from privgate import api
        from privgate.io.atomic import write_together
        from privgate.report import render

        module = pick(model) if pick is not None else model
        was = module.training
        try:
            report = api.check(Logits(module), self.policy, self.members, self.nonmembers, **self.check)
        finally:
            module.train(was)
        self.report = report
        write_together({self.report_path: render(report, self.format)})
        if report.exit_code == 0:
            log.info("privgate: %s (report: %s)", report.summary, self.report_path)
        elif self.on_fail == "raise":
            raise PrivacyGateFailed(report)
        else:
            log.warning("privgate: %s (report: %s)", report.summary, self.report_path)
        return report


__all__ = ["ON_FAIL", "REPORT_FORMATS", "GateSpec", "Logits", "PrivacyGateFailed"]
