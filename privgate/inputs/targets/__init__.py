"""Targets that are served rather than trained here: ONNX graphs, boosted-tree files, live endpoints.

The rest (design, limits, derivations): docs/internals-inputs.md.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from privgate.errors import TargetError
from privgate.inputs.targets.blackbox import BlackBox

URL_SCHEMES = ("http://", "https://")


def is_endpoint(spec: Any) -> bool:
    """Whether ``spec`` names an inference endpoint (an ``http(s)://`` URL) rather than a file."""
    return isinstance(spec, str) and spec.strip().lower().startswith(URL_SCHEMES)


def is_huggingface(model: Any) -> bool:
    """Whether ``model`` is a Hugging Face model folder (or a target loaded from one): the one place that decides.

    A folder with ``config.json`` (or a PEFT ``adapter_config.json``) is read by
    :mod:`privgate.inputs.targets.hf_target` into a target of kind ``causal_lm`` or ``sequence_classifier``,
    audited on records of text; anything else is a model file, an endpoint or a model in memory. Reads no file
    but the folder's listing, imports nothing heavy.
    """
    if isinstance(model, (str, os.PathLike)):
        from privgate.inputs.targets.hf import is_model_dir

        return not is_endpoint(model) and is_model_dir(model)
    loaded = sys.modules.get("privgate.inputs.targets.hf_target")  # an HFTarget exists only once its module is loaded
    return loaded is not None and isinstance(model, loaded.HFTarget)


def check_model_path(spec: str | Path) -> None:
    """What is wrong with a model path, as one :class:`~privgate.errors.TargetError`, before anything is loaded.

    Nothing for an endpoint URL (its server answers for it) or a non-empty
    file; torch is not imported, so a run with a missing model file is
    refused as cheaply as one with a bad policy. A ``.skops`` file's names are
    checked when it loads (:func:`privgate.inputs.targets.sklearn.load_skops`, after the data: loading it
    imports skops, which imports every scikit-learn module and torch).
    """
    if is_endpoint(spec):
        return
    p = Path(spec)
    if not p.exists():
        raise TargetError(f"{p}: model file not found.")
    if p.is_dir():
        if is_huggingface(p):
            raise TargetError(
                f"{p}: is a Hugging Face model directory; audit it on text data with privgate check "
                "(privgate.check), which reads it with transformers."
            )
        raise TargetError(
            f"{p}: is a directory without config.json, neither a model file nor a Hugging Face model directory."
        )
    if p.stat().st_size == 0:
        raise TargetError(f"{p}: the model file is empty.")


def load_served(spec: str | Path, access: Any = None) -> BlackBox | None:
    """The black box ``spec`` names, or ``None`` when it is not a served format (left to ``Target.load``).

    Args:
        spec: a file path or an endpoint URL.
        access: how an endpoint is queried (:class:`privgate.inputs.targets.endpoint.Access`; default settings
            when ``None``); ignored for files.
    """
    if is_endpoint(spec):
        from privgate.inputs.targets.endpoint import Endpoint

        return Endpoint.connect(str(spec).strip(), access)
    p = Path(spec)
    if not p.is_file() or p.stat().st_size == 0:
        return None  # Target.load says what is wrong with it
    if p.suffix.lower() == ".onnx":
        from privgate.inputs.targets.onnxfile import OnnxModel

        return OnnxModel.load(p)
    from privgate.inputs.targets import boosted

    library = boosted.sniff(p)
    return boosted.load(p, library) if library else None


def wrap_booster(obj: Any) -> BlackBox | None:
    """An in-memory ``xgboost.Booster`` or ``lightgbm.Booster`` as a black box (``None`` for anything else)."""
    module = type(obj).__module__.split(".")[0]
    if type(obj).__name__ != "Booster" or module not in ("xgboost", "lightgbm"):
        return None
    from privgate.inputs.targets.boosted import BoostedModel

    return BoostedModel(module, obj, f"<{module}.Booster>")  # type: ignore[arg-type]


__all__ = [
    "URL_SCHEMES",
    "BlackBox",
    "check_model_path",
    "is_endpoint",
    "is_huggingface",
    "load_served",
    "wrap_booster",
]
