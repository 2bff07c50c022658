"""A second torch device for machines without a GPU: ``standin``, which computes on the CPU and behaves like CUDA.

CI has no GPU, so the CUDA path's device mix-ups must fail a CPU test first. ``meta`` tensors catch a CPU
tensor meeting a model but hold no data, so a path that reads a number back cannot run on them. This device
runs privgate's real code paths end to end, with real numbers, and refuses what CUDA refuses:

* a tensor on ``standin`` is a wrapper (``torch.Tensor._make_wrapper_subclass``) around a CPU tensor that
  holds its data; every operation runs on the CPU data and wraps the result back (``__torch_dispatch__``);
  factories asked for ``device="standin"`` reach the same code through torch's ``PrivateUse1`` backend
  (renamed ``standin``, :func:`torch.utils.backend_registration._setup_privateuseone_for_python_backend`);
* an operation that meets a ``standin`` tensor and a CPU tensor of one or more dimensions raises CUDA's
  ``Expected all tensors to be on the same device, …`` (0-d CPU tensors pass, as scalars do on CUDA;
  copies, ``.to()`` and CPU index tensors pass, as on CUDA); so does a CPU ``torch.Generator`` asked to
  draw on ``standin``, and ``.numpy()`` of a ``standin`` tensor (``.cpu()`` first, as on CUDA);
* the device has its own random stream, seeded by ``torch.manual_seed`` like CUDA's but different from the
  CPU's (CUDA's Philox is not the CPU's Mersenne Twister): a draw made on the device (a dropout mask, noise)
  gives another model than the same seed on the CPU. It has no ``torch.Generator`` of its own: code that
  creates one on the device fails here (on CUDA it silently draws another stream).

:class:`StandInMode` (a ``TorchFunctionMode``) routes ``torch.tensor``/``torch.as_tensor(…, device="standin")``
through the CPU (torch's own conversion from Python data cannot reach a Python backend); tests run inside it.
Autograd runs a device's backward in a thread of its own, sized when the process's first backward starts
(before this device exists): tests run backward passes in the calling thread instead
(``torch.autograd.set_multithreading_enabled(False)``, the same arithmetic). TorchScript modules cannot run on
this device (the TorchScript interpreter does not call Python kernels): their tests use ``meta``.

Several GPUs: set :data:`COUNT` (``standin:0``, ``standin:1``, …). Tensors on two of them meet only in a copy, as
on CUDA; each has its own random stream, and a current device per thread (``set_device``) that bare
``standin`` means.
"""

from __future__ import annotations

import threading
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten, tree_map

NAME = "standin"
#: How many stand-in devices torch sees (``torch.standin.device_count()``); tests of several GPUs raise it.
COUNT = 1

#: Operations CUDA allows between a device tensor and CPU tensors: copies, and CPU indices into a device tensor.
_CROSSING = {
    torch.ops.aten._to_copy.default,
    torch.ops.aten.copy_.default,
    torch.ops.aten.index.Tensor,
    torch.ops.aten.index_put_.default,
    torch.ops.aten.index_put.default,
    torch.ops.aten._index_put_impl_.default,
}
_SCALAR = torch.ops.aten._local_scalar_dense.default


_CURRENT = threading.local()


class _Backend:
    """What torch asks of a device module: availability, the devices and the current one (per thread), and the
    seeding of each device's own random stream."""

    generators: dict[int, torch.Generator] = {}

    @staticmethod
    def generator(index: int) -> torch.Generator:
        if index not in _Backend.generators:
            _Backend.generators[index] = torch.Generator().manual_seed(0x5EED + index)
        return _Backend.generators[index]

    @staticmethod
    def is_available() -> bool:
        return True

    @staticmethod
    def device_count() -> int:
        return COUNT

    @staticmethod
    def current_device() -> int:
        return getattr(_CURRENT, "index", 0)

    @staticmethod
    def set_device(index: int) -> None:
        if not 0 <= int(index) < COUNT:
            raise RuntimeError(f"invalid device ordinal {index} ({COUNT} {NAME} device(s))")
        _CURRENT.index = int(index)

    @staticmethod
    def is_initialized() -> bool:
        return True

    @staticmethod
    def _is_in_bad_fork() -> bool:
        return False

    @staticmethod
    def manual_seed_all(seed: int) -> None:
        """``torch.manual_seed(s)`` seeds the devices too, each into another stream than the CPU's seed s."""
        for index in range(max(COUNT, 1)):
            _Backend.generator(index).manual_seed((int(seed) * 0x9E3779B1 + 0x5EED + index) % (1 << 63))

    manual_seed = manual_seed_all


class StandIn(torch.Tensor):
    """A tensor on ``standin``: its data is the CPU tensor ``data_on_cpu``."""

    data_on_cpu: torch.Tensor

    @staticmethod
    def __new__(cls, data: torch.Tensor, index: int = 0) -> StandIn:
        if isinstance(data, StandIn) or data.device.type != "cpu":
            raise AssertionError(f"a stand-in tensor wraps a CPU tensor, got one on {data.device}")
        t = torch.Tensor._make_wrapper_subclass(
            cls, data.size(), strides=data.stride(), storage_offset=data.storage_offset(), dtype=data.dtype,
            layout=data.layout, device=torch.device(NAME, index), requires_grad=False,
        )  # fmt: skip
        t.data_on_cpu = data
        return t

    def __repr__(self, **kwargs: Any) -> str:  # noqa: ARG002
        return f"{self.data_on_cpu!r} on {self.device}"

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN206
        if func is torch.Tensor.tolist:  # works on CUDA: a copy to the host
            return args[0].data_on_cpu.tolist()
        if func in (torch.Tensor.numpy, torch.Tensor.__array__):
            raise TypeError(
                f"can't convert {args[0].device} device type tensor to numpy. Use Tensor.cpu() to copy the tensor to "
                "host memory first."
            )
        with torch._C.DisableTorchFunctionSubclass():
            return func(*args, **(kwargs or {}))

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN206
        return _run(func, args, kwargs or {})


