"""Train the survey example's target model and write ``model.pt`` (TorchScript).

Run from anywhere::

    python examples/survey/train.py          # from the repository root
    cd examples/survey && python train.py    # from this directory

Deterministic: fixed seeds, one CPU thread, deterministic algorithms. The model is
saved as TorchScript (``torch.jit.trace``: the MLP has no data-dependent control
flow, and unlike ``torch.jit.script`` the traced archive is byte-for-byte the same
on every run), so it loads without this directory's code
(``torch.jit.load("model.pt")``). It is written atomically (temporary file in this
directory, then ``os.replace``).
"""

from __future__ import annotations

import io
import sys
import time
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import data  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from recipe import RECIPE  # noqa: E402

from privgate.io.atomic import write_atomic  # noqa: E402

SEED = 0
MODEL_PATH = HERE / "model.pt"


def accuracy(model: torch.nn.Module, x: np.ndarray, y: np.ndarray) -> float:
    with torch.no_grad():
        pred = model(torch.as_tensor(x)).argmax(dim=1).numpy()
    return float((pred == y).mean())


def save_torchscript_atomic(model: torch.nn.Module, example: torch.Tensor, path: Path) -> None:
    """Trace ``model`` on ``example`` and write it atomically and byte-for-byte reproducibly.

    Serialising to memory first keeps the archive's internal name fixed (saving to
    a path names the archive after the file, here a random temporary name).
    """
    with warnings.catch_warnings():
        # recent torch releases (2.13 here) mark TorchScript deprecated; it is still the format
        # that loads without the defining Python code.
        warnings.simplefilter("ignore", DeprecationWarning)
        traced = torch.jit.trace(model.eval(), example)
        with torch.no_grad():
            if not torch.equal(traced(example), model(example)):
                raise RuntimeError("the traced model disagrees with the trained one")
        buffer = io.BytesIO()
        torch.jit.save(traced, buffer)
    write_atomic(path, buffer.getvalue())


def main() -> None:
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    torch.manual_seed(SEED)
    np.random.seed(SEED)

    x_train, y_train = data.members()
    x_test, y_test = data.nonmembers()

    start = time.perf_counter()
    model = RECIPE.train(x_train, y_train, seed=SEED)
    seconds = time.perf_counter() - start

    print(
        f"recipe {RECIPE.name}: {RECIPE.epochs} epochs, batch {RECIPE.batch_size}, lr {RECIPE.lr:g}, {RECIPE.optimizer}"
    )
    print(f"trained on {len(x_train)} members in {seconds:.1f} s")
    print(f"train accuracy (members):    {accuracy(model, x_train, y_train):.4f}")
    print(f"test accuracy (non-members): {accuracy(model, x_test, y_test):.4f}  (majority class: 0.36)")

    save_torchscript_atomic(model, torch.as_tensor(x_test[:8]), MODEL_PATH)
    print(f"wrote {MODEL_PATH} ({MODEL_PATH.stat().st_size / 1024:.0f} KiB)")


if __name__ == "__main__":
    main()
