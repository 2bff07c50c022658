"""torch's global random generator, one per process and shared by every thread: seeded under one lock.

A model factory draws its initial weights from the global generator (so may a forward pass, except dropout,
:mod:`privgate.training.dropout`). Seeding it in one thread mid-way through another's seeded build changes the other's
weights, and two concurrent runs on one cache then fingerprint one recipe differently
(:func:`privgate.training.fingerprint.recipe_fingerprint`) and both train every model. Every place privgate seeds the
global generator goes through here.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import torch

#: Held while the global generator is seeded and drawn from in a short block (and while it is seeded).
LOCK = threading.RLock()


@contextmanager
def seeded(seed: int | None, devices: Sequence[int] = ()) -> Iterator[None]:
    """A short block (a model build, a probe forward pass) with the global generator at ``seed``.

    The generator is forked (the caller's state comes back afterwards) and the
    lock is held throughout, so no other thread re-seeds it in between;
    ``seed=None`` keeps the state as it is but still forks and holds the lock.
    """
    with LOCK, torch.random.fork_rng(devices=list(devices)):
        if seed is not None:
            torch.manual_seed(int(seed))
        yield


@contextmanager
def forked(devices: Sequence[int] = ()) -> Iterator[None]:
    """A long run (a training loop) with the global generators' states saved before and restored after.

    The saving and the restoring hold the lock, so the restore never lands
    inside another thread's :func:`seeded` block (threads of one process train
    side by side: :class:`privgate.executors.devices.DevicePool`); the run
    itself does not.
    """
    with LOCK:
        cpu = torch.get_rng_state()
        cuda = [torch.cuda.get_rng_state(d) for d in devices]
    try:
        yield
    finally:
        with LOCK:
            torch.set_rng_state(cpu)
            for d, state in zip(devices, cuda):
                torch.cuda.set_rng_state(state, d)


def seed_global(seed: int) -> None:
    """Seed the global generator for a long run (a training loop inside its own ``fork_rng``).

    Only the seeding holds the lock: it never lands inside another thread's
    :func:`seeded` block. Draws of the long run itself are not serialised.
    """
    with LOCK:
        torch.manual_seed(int(seed))


__all__ = ["LOCK", "forked", "seed_global", "seeded"]