def _on_device(device: Any) -> bool:
    return device is not None and torch.device(device).type == NAME


def _index(device: Any) -> int:
    """The stand-in device ``device`` names (bare ``standin``: this thread's current one)."""
    index = torch.device(device).index
    return _Backend.current_device() if index is None else int(index)


def _run(func: Any, args: tuple, kwargs: dict) -> Any:
    """``func`` on the CPU data, the result on ``standin`` when it belongs there (module docstring)."""
    flat, _ = tree_flatten((args, kwargs))
    ours = [a for a in flat if isinstance(a, StandIn)]
    plain = [a for a in flat if isinstance(a, torch.Tensor) and not isinstance(a, StandIn)]
    indices = sorted({a.device.index for a in ours})
    if ours and func not in _CROSSING and any(a.dim() > 0 for a in plain):
        raise RuntimeError(
            f"Expected all tensors to be on the same device, but found at least two devices, {NAME}:{indices[0]} and "
            f"cpu! (when checking arguments for {func})"
        )
    if len(indices) > 1 and func not in _CROSSING:
        raise RuntimeError(
            f"Expected all tensors to be on the same device, but found at least two devices, {NAME}:{indices[0]} and "
            f"{NAME}:{indices[1]}! (when checking arguments for {func})"
        )
    lands_here, index = bool(ours), (indices[0] if indices else 0)
    if kwargs.get("device") is not None:
        lands_here = _on_device(kwargs["device"])
        index = _index(kwargs["device"]) if lands_here else index
        kwargs = {**kwargs, "device": torch.device("cpu")}
    generator = kwargs.get("generator")
    if generator is not None and generator.device.type == "cpu" and lands_here:
        raise RuntimeError(f"Expected a '{NAME}' device type for generator but found 'cpu'")
    wrapper_of = {id(a.data_on_cpu): a for a in ours}
    unchanged = {id(a) for a in plain}
    args, kwargs = tree_map(lambda a: a.data_on_cpu if isinstance(a, StandIn) else a, (args, kwargs))
    if lands_here and generator is None and torch.Tag.nondeterministic_seeded in func.tags:
        out = _with_device_stream(func, args, kwargs, index)
    else:
        out = func(*args, **kwargs)
    if func is _SCALAR or not lands_here:
        return out

    def wrap(t: Any) -> Any:
        if not isinstance(t, torch.Tensor) or isinstance(t, StandIn) or id(t) in unchanged:
            return t
        mine = wrapper_of.get(id(t))
        if mine is None:
            return StandIn(t, index)
        if mine.shape != t.shape:
            raise RuntimeError(f"the {NAME} device cannot resize a tensor in place ({func})")
        return mine  # an in-place operation hands back its own argument

    return tree_map(wrap, out)


def _with_device_stream(func: Any, args: tuple, kwargs: dict, index: int) -> Any:
    """A random operation on device ``index``, drawn from that device's stream (not the CPU's global one)."""
    from privgate.recipe.rng import LOCK  # the CPU's generator is swapped: no other thread may seed it meanwhile

    with LOCK:
        cpu_state = torch.get_rng_state()
        torch.set_rng_state(_Backend.generator(index).get_state())
        try:
            return func(*args, **kwargs)
        finally:
            _Backend.generator(index).set_state(torch.get_rng_state())
            torch.set_rng_state(cpu_state)


class StandInMode(TorchFunctionMode):
    """Routes ``torch.tensor`` / ``torch.as_tensor`` asked for ``standin`` through the CPU (module docstring)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN206
        kwargs = kwargs or {}
        if func in (torch.tensor, torch.as_tensor) and _on_device(kwargs.get("device")):
            return func(*args, **{**kwargs, "device": "cpu"}).to(torch.device(NAME, _index(kwargs["device"])))
        return func(*args, **kwargs)


def _kernel(op: Any) -> Any:
    """A kernel of the device for ``op``."""
    return lambda *args, **kwargs: _run(op, args, kwargs)


_LIBRARIES: list[torch.library.Library] = []


def install() -> str:
    """Register the device once per process (importing this module registers nothing); returns its name."""
    if _LIBRARIES:
        return NAME
    from torch.utils.backend_registration import _setup_privateuseone_for_python_backend

    if torch._C._get_privateuse1_backend_name() not in ("privateuseone", NAME):
        raise RuntimeError(f"torch's PrivateUse1 backend is already {torch._C._get_privateuse1_backend_name()!r}")
    if torch._C._get_privateuse1_backend_name() == "privateuseone":
        _setup_privateuseone_for_python_backend(NAME, backend_module=_Backend())
    fallback = torch.library.Library("_", "IMPL")
    fallback.fallback(lambda op, *args, **kwargs: _run(op, args, kwargs), "PrivateUse1")
    # factories that torch decomposes into an `out=` variant (which resizes its output) get a kernel of their own
    direct = torch.library.Library("aten", "IMPL")
    for overload in ("default", "start", "start_step"):
        name = "arange" if overload == "default" else f"arange.{overload}"
        direct.impl(name, _kernel(getattr(torch.ops.aten.arange, overload)), "PrivateUse1")
    _LIBRARIES.extend([fallback, direct])
    return NAME


__all__ = ["NAME", "StandIn", "StandInMode", "install"]
