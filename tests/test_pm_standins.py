"""The stand-in modules ``benchmarks/gpu/privacy_meter_cifar.py`` puts on Privacy Meter's path (issue 43).

On the GPU machine ``datasets`` is missing; Privacy Meter imports it (and evaluates
annotations and ``isinstance`` checks naming such modules) on its CIFAR path without
calling it. The stand-ins must import the way Privacy Meter imports them, answer
attribute access, never pass ``isinstance``, and refuse to be called — except the
no-op one for plots, which must swallow its calls. Checked in a fresh interpreter.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

_PATH = Path(__file__).resolve().parent.parent / "benchmarks" / "gpu" / "privacy_meter_cifar.py"

_USE = """
import absentpkg, absentpkg.transforms as transforms
from absentpkg import AutoTokenizer, PreTrainedModel
from absentpkg.sub.deeper import Thing
from typing import Union

def f(dataset: absentpkg.datasets, d: Union[PreTrainedModel, int]):
    return dataset

assert not isinstance(object(), PreTrainedModel)
assert Thing.__qualname__ == "absentpkg.sub.deeper.Thing"
try:
    transforms.Compose([transforms.ToTensor()])
except ModuleNotFoundError as e:
    print("refused:", e)
from absentplot import pyplot as plt
plt.plot([0, 1], [0, 1], label="x")
plt.savefig(fname="never-written.png", dpi=1000)
assert isinstance(plt.gcf().axes.clear(), type)
print("plots: swallowed")
"""


def test_standins_import_answer_and_refuse_calls(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("_privacy_meter_cifar", _PATH)
    mod = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(mod)
    mod.write_standins(tmp_path / "s", ["absentpkg", "absentplot"], no_op=("absentplot",))
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "s")}
    out = subprocess.run([sys.executable, "-c", _USE], env=env, cwd=tmp_path, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "refused: absentpkg.transforms.ToTensor: absentpkg is not installed here" in out.stdout
    assert "plots: swallowed" in out.stdout
    assert not (tmp_path / "never-written.png").exists()
