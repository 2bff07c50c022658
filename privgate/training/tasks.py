"""Reference models as tasks: an ensemble split into groups, each group trained (vectorised) by one task.

The groups depend only on K and ``models_per_task``
(:func:`privgate.executors.task_groups`); the executor only decides where the
tasks run (:mod:`privgate.executors`; several GPUs of this machine: one worker
each, :class:`~privgate.executors.devices.DevicePool`). A group of models trained together
agrees with the same models trained in another grouping only up to float
rounding (batched matrix products may sum in another order), which is why the
grouping is part of the run's plan and not the executor's choice.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from privgate.executors import Executor, LocalExecutor, task_groups
from privgate.executors.devices import DevicePool
from privgate.recipe import Recipe
from privgate.training.ensemble import Trained


def train_groups(
    executor: Executor | None,
    task: Callable[..., tuple[Trained, Any]],
    size: int | None,
    recipe: Recipe,
    x: np.ndarray,
    y: np.ndarray,
    masks: np.ndarray,
    seeds: Sequence[int],
    vectorise: bool,
    threads: int | None,
    strict: bool,
    device: str,
    devices: Sequence[str] = (),
) -> Any:
    """Train one model per mask in consecutive groups of at most ``size`` models, one task per group.

    Returns ``(Trained, architecture, placement)``: the joined result, the first model a user's training function
    returned (None for any other recipe), and where each group trained (``{"device", "models"}``, models by
    position in ``seeds``).

    With more than one of ``devices`` and the local executor, group i trains on ``devices[i % N]``, one worker
    thread per device (:class:`~privgate.executors.devices.DevicePool`); else every group on ``device``.

    Each task is ``task`` (:func:`privgate.training.engine.train_task`) on its group
    (vectorised inside, with ``threads`` threads); the results come back in
    order and are joined: states in mask order, the notes of every group, the
    kernels used, and the first model a user's training function returned
    (:mod:`privgate.training.function`; its models are one task each). No
    cache here: the caller looks models up before and stores them after, on
    the driver.
    """
    if recipe.own_loop:  # the user's training function: one call per model, each its own task (parallel on Ray)
        size = 1
    groups = task_groups(len(seeds), size)
    runner = executor or LocalExecutor()
    where = [device] * len(groups)
    if len(devices) > 1 and len(groups) > 1 and runner.name == "local":
        runner = DevicePool(devices)
        where = runner.place(len(groups))
    tasks = [
        (
            recipe,
            x,
            y,
            masks[g.start : g.stop],
            list(seeds[g.start : g.stop]),
            vectorise,
            threads,
            "auto",
            strict,
            on,
        )
        for g, on in zip(groups, where)
    ]
    results = runner.map(task, tasks, threads=threads, gpus=1 if device == "cuda" else 0)
    done: list[Trained] = [t for t, _ in results]
    notes = list(dict.fromkeys(n for t in done for n in t.notes))
    mode = "sequential" if any(t.mode == "sequential" for t in done) else "vectorised"
    kernel = "+".join(dict.fromkeys(t.kernel for t in done))
    if len(groups) > 1:
        on = f", on {len(set(where))} devices" if isinstance(runner, DevicePool) else ""
        notes.append(
            f"{len(seeds)} models trained as {len(groups)} tasks of at most {len(groups[0])} "
            f"({getattr(runner, 'name', 'local')} executor{on})"
        )
    if len(devices) > len(groups) and runner.name == "local":
        per = -(-len(seeds) // len(devices))
        notes.append(
            f"{len(seeds)} models in {len(groups)} task(s) kept {len(groups)} of the {len(devices)} devices busy "
            f"(a task is one group); --models-per-task {per} would give every device one"
        )
    returned = next((a for _, a in results if a is not None), None)
    placement = [{"device": on, "models": list(g)} for g, on in zip(groups, where)]
    return Trained([st for t in done for st in t.states], mode, notes, kernel), returned, placement


__all__ = ["train_groups"]
