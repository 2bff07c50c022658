"""Train the synthetic-attribute example's target and write ``model.pt`` (a state_dict).

    python examples/synthetic_attribute/train.py

Deterministic (fixed seed, one thread); written atomically.
"""

from __future__ import annotations

import io
import os
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import data  # noqa: E402
import torch  # noqa: E402
from recipe import RECIPE  # noqa: E402

from privgate import train_model  # noqa: E402

MODEL_PATH = HERE / "model.pt"


def main() -> None:
    torch.set_num_threads(1)
    x, y = data.members()
    xt, yt = data.nonmembers()
    model = train_model(RECIPE, x, y, seed=0)
    with torch.no_grad():
        train_acc = (model(torch.as_tensor(x)).argmax(1).numpy() == y).mean()
        test_acc = (model(torch.as_tensor(xt)).argmax(1).numpy() == yt).mean()
    print(f"train accuracy {train_acc:.3f} (labels are 20 % noisy: 1.0 means memorised), test accuracy {test_acc:.3f}")
    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    fd, tmp = tempfile.mkstemp(prefix=".model.pt.", suffix=".tmp", dir=HERE)
    with os.fdopen(fd, "wb") as f:
        f.write(buffer.getvalue())
    os.chmod(tmp, 0o644)
    os.replace(tmp, MODEL_PATH)
    print(f"wrote {MODEL_PATH}")


if __name__ == "__main__":
    main()
