"""Where a run's tensors live: ``auto``, ``cpu`` or ``cuda``, resolved once at the door.

:func:`resolve_device` turns one of :data:`DEVICES` (``--device``, the config's ``device``,
:attr:`privgate.options.RunOptions.device`) into the run's device: ``cuda`` where torch sees no GPU is bad
input (:class:`DeviceError`, exit 2), never a silent CPU run; ``auto`` picks the device that finishes sooner
(:func:`choose_device`, from a :class:`Workload` estimated by :mod:`privgate.workload`). Random draws that
decide which model is trained come from seeded CPU generators, so devices differ by float rounding only.
A tensor meeting a model is made where the model is (:func:`device_of`); :func:`placed` hands a caller's
model back on the device it came from. Details: docs/compute.md and docs/internals-core.md.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple

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


# --------------------------------------------------------------------------- several GPUs: --devices

#: What ``--devices`` takes, for messages.
DEVICES_FORMS = "all, a count N (the first N GPUs) or GPU indices such as 0,2 or cuda:3"


def parse_devices(spec: str | int) -> str | int | tuple[int, ...]:
    """``--devices`` read: ``"all"``, a count (``"2"``: the first two GPUs) or indices (``"0,2"``, ``"cuda:3"``).

    Raises:
        ValueError: anything else, in one sentence naming the value.
    """
    text = str(spec).strip().lower()
    if text == "all":
        return "all"
    if text.isdigit() and not isinstance(spec, bool):
        if int(text) < 1:
            raise ValueError(f"--devices {spec!r} counts no GPU (GPU 0 alone is cuda:0); give {DEVICES_FORMS}.")
        return int(text)
    items = [i.strip().removeprefix("cuda:") for i in text.split(",") if i.strip()]
    if not items or not all(i.isdigit() for i in items) or isinstance(spec, bool):
        raise ValueError(f"--devices {str(spec)[:80]!r} is not {DEVICES_FORMS}.")
    indices = tuple(int(i) for i in items)
    if len(set(indices)) != len(indices):
        raise ValueError(f"--devices {str(spec)[:80]!r} names a GPU twice.")
    return indices


def device_count(kind: str) -> int:
    """How many devices of type ``kind`` torch sees: 1 for ``cpu``; ``torch.cuda.device_count()`` for ``cuda`` (the
    GPUs ``CUDA_VISIBLE_DEVICES`` leaves); a device type torch registers as a module of its own (a test's stand-in),
    that module's count."""
    if kind == "cpu":
        return 1
    import torch

    module = getattr(torch, kind, None)
    return int(module.device_count()) if module is not None and hasattr(module, "device_count") else 0


def spread_devices(device: str, spec: str | int | None) -> tuple[str, ...]:
    """The devices a run's reference-model groups spread over: ``("cuda:0", "cuda:1")``; ``(device,)`` for one.

    ``device`` is the run's, resolved (``cuda``; ``cpu`` and a spec is bad input: the caller says why the run is
    on the CPU); ``spec`` what ``--devices`` asked for (None: all the GPUs torch sees).

    Raises:
        DeviceError: the spec names more GPUs, or another GPU, than torch sees.
        ValueError: ``spec`` is malformed (:func:`parse_devices`).
    """
    if device.partition(":")[0] == "cpu":  # a CPU run asks torch nothing
        return (device,)
    import torch

    kind = torch.device(device).type
    count = device_count(kind)
    asked = "all" if spec is None else parse_devices(spec)
    seen = f"torch sees {count} ({', '.join(f'{kind}:{i}' for i in range(count)) or 'none'})"
    if asked == "all":
        indices: tuple[int, ...] = tuple(range(count))
    elif isinstance(asked, int):
        if asked > count:
            raise DeviceError(f"--devices {spec} asks for {asked} GPUs, but {seen}; give at most {count}.")
        indices = tuple(range(asked))
    else:
        wrong = [i for i in asked if i >= count]
        if wrong:
            raise DeviceError(f"--devices {spec} names GPU {wrong[0]}, but {seen}.")
        indices = asked
    if spec is None and len(indices) <= 1:
        return (device,)  # the one GPU, as before: bare 'cuda' is the thread's current device
    return tuple(f"{kind}:{i}" for i in indices)


@contextlib.contextmanager
def on_device(device: str) -> Iterator[None]:
    """The block with ``device`` current for this thread (``cuda:1``: ``torch.cuda.set_device(1)``, per thread, restored
    after), so a tensor made on bare ``cuda`` lands there too; nothing for the CPU or a device without an index."""
    if device.partition(":")[0] == "cpu":  # nothing to make current, and torch is not imported for it
        yield
        return
    import torch

    where = torch.device(device)
    module = getattr(torch, where.type, None) if where.type != "cpu" and where.index is not None else None
    if module is None or not hasattr(module, "set_device"):
        yield
        return
    before = module.current_device()
    module.set_device(where.index)
    try:
        yield
    finally:
        module.set_device(before)


# --------------------------------------------------------------------------- auto: the device that finishes sooner

# The constants were measured on the two machines privgate is developed on (2026-11-26): the 2-core
# development machine (Xeon, AVX-512, no GPU) and a lent machine with one NVIDIA H200 and 16 Xeon cores,
# there with plain torch 2.11 (privgate itself could not be run on it): ``benchmarks/compute/auto_device.py
# --calibrate`` measures them again on any machine, and runs the examples on both devices.

#: CPU training arithmetic, FLOP/s per thread. Stacks of 16 and 64 MLPs (64 → 256 → 256 → 10, batch 64,
#: tanh, Adam) trained through autograd ran at 40-52 GFLOP/s on one H200-machine thread and 26-32 GFLOP/s
#: per thread on 16 (a plain float32 matrix product: 157 and 78 GFLOP/s per thread); the engine's MLP
#: kernel reaches 70-90 GFLOP/s per thread on the development machine. Threads are counted as adding up.
CPU_FLOPS_PER_THREAD = 40e9
#: What one operation of a training step costs on the CPU besides its arithmetic: Python, autograd and the
#: dispatcher. One MLP's step (about 50 operations by :attr:`Workload.launches_per_step`) took 0.8-1.0 ms
#: of overhead on the H200 machine's CPU, with 1 thread as with 16.
CPU_OP_SECONDS = 16e-6
#: What one kernel of a training step costs on a GPU besides its arithmetic: the same host-side work plus
#: the launch (a chain of tiny dependent kernels: 8 µs each on the H200). The same MLP step took 1.1 ms on
#: the H200 whether it trained 1, 16 or 64 stacked models: a small model's step is host-bound on a GPU.
GPU_LAUNCH_SECONDS = 20e-6
#: A GPU's fixed cost for a run: the CUDA context, loading cuBLAS and each kernel's first use, the first
#: transfers. 5.2 s on the H200 machine, from a fresh process to the end of one Adam step.
GPU_START_SECONDS = 5.0
#: GPU arithmetic, FLOP/s, on the small, odd shapes of a classifier's training: float32 (TF32 off,
#: torch's default) reached 49 TFLOP/s on large stacked products on the H200, much less on small ones.
GPU_FLOPS = 25e12
#: Kernels a training step launches per layer that runs (forward 1, backward 2, the optimiser's update of
#: its weight and bias) and per step besides (the batch's rows, the loss, zeroing gradients).
LAUNCHES_PER_LAYER = 8
LAUNCHES_PER_STEP = 10
#: Rows per forward batch when models score rows (privgate.inputs.target.BATCH is of this order).
SCORING_BATCH = 4096


@dataclass(frozen=True)
class Costs:
    """What ``auto``'s estimate charges: this machine's measured rates (:mod:`privgate.calibration`), else the
    documented constants above.

    Attributes:
        cpu_flops_per_thread: CPU training arithmetic, FLOP/s per thread.
        cpu_op_seconds: a training step's overhead per launch (:attr:`Workload.launches_per_step`) on the CPU.
        gpu_start_seconds: the GPU's start-up (context, libraries, first kernels).
        gpu_flops: GPU training arithmetic, FLOP/s.
        gpu_launch_seconds: a training step's overhead per launch on the GPU.
        source: where the numbers come from (``"constants"``, ``"measured"``, ``"cache"``).
    """

    cpu_flops_per_thread: float = CPU_FLOPS_PER_THREAD
    cpu_op_seconds: float = CPU_OP_SECONDS
    gpu_start_seconds: float = GPU_START_SECONDS
    gpu_flops: float = GPU_FLOPS
    gpu_launch_seconds: float = GPU_LAUNCH_SECONDS
    source: str = "constants"


#: The documented constants, used where nothing was measured.
DOCUMENTED = Costs()


@dataclass(frozen=True)
class Workload:
    """What a run will compute on torch: facts of the inputs and the plan, gathered once they are loaded.

    Built by :func:`privgate.workload.workload_of`; :func:`choose_device` turns
    it into seconds on each device. A model here is the one the run trains and
    scores: the recipe's (the reference models'), else the target's.

    Attributes:
        parameters: the model's parameters.
        flops_per_row: FLOPs of one row's forward pass (its Linear and convolution layers, counted on a probe row).
        layers: the modules a forward pass runs (each launches about one kernel).
        rows: audit rows (members and non-members); each reference model trains on half of them.
        population: population rows, scored by every model.
        models: reference models the plan trains (0: none).
        stacked: whether the engine trains them together, ``group`` at a time, one step for all.
        group: models per stack (:attr:`privgate.options.RunOptions.models_per_task`).
        epochs, batch_size: the recipe's.
        other_trainings: models trained one at a time besides (the gradient attack's reference models).
        other_rows: rows each of those trains on.
        optimisation_steps: steps of attacks that optimise the target's inputs (model inversion).
        repeats: how many times the whole of it runs (a hardening re-audits every candidate ε).
        what: what the run is, in a few words, for the reason (``"this check"``).
    """

    parameters: int
    flops_per_row: float
    layers: int
    rows: int
    population: int = 0
    models: int = 0
    stacked: bool = True
    group: int = 16
    epochs: int = 1
    batch_size: int = 64
    other_trainings: int = 0
    other_rows: int = 0
    optimisation_steps: int = 0
    repeats: int = 1
    what: str = "this check"

    @property
    def launches_per_step(self) -> int:
        return LAUNCHES_PER_LAYER * self.layers + LAUNCHES_PER_STEP

    @property
    def steps(self) -> int:
        """Training steps in a row: stacks of reference models, then the models trained one at a time."""
        per_model = self.epochs * math.ceil(self.rows / 2 / max(self.batch_size, 1)) if self.models else 0
        stacks = math.ceil(self.models / max(self.group, 1)) if self.stacked else self.models
        others = self.other_trainings * self.epochs * math.ceil(self.other_rows / max(self.batch_size, 1))
        return (stacks * per_model + others) * self.repeats

    @property
    def flops(self) -> float:
        """FLOPs of the training (a step's forward and backward passes: three forward passes) and the scoring."""
        trained = self.models * self.epochs * self.rows / 2 + self.other_trainings * self.epochs * self.other_rows
        scored = (self.models + self.other_trainings + 1) * (self.rows + self.population)
        return (3 * trained + scored) * self.flops_per_row * self.repeats

    @property
    def launches(self) -> int:
        """Kernel launches: every training and optimisation step, and the scoring's forward batches."""
        batches = (self.models + self.other_trainings + 1) * math.ceil((self.rows + self.population) / SCORING_BATCH)
        scoring = batches * (self.layers + 2) * self.repeats
        return (self.steps + self.optimisation_steps * self.repeats) * self.launches_per_step + scoring

    def cpu_seconds(self, threads: int, costs: Costs = DOCUMENTED) -> float:
        """Estimated seconds on ``threads`` CPU threads."""
        return self.flops / (max(threads, 1) * costs.cpu_flops_per_thread) + self.launches * costs.cpu_op_seconds

    def gpu_seconds(self, costs: Costs = DOCUMENTED) -> float:
        """Estimated seconds on a GPU, its start-up included."""
        return costs.gpu_start_seconds + self.flops / costs.gpu_flops + self.launches * costs.gpu_launch_seconds

    def describe(self) -> str:
        """The work in a few words: ``16 reference models × 1,800 steps (stacked), 940 GFLOP, 97,000 launches``."""
        parts = []
        if self.models:
            per = self.epochs * math.ceil(self.rows / 2 / max(self.batch_size, 1))
            how = "stacked" if self.stacked else "one at a time"
            parts.append(f"{self.models} reference model{'s' if self.models != 1 else ''} × {per:,} steps ({how})")
        if self.other_trainings:
            parts.append(f"{self.other_trainings} more trained one at a time")
        if self.repeats > 1:
            parts.append(f"{self.repeats} audits")
        parts += [_flops(self.flops), f"{_round(self.launches):,} launches"]
        return ", ".join(parts)


class DeviceChoice(NamedTuple):
    """The device a run uses and why, in one sentence (the report's ``environment.device_reason``)."""

    device: str
    reason: str


def _flops(f: float) -> str:
    for unit, scale in (("PFLOP", 1e15), ("TFLOP", 1e12), ("GFLOP", 1e9), ("MFLOP", 1e6)):
        if f >= scale:
            v = f / scale
            return f"{v:.0f} {unit}" if v >= 10 else f"{v:.1f} {unit}"
    return f"{f:.0f} FLOP"


def _round(n: float) -> int:
    """``n`` to two significant digits (an estimate shown as one)."""
    if n < 100:
        return int(round(n))
    digits = int(math.floor(math.log10(n))) - 1
    return int(round(n, -digits))


def _seconds(s: float) -> str:
    return f"{s:.2g} s" if s < 10 else f"{s:,.0f} s"


def choose_device(work: Workload | None, cuda: bool, threads: int, costs: Costs = DOCUMENTED) -> DeviceChoice:
    """What ``auto`` runs on: a pure function of the run's work, whether torch sees a CUDA GPU, the CPU threads and
    the machine's costs (measured by :mod:`privgate.calibration`, else the documented constants).

    * nothing on torch (``work.flops_per_row`` 0: a scikit-learn, ONNX or
      boosted target without a torch recipe): the CPU, whatever ``cuda`` says
      (:meth:`~privgate.options.RunOptions.resolved` then never asks torch);
    * no CUDA GPU: the CPU;
    * ``work`` None (a job whose work is not estimated: a language model, a
      claim audit, a federation): the GPU;
    * else the device with the smaller estimate: on the CPU, the FLOPs at
      ``costs.cpu_flops_per_thread`` per thread plus ``costs.cpu_op_seconds`` per
      launch; on the GPU, ``costs.gpu_start_seconds`` plus the FLOPs at
      ``costs.gpu_flops`` plus ``costs.gpu_launch_seconds`` per launch. A small
      model's training is a chain of tiny kernels (the digits MLP: 0.9 TFLOP in
      about 150k launches), which a GPU does not speed up; a large one's is
      arithmetic (the CIFAR-shaped check of ``benchmarks/engine/cifar_engine.py``: 4
      PFLOP), which it does. With 16 CPU threads the GPU's start-up pays for
      itself from about 3 TFLOP of work, with 2 threads from about 0.4 TFLOP.
    """
    if work is not None and work.flops_per_row <= 0:
        return DeviceChoice("cpu", f"auto chose the CPU: nothing in {work.what} runs on torch")
    if not cuda:
        return DeviceChoice("cpu", "torch sees no CUDA GPU on this machine, so auto runs on the CPU")
    if work is None:
        return DeviceChoice(
            "cuda", "auto takes the CUDA GPU torch sees: this job's work is not estimated (language models, "
            "claim audits and federations run on the GPU when there is one)"
        )  # fmt: skip
    cpu, gpu = work.cpu_seconds(threads, costs), work.gpu_seconds(costs)
    device = "cuda" if gpu < cpu else "cpu"
    on = f"{threads} CPU thread{'s' if threads != 1 else ''}"
    source = {"measured": ", measured on this machine", "cache": ", measured on this machine earlier (cached)"}
    estimate = (
        f"{work.what}'s estimated work ({work.describe()}) takes about {_seconds(cpu)} on {on} "
        f"and about {_seconds(gpu)} on the GPU, its {costs.gpu_start_seconds:.2g} s start-up and "
        f"{costs.gpu_launch_seconds * 1e6:.2g} µs per kernel launch included"
        f"{source.get(costs.source, ' (documented constants, not measured here)')}"
    )
    return DeviceChoice(device, f"auto chose the {'GPU' if device == 'cuda' else 'CPU'}: {estimate}")


def asked_for(device: str) -> str:
    """The reason recorded for a device that was asked for (``--device cpu``, ``device="cuda"``)."""
    return f"device '{device}' was asked for"


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
    "CPU_FLOPS_PER_THREAD",
    "CPU_OP_SECONDS",
    "DEVICES",
    "DEVICES_FORMS",
    "DOCUMENTED",
    "Costs",
    "DeviceChoice",
    "DeviceError",
    "GPU_FLOPS",
    "GPU_LAUNCH_SECONDS",
    "GPU_START_SECONDS",
    "Workload",
    "asked_for",
    "choose_device",
    "cuda_available",
    "describe_device",
    "device_count",
    "device_of",
    "module_device",
    "on_device",
    "parse_devices",
    "placed",
    "resolve_device",
    "spread_devices",
]
