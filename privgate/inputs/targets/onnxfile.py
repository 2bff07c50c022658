"""ONNX graphs as black-box targets, run by onnxruntime.

The rest (design, limits, derivations): docs/internals-inputs.md.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np

from privgate.errors import TargetError
from privgate.inputs.targets.blackbox import BlackBox
from privgate.io.digest import file_sha256

#: onnxruntime's element types privgate feeds, as numpy dtypes.
DTYPES = {"tensor(float)": np.float32, "tensor(double)": np.float64, "tensor(float16)": np.float16}
SCORES = re.compile(r"prob|logit|score|output_probability", re.IGNORECASE)


def _is_float(type_: str) -> bool:
    return type_ in DTYPES


def choose_output(outputs: list[Any], source: str) -> Any:
    """The graph output privgate reads (see the module docstring); ``outputs`` are onnxruntime ``NodeArg`` s."""
    if len(outputs) == 1:
        return outputs[0]
    usable = [o for o in outputs if _is_float(o.type) or o.type.startswith("seq(map(")]
    named = [o for o in usable if SCORES.search(o.name)]
    if len(named) >= 1:
        tensors = [o for o in named if _is_float(o.type)]
        return (tensors or named)[0]
    two_d = [o for o in usable if _is_float(o.type) and len(o.shape or []) == 2]
    if len(two_d) == 1:
        return two_d[0]
    listed = ", ".join(f"'{o.name}' ({o.type})" for o in outputs)
    raise TargetError(
        f"{source}: the graph has {len(outputs)} outputs ({listed}) and none of them is recognisably the class "
        "probabilities or logits; export the model with one output."
    )


class OnnxModel(BlackBox):
    """An ONNX graph in an onnxruntime session (see the module docstring)."""

    fmt = "onnx"

    def __init__(self, session: Any, source: str, sha256: str) -> None:
        self.session = session
        self.source = source
        self.sha256 = sha256
        inputs = session.get_inputs()
        if len(inputs) != 1:
            names = ", ".join(f"'{i.name}'" for i in inputs)
            raise TargetError(f"{source}: the graph takes {len(inputs)} inputs ({names}); privgate feeds one.")
        self.input = inputs[0]
        if self.input.type not in DTYPES:
            raise TargetError(
                f"{source}: the graph's input '{self.input.name}' is {self.input.type}; privgate feeds float rows "
                "(tensor(float), tensor(double) or tensor(float16))."
            )
        self.dtype = DTYPES[self.input.type]
        self.output = choose_output(session.get_outputs(), source)
        self.kind = None

    @classmethod
    def load(cls, path: Path) -> OnnxModel:
        """Open ``path`` in an onnxruntime CPU session; one sentence when it is not a readable graph."""
        try:
            import onnxruntime as ort
        except ImportError:
            raise TargetError(f"{path}: ONNX models need onnxruntime: pip install 'privgate[onnx]'.") from None
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = 1
        opts.inter_op_num_threads = 1
        opts.log_severity_level = 3  # errors only: onnxruntime's warnings are not the user's business
        try:
            session = ort.InferenceSession(str(path), sess_options=opts, providers=["CPUExecutionProvider"])
        except Exception as exc:  # onnxruntime raises its own exception types for unreadable graphs
            first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else exc.__class__.__name__
            raise TargetError(f"{path}: not a readable ONNX model ({first}).") from None
        return cls(session, str(path), file_sha256(path))

    @property
    def row_shape(self) -> tuple[int | str | None, ...]:
        """The graph's shape of one input row (named or unknown dimensions as given)."""
        return tuple(self.input.shape[1:]) if self.input.shape else ()

    def _check_rows(self, x: np.ndarray) -> None:
        want = self.row_shape
        got = tuple(x.shape[1:])
        fixed = len(want) == len(got) and all(not isinstance(w, int) or w == g for w, g in zip(want, got))
        if not fixed:
            shown = tuple(w if isinstance(w, int) else "?" for w in want)
            raise TargetError(
                f"{self.source}: the graph's input '{self.input.name}' takes rows of shape {shown}, the audit data "
                f"has rows of shape {got}."
            )

    def raw(self, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x)
        self._check_rows(x)
        try:
            (out,) = self.session.run([self.output.name], {self.input.name: x.astype(self.dtype, copy=False)})
        except Exception as exc:  # onnxruntime's errors on a run (shape inference, a type it cannot feed)
            first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else exc.__class__.__name__
            raise TargetError(f"{self.source}: onnxruntime cannot run the graph on the audit rows ({first}).") from None
        if isinstance(out, list):  # ZipMap: one {class: probability} per row
            keys = sorted(out[0]) if out else []
            out = np.array([[row[k] for k in keys] for row in out], dtype=np.float64)
        return np.asarray(out, dtype=np.float64)

    def describe(self) -> dict[str, Any]:
        return {
            **super().describe(),
            "onnx": {"input": self.input.name, "input_type": self.input.type, "output": self.output.name},
        }


__all__ = ["DTYPES", "SCORES", "OnnxModel", "choose_output"]
