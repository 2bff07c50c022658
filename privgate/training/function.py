"""The team's own training loop as a recipe: ``train(x, y, seed, device) -> nn.Module``, called once per model.

For targets trained by code no :class:`~privgate.recipe.Recipe` setting describes: reference models unlike the target
make LiRA and RMIA understate its leak (Carlini et al. 2022, arXiv 2112.03570, §VI). Called per reference model with
float32 rows (a copy), int64 labels, the plan's seed and ``"cpu"``/``"cuda"`` (omitted for a three-argument
function), the global generators seeded from ``seed`` and restored after. Each result is checked; a function that
raises or returns a bad model is one sentence (:class:`~privgate.errors.RecipeError`, exit 2). Cache key:
:func:`function_fingerprint`. Details: ``docs/internals-training-stats.md``.
"""

from __future__ import annotations

import hashlib
import random
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

from privgate.errors import RecipeError, clip, out_of_memory
from privgate.io.sources import code_of, project_sources
from privgate.recipe.signature import function_name, takes_device

if TYPE_CHECKING:
    from privgate.recipe import Recipe

#: Training rows the returned model is probed on.
PROBE_ROWS = 8


def function_fingerprint(fn: Any) -> str:
    """SHA-256 of ``fn``'s qualified name and of every project source it reaches, for the cache key.

    :func:`privgate.io.sources.project_sources`: its module's file and every project module its imports
    reach, transitively (installed packages by version; compiled code for a function without a file).

    Raises:
        Uncovered: the project files it reaches are past the walk's bounds.
    """
    sources = project_sources(code_of(fn))
    return hashlib.sha256(f"train_fn|{function_name(fn)}|{sources.digest}".encode()).hexdigest()


def _head(recipe: Recipe) -> str:
    name = function_name(recipe.train_fn)
    return f"training function '{name}'" if recipe.name == name else f"recipe '{recipe.name}': train_fn '{name}'"


def call_training_function(recipe: Recipe, x: np.ndarray, y: np.ndarray, seed: int, device: str) -> nn.Module:
    """``recipe.train_fn(x, y, seed, device)`` under seeded global generators, its result checked (module docstring).

    Raises:
        RecipeError: the function failed, returned no ``nn.Module``, or a model with other outputs.
    """
    fn = recipe.train_fn
    head = _head(recipe)
    dev = torch.device(device)
    xa = np.array(x, dtype=np.float32, copy=True)
    ya = np.array(y, dtype=np.int64, copy=True)
    args: tuple[Any, ...] = (xa, ya, int(seed), str(device)) if takes_device(fn) else (xa, ya, int(seed))
    forked = [dev.index if dev.index is not None else torch.cuda.current_device()] if dev.type == "cuda" else []
    np_state, py_state = np.random.get_state(), random.getstate()
    from privgate.recipe.rng import forked as forked_rng
    from privgate.recipe.rng import seed_global

    try:
        with forked_rng(forked):
            seed_global(seed)
            np.random.seed(int(seed) % 2**32)
            random.seed(int(seed))
            net = fn(*args)  # type: ignore[misc]
    except RecipeError:
        raise
    except Exception as exc:
        if out_of_memory(exc):
            raise
        raise RecipeError(f"{head}: training failed ({exc.__class__.__name__}: {clip(str(exc), 200)}).") from None
    finally:
        np.random.set_state(np_state)
        random.setstate(py_state)
    check_returned(head, net, xa, ya)
    return net


