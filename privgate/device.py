"""Where a run's tensors live: ``auto``, ``cpu`` or ``cuda``, resolved once at the door.

``--device`` (the CLI), ``device`` in ``privgate.toml`` / ``[tool.privgate]`` and
:attr:`privgate.options.RunOptions.device` take one of :data:`DEVICES`;
:func:`resolve_device` turns it into the device the run uses:

* ``cpu`` — always available;
* ``cuda`` — the current CUDA GPU; asking for it on a machine where torch sees
  none is bad input (:class:`DeviceError`, exit 2), never a silent CPU run;
* ``auto`` — ``cuda`` when ``torch.cuda.is_available()``, else ``cpu``.

What runs there: target scoring (:class:`privgate.inputs.target.Target`),
reference models (:mod:`privgate.training.engine`), DP-SGD
(:mod:`privgate.dp.train`) and the white-box attacks. Random draws that decide
*which* model is trained — batch order, dropout masks, Poisson batches and the
engine's DP noise — come from CPU generators seeded per model, so a model's
draws do not depend on the device; the arithmetic differs between devices by
float rounding only. (Opacus' own noise, in DP-SGD retraining, is drawn on the
training device: see :mod:`privgate.dp.train`.)
"""

from __future__ import annotations

from typing import Any

from privgate.errors import PrivgateError

#: The values a user may give.
DEVICES: tuple[str, ...] = ("auto", "cpu", "cuda")


class DeviceError(PrivgateError):
    """A device that does not exist on this machine (``cuda`` without a CUDA GPU)."""


def cuda_available() -> bool:
    """Whether torch sees a CUDA GPU (imports torch)."""
    import torch

    return bool(torch.cuda.is_available())


def resolve_device(requested: str) -> str:
    """``"cpu"`` or ``"cuda"``: the device a run that asked for ``requested`` uses.

    Raises:
        DeviceError: ``cuda`` was asked for and torch sees no CUDA GPU.
        ValueError: ``requested`` is not one of :data:`DEVICES` (a programming error:
            the CLI, the config and :class:`~privgate.options.RunOptions` validate it first).
    """
    if requested not in DEVICES:
        raise ValueError(f"device must be one of {', '.join(DEVICES)}, got {requested!r}")
    if requested == "cpu":
        return "cpu"
    available = cuda_available()
    if requested == "cuda" and not available:
        raise DeviceError(
            "device 'cuda' was asked for, but torch sees no CUDA GPU on this machine "
            "(torch.cuda.is_available() is False); use --device auto or --device cpu."
        )
    return "cuda" if available else "cpu"


def describe_device(device: str) -> dict[str, Any]:
    """What the report records about ``device``: its name, and the GPU's model for ``cuda``."""
    out: dict[str, Any] = {"device": device}
    if device == "cuda":
        import torch

        out["gpu"] = torch.cuda.get_device_name(torch.cuda.current_device())
    return out


def module_device(module: Any) -> str:
    """The device type of ``module``'s first parameter or buffer (``"cpu"`` for one with neither)."""
    for tensors in (module.parameters(), module.buffers()):
        for t in tensors:
            return t.device.type
    return "cpu"


__all__ = ["DEVICES", "DeviceError", "cuda_available", "describe_device", "module_device", "resolve_device"]
