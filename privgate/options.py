"""How a run is carried out, as one object passed down: seed, threads, cache, engine, device, executor, progress.

The CLI (from flags, config and environment: nothing below it reads an environment variable), the pytest
plugin and library callers build a :class:`RunOptions` for :mod:`privgate.api`; the gate, the attacks
(:class:`~privgate.attacks.base.AttackContext`), the training engine and DP remediation read it. None of
these settings changes what is measured: the same inputs and seed give the same numbers whatever the
threads, cache or engine (up to float rounding in the engine's kernels).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from privgate.device import Costs, Workload

#: The fewest bytes a secret cache key may have (128 bits).
MIN_CACHE_KEY_BYTES = 16
#: Values of ``cache_dir`` that turn the cache off.
CACHE_OFF = ("off", "none", "0", "false", "")

Engine = Literal["auto", "vectorised", "sequential"]
ENGINES: tuple[str, ...] = ("auto", "vectorised", "sequential")
DEVICES: tuple[str, ...] = ("auto", "cpu", "cuda")  # privgate.device.DEVICES, without importing it
EXECUTORS: tuple[str, ...] = ("local", "ray")  # privgate.executors.EXECUTORS, without importing it
#: Reference models trained per task (one vectorised group) when none is asked for.
DEFAULT_MODELS_PER_TASK = 16

Progress = Callable[[str], None]


@dataclass(frozen=True)
class RunOptions:
    """Settings of one run.

    Attributes:
        seed: drives every random choice (splits, reference models, DP-SGD);
            same inputs and seed give the same numbers.
        threads: the most threads the run may use at once (torch, BLAS,
            OpenMP); ``None``: torch's thread setting in this process, capped by
            the cores it may use (:func:`privgate.threads.library_threads`: the BLAS/OpenMP pools' without torch;
            the CLI's default is the usable cores or ``$OMP_NUM_THREADS``), and one
            per task with the Ray executor.
        threads_reason: why ``threads`` is what it is, for the report (the CLI
            says which flag, variable or default gave it); filled by :meth:`resolved`.
        cache_dir: folder of the reference-model cache (:mod:`privgate.training.cache`);
            ``None`` or ``"off"``: no cache. (The CLI's default, the user's cache
            folder, is resolved by the CLI: :mod:`privgate.cli.cache_settings`.)
        cache_key: the secret key (at least :data:`MIN_CACHE_KEY_BYTES` bytes) that tags the cache's entries, so
            that an entry someone else wrote (a pull request committing a cache
            folder, a restored CI cache) is refused unless they had the key; ``None``:
            a random key of this process, whose entries serve this process only.
            Never shown (``repr``) nor recorded in a report.
        engine: how reference models are trained: ``auto`` (vectorised when
            the engine can stack the model, else one after another),
            ``vectorised`` (fail when it cannot) or ``sequential``
            (``train_model`` per model, the reference the engine is tested against).
        device: where tensors live: ``auto`` (the device that will finish the
            run sooner, :func:`privgate.device.choose_device`), ``cpu`` or
            ``cuda`` (bad input on a machine without one); :meth:`resolved`
            turns ``auto`` into the device used (:mod:`privgate.device`).
        device_requested: what was asked for (``auto``, ``cpu``, ``cuda``) once
            :meth:`resolved` has replaced ``device``; ``None`` before.
        device_reason: why the run uses its device, one sentence (``auto``'s
            estimate, or that it was asked for); filled by :meth:`resolved`.
        device_estimate: ``auto``'s estimate where it made one: seconds on
            each device, the threads, and the costs it charged with their
            source (:mod:`privgate.calibration`); ``None`` otherwise.
        devices: the GPUs reference-model groups spread over on a ``cuda`` run (``--devices``): ``"all"``, a count
            (the first N) or indices (``"0,2"``, ``"cuda:3"``); ``None``: every GPU torch sees. Given with
            ``device="auto"`` it means the GPU; with ``cpu`` or the Ray executor it is bad input.
        device_list: the devices the groups spread over, one worker thread each (``("cuda:0", "cuda:1")``;
            ``("cpu",)``, ``("cuda",)`` for one), filled by :meth:`resolved`; ``None`` before.
        executor: where independent tasks run (:mod:`privgate.executors`):
            ``local`` (this process, one after another) or ``ray`` (Ray tasks on
            a cluster); the same tasks and seeds either way, so the same numbers.
        ray_address: the Ray cluster for ``executor="ray"``: ``host:port``,
            ``ray://host:port`` or ``auto``; ``None`` starts a Ray instance on this machine.
        models_per_task: most reference models one task trains, vectorised
            together (an ensemble of K models is ⌈K / models_per_task⌉ tasks);
            part of the plan, not of the executor, so local and Ray runs with
            the same value give the same numbers.
        progress: called with one-line progress messages (the CLI's spinner).
        artefacts_dir: where attacks save files for people to look at
            (inversion reconstructions, the exposed records' images); ``None`` saves nothing.
        exposed: how many of the most exposed members the report lists
            (:mod:`privgate.stats.exposed_members`); 0 lists none.
    """

    seed: int = 0
    threads: int | None = None
    threads_reason: str | None = None
    cache_dir: str | Path | None = None
    cache_key: bytes | None = field(default=None, repr=False)
    engine: str = "auto"
    device: str = "auto"
    device_requested: str | None = None
    device_reason: str | None = None
    device_estimate: dict[str, Any] | None = None
    devices: str | int | None = None
    device_list: tuple[str, ...] | None = None
    executor: str = "local"
    ray_address: str | None = None
    models_per_task: int = DEFAULT_MODELS_PER_TASK
    progress: Progress | None = None
    artefacts_dir: str | None = None
    exposed: int = 10

    def __post_init__(self) -> None:
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise TypeError(f"seed must be an integer, got {self.seed!r}")
        if self.threads is not None:
            from privgate.threads import threads_problem

            problem = threads_problem(self.threads)
            if problem:
                raise ValueError(problem)
        key = self.cache_key
        if key is not None and (not isinstance(key, bytes) or len(key) < MIN_CACHE_KEY_BYTES):
            raise ValueError(
                f"cache_key must be bytes, at least {MIN_CACHE_KEY_BYTES} of them (e.g. secrets.token_bytes(32))"
            )
        if isinstance(self.exposed, bool) or not isinstance(self.exposed, int) or self.exposed < 0:
            raise ValueError(f"exposed must be a non-negative integer, got {self.exposed!r}")
        if (
            isinstance(self.models_per_task, bool)
            or not isinstance(self.models_per_task, int)
            or (self.models_per_task < 1)
        ):
            raise ValueError(f"models_per_task must be a positive integer, got {self.models_per_task!r}")
        if self.device_requested is not None and self.device_requested not in DEVICES:
            raise ValueError(f"device_requested must be one of {', '.join(DEVICES)}, got {self.device_requested!r}")
        if self.devices is not None:
            from privgate.device import parse_devices

            parse_devices(self.devices)  # ValueError: one sentence naming the value
        for name, allowed in (("engine", ENGINES), ("device", DEVICES), ("executor", EXECUTORS)):
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name} must be one of {', '.join(allowed)}, got {getattr(self, name)!r}")

    @property
    def cache(self) -> Path | None:
        """The cache folder to use, or None when caching is off."""
        if self.cache_dir is None:
            return None
        value = str(self.cache_dir)
        return None if value.strip().lower() in CACHE_OFF else Path(value)

    def resolved_threads(self) -> tuple[int, str]:
        """The threads the run uses and why (:meth:`resolved` records them)."""
        from privgate.threads import RAY_DEFAULT, library_threads

        if self.threads is None:
            return RAY_DEFAULT if self.executor == "ray" else library_threads()
        return self.threads, self.threads_reason or f"threads={self.threads} was asked for"

    def resolved(
        self, work: Workload | None = None, costs: Costs | None = None, probe: dict[str, Any] | None = None
    ) -> RunOptions:
        """A copy whose ``device`` is where tensors will live (``cpu`` or ``cuda``) and whose ``threads`` is a number.

        Each is decided once, with its reason (``threads_reason``,
        ``device_reason``); a run already resolved is returned as it is.
        ``auto`` is decided by :func:`privgate.device.choose_device` on ``work``
        (the run's estimated work, :mod:`privgate.workload`; ``None`` for a job
        whose work is not estimated) with ``costs`` (this machine's, measured:
        :mod:`privgate.calibration`; else the documented constants), ``probe``
        the measurement's facts for the report. Imports torch, unless nothing of ``work`` runs on it.

        Raises:
            privgate.device.DeviceError: ``cuda`` on a machine where torch sees no CUDA GPU.
        """
        from privgate.device import DOCUMENTED, asked_for, choose_device, cuda_available, resolve_device

        changes: dict[str, Any] = {}
        threads, why = self.resolved_threads()
        if self.threads is None:
            changes.update(threads=threads, threads_reason=why)
        elif self.threads_reason is None:
            changes["threads_reason"] = why
        if self.device_requested is None:
            if self.device == "auto" and self.devices is not None:  # GPUs named: the GPU
                device, reason = self._named_gpus()
            elif self.device == "auto":
                torchless = work is not None and work.flops_per_row <= 0  # the CPU, without asking torch
                cuda, costs = (False if torchless else cuda_available()), costs or DOCUMENTED
                device, reason = choose_device(work, cuda, threads, costs)
                if cuda and work is not None and work.flops_per_row > 0:
                    changes["device_estimate"] = {
                        "cpu_seconds": round(work.cpu_seconds(threads, costs), 3),
                        "gpu_seconds": round(work.gpu_seconds(costs), 3),
                        "threads": threads,
                        "costs": probe or {"source": costs.source},
                    }
            else:
                device, reason = resolve_device(self.device), asked_for(self.device)
            changes.update(device=device, device_requested=self.device, device_reason=reason)
        if self.device_list is None:
            changes["device_list"] = self._spread(changes.get("device", self.device))
        return self.replace(**changes) if changes else self

    def _named_gpus(self) -> tuple[str, str]:
        """``--devices`` with ``auto``: the GPU, or one sentence saying there is none."""
        from privgate.device import DeviceError, cuda_available

        if not cuda_available():
            raise DeviceError(
                f"--devices {self.devices} names GPUs, but torch sees no CUDA GPU on this machine "
                "(torch.cuda.is_available() is False); drop --devices."
            )
        return "cuda", f"--devices {self.devices} was asked for"

    def _spread(self, device: str) -> tuple[str, ...]:
        """The devices the reference-model groups spread over (:func:`privgate.device.spread_devices`).

        Raises:
            privgate.device.DeviceError: ``devices`` on a CPU run or with the Ray executor, or naming GPUs torch
                does not see.
        """
        from privgate.device import DeviceError, spread_devices

        if self.devices is not None and device == "cpu":
            raise DeviceError(
                f"--devices {self.devices} spreads reference models over GPUs, but device 'cpu' was asked for; "
                "drop one of the two."
            )
        if self.devices is not None and self.executor == "ray":
            raise DeviceError(
                f"--devices {self.devices} chooses GPUs of this machine, but with --executor ray each task runs on "
                "a GPU Ray assigns it on the cluster; drop --devices."
            )
        return (device,) if self.executor == "ray" else spread_devices(device, self.devices)

    def say(self, message: str) -> None:
        """Report progress, when someone listens."""
        if self.progress is not None:
            self.progress(message)

    def replace(self, **changes: Any) -> RunOptions:
        """A copy with some settings changed (a new ``threads`` or ``device`` without its reason is decided again)."""
        if "threads" in changes and "threads_reason" not in changes:
            changes["threads_reason"] = None
        if "device" in changes and "device_reason" not in changes:
            changes.update(device_requested=None, device_reason=None, device_estimate=None)
        if {"device", "devices", "executor"} & set(changes) and "device_list" not in changes:
            changes["device_list"] = None
        return dataclasses.replace(self, **changes)

    @classmethod
    def of(cls, options: RunOptions | None = None, **settings: Any) -> RunOptions:
        """``options`` (or the defaults) with the settings given by keyword; ``None`` values are ignored.

        Lets the public functions keep their keyword arguments (``seed=``,
        ``cache_dir=``, ``threads=`` …) while passing one object down.
        """
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(settings) - fields)
        if unknown:
            raise TypeError(f"unknown run setting(s): {', '.join(unknown)} (known: {', '.join(sorted(fields))})")
        base = options or cls()
        given = {k: v for k, v in settings.items() if v is not None}
        return base.replace(**given) if given else base


__all__ = [
    "CACHE_OFF",
    "MIN_CACHE_KEY_BYTES",
    "DEFAULT_MODELS_PER_TASK",
    "DEVICES",
    "ENGINES",
    "EXECUTORS",
    "Engine",
    "Progress",
    "RunOptions",
]
