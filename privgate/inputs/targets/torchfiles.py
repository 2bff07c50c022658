"""Torch checkpoints as models: ``torch.export`` programs (``.pt2``), TorchScript, a ``state_dict``
(``weights_only=True``) or safetensors plus the recipe's factory, and pickles only when trusted (they run code).

The one place :meth:`privgate.inputs.target.Target.load` imports torch: a scikit-learn, ONNX or boosted-tree file
never reaches it (docs/model-formats.md).
"""

from __future__ import annotations

import io
import pickle
import warnings
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from privgate.errors import RecipeError, TargetError
from privgate.inputs.targets.exported import is_exported, load_exported

if TYPE_CHECKING:
    from privgate.recipe import Recipe


def is_torchscript(path: Path) -> bool:
    """Whether ``path`` is a TorchScript archive (a zip with a ``code/`` folder)."""
    try:
        with zipfile.ZipFile(path) as z:
            return any(n.split("/", 2)[1:2] == ["code"] for n in z.namelist() if n.count("/") >= 2)
    except (zipfile.BadZipFile, OSError):
        return False


def script_copy(module: torch.jit.ScriptModule, device: str) -> torch.jit.ScriptModule:
    """A TorchScript module's copy on ``device``, its parameters fresh leaves there (saved and loaded, in memory)."""
    buffer = io.BytesIO()
    with warnings.catch_warnings():  # TorchScript is deprecated in torch 2.x but is the format users hand in
        warnings.filterwarnings("ignore", r".*torch\.jit\.(save|load).* is deprecated", DeprecationWarning)
        torch.jit.save(module, buffer)
        buffer.seek(0)
        copied = torch.jit.load(buffer, map_location=device)
    return copied.train(module.training)


def load_torch(p: Path, recipe: Recipe | None, trust: bool) -> tuple[Any, str]:
    """The model in the torch checkpoint ``p`` and its format's name; one sentence (a TargetError) otherwise."""
    if p.suffix.lower() == ".safetensors":
        return _from_state(p, _read_safetensors(p), recipe, "safetensors"), "safetensors"
    if is_exported(p):  # torch.export: the graph only, checked before it is loaded
        return load_exported(p), "torch.export"
    if is_torchscript(p):
        try:
            with warnings.catch_warnings():  # TorchScript is deprecated in torch 2.x but is the format users hand in
                warnings.filterwarnings(
                    "ignore", message=r".*torch\.jit\.load.* is deprecated", category=DeprecationWarning
                )
                model = torch.jit.load(str(p), map_location="cpu")
        except Exception as exc:
            raise TargetError(
                f"{p}: cannot load TorchScript model ({exc.__class__.__name__}); the file may be truncated."
            ) from None
        return model, "torchscript"
    return _from_torch_load(p, recipe, trust)


def _read_safetensors(p: Path) -> dict[str, torch.Tensor]:
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        return load_file(str(p), device="cpu")
    except (SafetensorError, OSError, ValueError) as exc:
        raise TargetError(f"{p}: not a readable safetensors file ({exc}).") from None


def _from_torch_load(p: Path, recipe: Recipe | None, trust: bool) -> tuple[Any, str]:
    try:
        obj = torch.load(str(p), map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:
        if not trust:
            raise TargetError(
                f"{p}: the checkpoint contains pickled Python objects, and loading it would run code "
                "from the file; save a state_dict or TorchScript instead, or pass --trust-checkpoint "
                "if you trust its origin."
            ) from None
        return _load_trusted(p)
    except Exception as exc:  # torch raises many types for foreign or damaged files
        raise TargetError(
            f"{p}: not a readable PyTorch checkpoint ({exc.__class__.__name__}); the file may be "
            f"truncated or in another format."
        ) from None
    if isinstance(obj, dict) and "state_dict" in obj and isinstance(obj["state_dict"], dict):
        obj = obj["state_dict"]
    if isinstance(obj, dict) and obj and all(isinstance(v, torch.Tensor) for v in obj.values()):
        return _from_state(p, obj, recipe, "state_dict"), "state_dict"
    raise TargetError(f"{p}: the checkpoint holds a {type(obj).__name__}, not a model or a state_dict of tensors.")


def _load_trusted(p: Path) -> tuple[Any, str]:
    try:
        obj = torch.load(str(p), map_location="cpu", weights_only=False)
    except Exception as exc:
        raise TargetError(f"{p}: cannot unpickle the checkpoint ({exc.__class__.__name__}: {exc}).") from None
    from privgate.inputs.targets.sklearn import wrap_estimator

    estimator = None if isinstance(obj, torch.nn.Module) else wrap_estimator(obj, str(p))
    if estimator is not None:
        return estimator, "sklearn"
    if isinstance(obj, torch.nn.Module) or hasattr(obj, "predict_proba"):
        return obj, "pickle"
    raise TargetError(f"{p}: the checkpoint holds a {type(obj).__name__}, not a model.")


def _from_state(p: Path, state: dict[str, torch.Tensor], recipe: Recipe | None, fmt: str) -> torch.nn.Module:
    if recipe is None:
        raise TargetError(
            f"{p}: is a {fmt} of weights only; give the recipe that builds the model (--recipe module:attr) "
            "or save the model as TorchScript."
        )
    try:
        model = recipe.build()
    except RecipeError:
        raise
    except Exception as exc:
        raise RecipeError(
            f"recipe '{recipe.name}': building the model failed ({exc.__class__.__name__}: {exc})."
        ) from None
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as exc:
        first = str(exc).strip().splitlines()
        detail = " ".join(line.strip() for line in first[1:3]) if len(first) > 1 else first[0]
        raise TargetError(f"{p}: the weights do not fit the recipe's model '{recipe.name}' ({detail[:300]}).") from None
    return model


__all__ = ["is_torchscript", "load_torch", "script_copy"]
