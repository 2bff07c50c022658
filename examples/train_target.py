"""Shared by the examples' ``train.py`` scripts: train a target deterministically and write it atomically.

Each example's ``train.py`` names its data, its recipe and the file format; this
module does the rest the same way for all of them:

* one CPU thread, deterministic algorithms, ``torch.manual_seed`` and
  ``np.random.seed`` fixed, then ``train_model(recipe, members, seed)`` — the loop
  privgate's reference models replicate;
* the file is written through ``privgate.io.atomic.write_atomic`` (a temporary
  file in the same folder, then ``os.replace``), serialised in memory first so
  the archive's internal name is fixed and the bytes are the same on every run;
* a ``state_dict`` (loaded with ``--recipe``) or TorchScript traced on a few
  rows (``torch.jit.trace``: no data-dependent control flow in these models,
  and unlike ``torch.jit.script`` the traced archive is byte-for-byte stable),
  which loads without the example's code.
"""

from __future__ import annotations

import io
import time
import warnings
from pathlib import Path
from types import ModuleType

import numpy as np
import torch

from privgate import train_model
from privgate.io.atomic import write_atomic
from privgate.recipe import Recipe


def accuracy(model: torch.nn.Module, x: np.ndarray, y: np.ndarray) -> float:
    """Share of rows whose arg-max output is the label."""
    with torch.no_grad():
        pred = model(torch.as_tensor(x)).argmax(dim=1).numpy()
    return float((pred == y).mean())


def save_state_dict(model: torch.nn.Module, path: Path) -> None:
    """Write ``model.state_dict()`` atomically and byte-for-byte reproducibly."""
    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    write_atomic(path, buffer.getvalue())


def save_torchscript(model: torch.nn.Module, example: torch.Tensor, path: Path) -> None:
    """Trace ``model`` on ``example`` (checked against the model) and write it atomically and reproducibly."""
    with warnings.catch_warnings():
        # torch 2.13 marks TorchScript deprecated; it is still the format that loads without the defining code
        warnings.simplefilter("ignore", DeprecationWarning)
        traced = torch.jit.trace(model.eval(), example)
        with torch.no_grad():
            if not torch.equal(traced(example), model(example)):
                raise RuntimeError("the traced model disagrees with the trained one")
        buffer = io.BytesIO()
        torch.jit.save(traced, buffer)
    write_atomic(path, buffer.getvalue())


def train_and_save(
    recipe: Recipe, data: ModuleType, path: Path, *, torchscript: bool, baseline: str = "", seed: int = 0
) -> None:
    """Train ``recipe`` on ``data.members()``, print accuracy on them and on ``data.nonmembers()``, save to ``path``."""
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    torch.manual_seed(seed)
    np.random.seed(seed)

    x_train, y_train = data.members()
    x_test, y_test = data.nonmembers()

    start = time.perf_counter()
    model = train_model(recipe, x_train, y_train, seed=seed)
    seconds = time.perf_counter() - start
    model.eval()

    print(
        f"recipe {recipe.name}: {recipe.epochs} epochs, batch {recipe.batch_size}, lr {recipe.lr:g}, {recipe.optimizer}"
    )
    print(f"trained on {len(x_train)} members {tuple(x_train.shape[1:])} in {seconds:.1f} s")
    print(f"train accuracy (members):    {accuracy(model, x_train, y_train):.4f}")
    print(f"test accuracy (non-members): {accuracy(model, x_test, y_test):.4f}{f'  ({baseline})' if baseline else ''}")

    if torchscript:
        save_torchscript(model, torch.as_tensor(x_test[:8]), path)
    else:
        save_state_dict(model, path)
    print(f"wrote {path} ({path.stat().st_size / 1024:.0f} KiB)")
