"""Reference models as tasks: an ensemble split into groups, each group trained (vectorised) by one task.

The groups depend only on K and ``models_per_task``
(:func:`privgate.executors.task_groups`); the executor only decides where the
tasks run (:mod:`privgate.executors`). A group of models trained together
agrees with the same models trained in another grouping only up to float
rounding (batched matrix products may sum in another order), which is why the
grouping is part of the run's plan and not the executor's choice.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from privgate.executors import Executor, LocalExecutor, task_groups
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
) -> Any:
    """Train one model per mask in consecutive groups of at most ``size`` models, one task per group.

    Returns ``(Trained, architecture)``: the joined result, and the first model a user's training function
    returned (None for any other recipe).

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
            device,
        )
        for g in groups
    ]
    runner = executor or LocalExecutor()
    results = runner.map(task, tasks, threads=threads, gpus=1 if device == "cuda" else 0)
    done: list[Trained] = [t for t, _ in results]
    notes = list(dict.fromkeys(n for t in done for n in t.notes))
    mode = "sequential" if any(t.mode == "sequential" for t in done) else "vectorised"
    kernel = "+".join(dict.fromkeys(t.kernel for t in done))
    if len(groups) > 1:
        notes.append(
            f"{len(seeds)} models trained as {len(groups)} tasks of at most {len(groups[0])} "
            f"({getattr(runner, 'name', 'local')} executor)"
        )
    returned = next((a for _, a in results if a is not None), None)
    return Trained([st for t in done for st in t.states], mode, notes, kernel), returned


__all__ = ["train_groups"]
