"""Train the purchase example's target model and write ``model.pt`` (TorchScript, loads without this code).

Run from anywhere::

    python examples/purchase/train.py          # from the repository root
    cd examples/purchase && python train.py    # from this directory

Deterministic (one CPU thread, fixed seeds, deterministic algorithms) and written
atomically; see ``examples/train_target.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
for folder in (HERE, HERE.parent):  # this example's data and recipe; the examples' shared train_target
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))

import data  # noqa: E402
from recipe import RECIPE  # noqa: E402
from train_target import train_and_save  # noqa: E402

if __name__ == "__main__":
    train_and_save(RECIPE, data, HERE / "model.pt", torchscript=True, baseline="chance: 0.01")