def check_returned(head: str, net: Any, x: np.ndarray, y: np.ndarray) -> None:
    """Refuse what a training function returned unless it is a model with ``[rows, classes]`` finite outputs."""
    from privgate import outputs

    if not isinstance(net, nn.Module):
        raise RecipeError(f"{head}: returned a {type(net).__name__}, not a torch.nn.Module.")
    net.eval()
    rows = min(PROBE_ROWS, len(x))
    try:
        where = next(net.parameters()).device
    except StopIteration:
        where = torch.device("cpu")
    except Exception:  # noqa: BLE001 - a module whose parameters cannot be listed fails its forward pass below
        where = torch.device("cpu")
    try:
        with torch.no_grad():
            out = net(torch.as_tensor(x[:rows]).to(where))
    except Exception as exc:
        if out_of_memory(exc):
            raise
        raise RecipeError(
            f"{head}: the model it returned fails on the training rows ({exc.__class__.__name__}: "
            f"{clip(str(exc), 200)})."
        ) from None
    if not isinstance(out, torch.Tensor):
        raise RecipeError(
            f"{head}: the model it returned outputs a {type(out).__name__}, not a tensor of logits or probabilities."
        )
    raw = out.detach().float().cpu().numpy()
    kind = outputs.kind_of(raw) if raw.ndim >= 1 and len(raw) == rows else None
    if kind is None:
        raise RecipeError(
            f"{head}: the model it returned outputs shape {tuple(raw.shape)} on {rows} rows; expected "
            f"[{rows}, classes] logits or probabilities, or one logit per row."
        )
    if not np.all(np.isfinite(raw)):
        raise RecipeError(f"{head}: the model it returned outputs NaN or infinite values on the training rows.")
    classes = 2 if kind == outputs.BINARY else raw.shape[1]
    if len(y) and int(y.max()) >= classes:
        raise RecipeError(
            f"{head}: the model it returned outputs {classes} classes but the training labels go up to {int(y.max())}."
        )


def architecture_state(architecture: nn.Module | None) -> dict[str, torch.Tensor] | None:
    """The state of the model the cached states of a training function load into (the target's), if there is one."""
    if architecture is None:
        return None
    try:
        return {k: v for k, v in architecture.state_dict().items() if isinstance(v, torch.Tensor)}
    except Exception:  # noqa: BLE001 - a module without a usable state: the first trained model stands in
        return None


def architecture_copy(architecture: nn.Module | None) -> nn.Module | None:
    """A copy of ``architecture`` on the CPU to load reference states into (None when it cannot be copied)."""
    import copy
    import warnings

    if architecture is None:
        return None
    try:
        with warnings.catch_warnings():  # moving a TorchScript module reads .grad of its non-leaf parameters
            warnings.simplefilter("ignore", UserWarning)
            return copy.deepcopy(architecture).cpu().eval()
    except Exception:  # noqa: BLE001 - e.g. a module holding something deepcopy refuses: a model is trained instead
        return None


def shape_mismatch(got: dict[str, Any], want: dict[str, Any]) -> tuple[list[str], list[str], list[str]]:
    """How two states' parameters differ: (``want``'s names ``got`` lacks, ``got``'s names ``want`` lacks,
    ``"name got vs want"`` of the shared names whose shapes differ), each sorted; all empty when they agree."""
    mine = {k: tuple(v.shape) for k, v in got.items()}
    theirs = {k: tuple(v.shape) for k, v in want.items()}
    missing, extra = sorted(set(theirs) - set(mine)), sorted(set(mine) - set(theirs))
    shapes = [f"{k} {mine[k]} vs {theirs[k]}" for k in sorted(set(mine) & set(theirs)) if mine[k] != theirs[k]]
    return missing, extra, shapes


def check_states(recipe: Recipe, states: list[dict[str, torch.Tensor]], like: dict[str, torch.Tensor], of: str) -> None:
    """Every model a training function returned has the parameters of ``like`` (names and shapes), or one sentence.

    ``like`` is the recipe's ``model_factory`` build, the target's model, or the
    first model returned (``of`` says which): reference models read as one
    architecture must be one.
    """
    for st in states:
        missing, extra, shapes = shape_mismatch(st, like)
        if not (missing or extra or shapes):
            continue
        detail = "; ".join(
            p
            for p in (
                f"lacks {', '.join(missing[:3])}" if missing else "",
                f"has {', '.join(extra[:3])} besides" if extra else "",
                f"other shapes: {', '.join(shapes[:3])}" if shapes else "",
            )
            if p
        )
        raise RecipeError(
            f"{_head(recipe)}: a model it returned does not have the parameters of {of} ({detail}); reference "
            "models must be trained like the target."
        )


__all__ = [
    "architecture_copy",
    "architecture_state",
    "check_states",
    "shape_mismatch",
    "call_training_function",
    "check_returned",
    "function_fingerprint",
]
