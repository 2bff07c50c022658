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
(:mod:`privgate.dp.train`), language-model scoring and fine-tuning
(:mod:`privgate.lm`) and the white-box attacks. Random draws that decide
*which* model is trained — batch order, dropout masks, Poisson batches and the
DP-SGD noise (the engine's and Opacus', :mod:`privgate.dp.noise`) — come from
CPU generators seeded per model and are then moved to the device, so a model's
draws do not depend on the device; the arithmetic differs between devices by
float rounding only. (A draw inside a model's own forward pass that is not an
``nn.Dropout`` layer — e.g. attention dropout inside a fused kernel — uses the
device's generator: see :mod:`privgate.training.dropout`.)

Every tensor a step makes to meet a model is made where the model is
(:func:`device_of`), never where a separate argument says it should be; a
function that runs a caller's model on the run's device puts it back after
(:func:`placed`), so a model handed back is on the device it came from.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
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


def device_of(module: Any) -> str:
    """Where ``module`` runs: its first parameter's or buffer's device with its index (``"cuda:0"``), else ``"cpu"``.

    The tensors a step makes to meet the module go here (token ids, masks,
    inputs, indices), whatever device a caller was asked for.
    """
    for tensors in (module.parameters(), module.buffers()):
        for t in tensors:
            return str(t.device)
    return "cpu"


@contextlib.contextmanager
def placed(module: Any, device: str) -> Iterator[Any]:
    """``module`` on ``device`` for the block, and back on the device it came from afterwards.

    For a function that runs a caller's model where the run says (an audit of
    a fine-tuned candidate): the caller gets the model back where it was.
    """
    before = device_of(module)
    module.to(device)
    try:
        yield module
    finally:
        module.to(before)


__all__ = [
    "DEVICES",
    "DeviceError",
    "cuda_available",
    "describe_device",
    "device_of",
    "module_device",
    "placed",
    "resolve_device",
]
