"""The shape of a team's own training function, ``train(x, y, seed, device) -> nn.Module``, read from its signature.

:mod:`privgate.training.function` calls it; :mod:`privgate.inputs.entrypoints` tells it from a recipe factory and
:func:`privgate.recipe.check.check_recipe` refuses one that cannot be called so.
"""

from __future__ import annotations

import inspect
from typing import Any


def _positional(fn: Any) -> tuple[int, float, list[str]] | None:
    """(required positional parameters, most positional parameters, required keyword-only names); None: no signature."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return None
    pos = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    required = sum(p.default is p.empty for p in pos)
    most = float("inf") if any(p.kind is p.VAR_POSITIONAL for p in params) else float(len(pos))
    kw_required = [p.name for p in params if p.kind is p.KEYWORD_ONLY and p.default is p.empty]
    return required, most, kw_required


def is_training_function(obj: Any) -> bool:
    """Whether ``obj``, found at a ``--recipe`` spec, is a training function (it takes arguments), not a recipe factory.

    A factory is called with no argument and returns a :class:`~privgate.recipe.Recipe`;
    anything callable that needs an argument is taken for ``train(x, y, seed, device)``
    and checked as one (:func:`signature_problem`).
    """
    if not callable(obj) or isinstance(obj, type):
        return False
    shape = _positional(obj)
    return shape is not None and shape[0] > 0


def signature_problem(fn: Any) -> str:
    """Empty when ``fn`` can be called as ``fn(x, y, seed, device)`` or ``fn(x, y, seed)``; else what is wrong."""
    if not callable(fn):
        return f"is a {type(fn).__name__}, not a function"
    shape = _positional(fn)
    if shape is None:
        return ""  # a builtin or C callable without a signature: its call says
    required, most, kw_required = shape
    if kw_required:
        return f"needs the keyword argument(s) {', '.join(kw_required)}; it must be train(x, y, seed, device)"
    if most < 3 or required > 4:
        return (
            f"takes {required if most == required else f'{required} to {most:g}'} positional argument(s); "
            "it must be train(x, y, seed, device) (or train(x, y, seed))"
        )
    return ""


def takes_device(fn: Any) -> bool:
    """Whether ``fn`` is called with the device (four positional arguments), else with three."""
    shape = _positional(fn)
    return shape is None or shape[1] >= 4


def function_name(fn: Any) -> str:
    """``module:qualified.name`` of ``fn``, as a ``--recipe`` spec would name it."""
    return f"{getattr(fn, '__module__', '?')}:{getattr(fn, '__qualname__', type(fn).__name__)}"


__all__ = ["function_name", "is_training_function", "signature_problem", "takes_device"]
