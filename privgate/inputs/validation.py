"""From a pydantic validation error on a user's YAML file to one sentence: file, line, field, problem.

Validators that check several fields at once (a model-level ``model_validator``)
raise :class:`FieldError` naming the field they are about, so the message
points at that field's line instead of the top of the file; pydantic keeps the
exception in the error's context, and :func:`describe` joins its location to
the location of the model that raised it. An unknown key gets the closest
known key as a suggestion; every user value quoted is cut to a few hundred
characters (:func:`privgate.errors.shown`).
"""

from __future__ import annotations

import enum
import typing
from typing import Any

from pydantic import BaseModel, ValidationError

from privgate.errors import clip, shown
from privgate.inputs.suggest import did_you_mean
from privgate.inputs.yamlsafe import locate

if typing.TYPE_CHECKING:
    import yaml


class FieldError(ValueError):
    """A validation error about one field, located relative to the model whose validator raises it.

    Args:
        loc: the field's path, e.g. ``("checks", 2, "attack")`` or ``"fpr"``.
        message: what is wrong, without the field's name (the message adds it).
    """

    def __init__(self, loc: tuple[Any, ...] | str, message: str) -> None:
        super().__init__(message)
        self.loc: tuple[Any, ...] = (loc,) if isinstance(loc, str) else tuple(loc)


def loc_str(loc: tuple[Any, ...]) -> str:
    """``("checks", 1, "metric")`` → ``checks[1].metric``."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _unwrap(annotation: Any) -> list[Any]:
    """The types inside ``X | None``, ``list[X]``, ``dict[str, X]``."""
    args = typing.get_args(annotation)
    if not args:
        return [annotation]
    origin = typing.get_origin(annotation)
    if origin in (list, tuple, set, frozenset):
        return _unwrap(args[0])
    if origin is dict:
        return _unwrap(args[1])
    return [t for a in args for t in _unwrap(a)]


def _annotation_at(model: type[BaseModel], loc: tuple[Any, ...]) -> Any:
    """The annotation of the field at ``loc`` (list indices skipped), or None when ``loc`` leaves the schema."""
    current: Any = model
    annotation: Any = model
    for part in loc:
        if isinstance(part, int):
            continue
        nested = [t for t in _unwrap(annotation) if isinstance(t, type) and issubclass(t, BaseModel)]
        if not nested or part not in nested[0].model_fields:
            return None
        current = nested[0]
        annotation = current.model_fields[part].annotation
    return annotation


def _fields_at(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    """The keys the model allows at ``loc``."""
    annotation = model if not loc else _annotation_at(model, loc)
    nested = [t for t in _unwrap(annotation) if isinstance(t, type) and issubclass(t, BaseModel)]
    return list(nested[0].model_fields) if nested else []


def _choices_at(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    """The allowed values of an enum or literal field at ``loc``."""
    out: list[str] = []
    for t in _unwrap(_annotation_at(model, loc)):
        if isinstance(t, type) and issubclass(t, enum.Enum):
            out += [str(m.value) for m in t]
        elif typing.get_origin(t) is typing.Literal:
            out += [str(a) for a in typing.get_args(t)]
    return out


def describe(
    exc: ValidationError,
    root: yaml.Node | None,
    source: str,
    model: type[BaseModel],
    moved: dict[str, tuple[str, ...]] | None = None,
) -> str:
    """One sentence for the first error of ``exc`` (an unknown key first): ``source: line N: field 'a.b': problem.``

    Args:
        exc: pydantic's error from validating ``model``.
        root: the YAML node graph of the file (:func:`privgate.inputs.yamlsafe.load_yaml`), for line numbers.
        source: the file name.
        model: the validated model class, for known keys and allowed values.
        moved: fields the file writes elsewhere than the model has them (a recipe's ``training_arguments`` block):
            the model's field → its location in the file, which the sentence names with its line.
    """
    errors = exc.errors()
    # a misspelt key also makes its field "missing": the unknown key, with its suggestion, says more
    err = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
    loc = tuple(err["loc"])
    kind = err["type"]
    msg = str(err["msg"])
    cause = (err.get("ctx") or {}).get("error")
    if isinstance(cause, FieldError):
        loc, msg = loc + cause.loc, str(cause)
    elif msg.startswith("Value error, "):
        msg = msg[len("Value error, ") :]
    model_loc = loc
    if moved and loc and loc[0] in moved:
        loc = moved[loc[0]] + loc[1:]
    line, loc = locate(root, loc)
    where = f"{source}: line {line}:" if line else f"{source}:"
    msg = msg.rstrip(".")
    if kind == "extra_forbidden" and loc:
        parent = loc_str(loc[:-1])
        inside = f" in '{clip(parent)}'" if parent else ""
        return f"{where} unknown key {shown(loc[-1])}{inside}{did_you_mean(loc[-1], _fields_at(model, loc[:-1]))}."
    field = clip(loc_str(loc)) or "(top level)"
    detail = ""
    if kind not in ("value_error", "missing", "assertion_error") and "input" in err:
        detail = f", got {shown(err['input'])}"
        if kind in ("enum", "literal_error"):
            detail += did_you_mean(err["input"], _choices_at(model, model_loc))
    return f"{where} field '{field}': {msg}{detail}."


__all__ = ["FieldError", "describe", "loc_str"]
