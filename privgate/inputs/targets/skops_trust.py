"""Which names a ``.skops`` file may make skops import: privgate's allow-list, and the classes the user trusts.

The rest (design, limits, derivations): docs/internals-inputs.md.
"""

from __future__ import annotations

import importlib
import re
import site
import sys
import sysconfig
import types
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from privgate.errors import TargetError, clip, shown
from privgate.inputs.targets import skops_schema
from privgate.inputs.targets.skops_types import allows

#: Modules never trusted, whoever names them: they reach the interpreter, the shell or pickle (most are in the
#: standard library, refused whole; these are not, or are named to say why).
NEVER = frozenset(
    {"builtins", "os", "posix", "nt", "sys", "subprocess", "shutil", "importlib", "runpy", "pickle", "marshal",
     "ctypes", "code", "codeop", "pty", "socket", "operator", "types", "io", "pathlib", "tempfile", "joblib",
     "dill", "cloudpickle", "shelve", "webbrowser", "multiprocessing", "threading", "signal", "gc", "inspect",
     "privgate", "pytest_privgate", "numpy", "scipy", "skops", "torch", "_pytest", "pytest"}
)  # fmt: skip
#: Loaders whose name may be the user's own class (or, for the first two, function).
USER_LOADERS = frozenset(
    {"FunctionNode", "TypeNode", "ObjectNode", "ConstructorFromReduceNode", "DictNode", "ListNode", "SetNode",
     "TupleNode"}
)  # fmt: skip
_FUNCTION_LOADERS = frozenset({"FunctionNode", "TypeNode"})  # skops hands the object back; the model calls it
#: What skops does with a name, by loader (for the refusal); the rest it imports and calls.
_DOES = {
    "ObjectNode": "import and build with its __setstate__",
    "FunctionNode": "import and hand to the model to call",
    "TypeNode": "import and hand to the model",
    "MethodNode": "bind as a method and hand to the model",
    "OperatorFuncNode": "look up in the operator module and call",
}
_NAME = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)+$")
_NOT_MODELS = ("tests", "_testing", "estimator_checks", "externals", "_mocking")


def trusted_names(names: Sequence[str], where: str = "--trust-type") -> tuple[str, ...]:
    """The user's trusted type names, checked as text (module docstring)."""
    out = []
    for name in names:
        if not isinstance(name, str) or not _NAME.match(name.strip()):
            raise TargetError(
                f"{where} {shown(name, 80)}: expected a dotted type name such as 'mymodule.MyTransformer'."
            )
        name = name.strip()
        parts = name.split(".")
        top = parts[0]
        if top in ("numpy", "scipy"):
            raise TargetError(
                f"{where} {shown(name, 80)}: privgate already trusts the {top} types a model holds, and no other."
            )
        if top in NEVER:
            raise TargetError(
                f"{where} {shown(name, 80)}: privgate never trusts '{top}', which can run any code; a model should "
                "not need it."
            )
        if top in sys.stdlib_module_names:
            raise TargetError(
                f"{where} {shown(name, 80)}: '{top}' is the standard library's, which holds no model's types; "
                "privgate never trusts it."
            )
        if top == "sklearn" and any(p in _NOT_MODELS for p in parts):
            raise TargetError(f"{where} {shown(name, 80)}: scikit-learn's test helpers are not a model's types.")
        out.append(name)
    return tuple(dict.fromkeys(out))


@dataclass(frozen=True)
class Vetted:
    """A file every name of which is trusted: ``trusted``, the names to hand skops; ``mine``, the user's names it
    uses → the loaders that use them (for :func:`check_imported`)."""

    trusted: list[str]
    mine: dict[str, set[str]]


def vet(path: Path, trust_types: Sequence[str] = (), most: int = skops_schema.MAX_DECODED) -> Vetted:
    """Check every name ``path`` would make skops import (module docstring); one sentence otherwise.

    Reads the zip's entry sizes and its schema, never an object: nothing is imported.
    """
    mine = set(trusted_names(trust_types))
    found = skops_schema.scan(path, most)
    refused, used = [], {}
    for name, loaders in found.imports.items():
        theirs = {loader for loader in loaders if not allows(loader, name)}
        if name in mine and theirs <= USER_LOADERS:
            used[name] = theirs
        elif theirs:
            refused.append((name, sorted(theirs)))
    if refused:
        raise TargetError(_refusal(path, sorted(refused), mine))
    return Vetted(sorted(set(found.imports) | found.fixed), {n: loaders for n, loaders in used.items() if loaders})


def untrusted_types(path: Path, trust_types: Sequence[str] = (), most: int = skops_schema.MAX_DECODED) -> list[str]:
    """The names to hand skops as trusted once every one is (:func:`vet`); one sentence otherwise."""
    return vet(path, trust_types, most).trusted


def _refusal(path: Path, refused: list[tuple[str, list[str]]], mine: set[str]) -> str:
    name, loaders = refused[0]
    more = f" (and {len(refused) - 1} more: {', '.join(shown(n, 60) for n, _ in refused[1:4])})" if refused[1:] else ""
    could = not (set(loaders) - USER_LOADERS) and name not in mine
    could = could and (not name.startswith("sklearn.") or set(loaders) == {"ObjectNode"})  # only an estimator
    try:
        trusted_names([name])
    except TargetError:
        could = False
    if could:
        return (
            f"{path}: the skops file names the type {shown(name, 100)}{more}, which privgate does not trust: "
            f"loading it would import and run its module's code; if it is yours, trust it with --trust-type "
            f"{clip(name, 100)} (or trust_types in privgate.toml)."
        )
    does = _DOES.get(loaders[0], "import and call")
    return (
        f"{path}: the skops file names {shown(name, 100)} for skops to {does} (a {loaders[0]}){more}, which privgate "
        "never lets a file do with a name outside its allow-list; a model saved by skops.io.dump from scikit-learn "
        "and your own classes does not name it."
    )


def check_imported(loaders: dict[str, set[str]], where: str = "--trust-type") -> None:
    """Each trusted name the file names, imported: a class defined there, or a function of the user's own code.

    Call with the user's modules importable; raises :class:`TargetError` (one sentence) before skops calls anything.
    """
    for name in sorted(loaders):
        module, _, attr = name.rpartition(".")
        try:
            obj = getattr(importlib.import_module(module), attr)
        except Exception as exc:  # noqa: BLE001 - the user's module raises what it raises
            raise TargetError(f"{where} {shown(name, 80)}: cannot be imported ({clip(str(exc), 120)}).") from None
        home = f"{getattr(obj, '__module__', None)}.{getattr(obj, '__qualname__', None)}"
        if isinstance(obj, type) and home == name:
            if module.split(".")[0] == "sklearn" and not _is_estimator_class(obj):
                raise TargetError(f"{where} {shown(name, 80)}: is not a scikit-learn estimator; privgate trusts "
                                  "scikit-learn's other classes by name only.")  # fmt: skip
            continue
        if isinstance(obj, types.FunctionType) and home == name and not _installed(sys.modules[module]):
            if loaders[name] <= _FUNCTION_LOADERS:
                continue
            raise TargetError(
                f"{where} {shown(name, 80)}: is a function, and the file would call it while loading "
                f"(as a {'/'.join(sorted(loaders[name] - _FUNCTION_LOADERS))}); privgate trusts a function only "
                "as a value the model holds."
            )
        what = (
            f"a re-export of {shown(home, 80)}"
            if home != name and isinstance(obj, (type, types.FunctionType))
            else "a function of an installed package"
            if isinstance(obj, types.FunctionType)
            else f"a {type(obj).__name__}, not a class"
        )
        raise TargetError(
            f"{where} {shown(name, 80)}: is {what}; privgate trusts a class by the module that defines it, or a "
            "function of your own code."
        )


def _is_estimator_class(cls: type) -> bool:
    from sklearn.base import BaseEstimator

    return issubclass(cls, BaseEstimator)


def _installed(module: types.ModuleType) -> bool:
    """Whether ``module`` is the standard library's or an installed package's (not the user's own code)."""
    file = getattr(module, "__file__", None)
    if not file:
        return True
    roots = {sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    roots |= {*site.getsitepackages(), site.getusersitepackages()}
    here = Path(file).resolve()
    return any(here.is_relative_to(Path(r).resolve()) for r in roots if r)


__all__ = ["NEVER", "USER_LOADERS", "Vetted", "check_imported", "trusted_names", "untrusted_types", "vet"]
