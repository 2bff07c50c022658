"""Importing ``module:attr`` entry points (recipes, data factories) from the user's project, and only from there.

The rest (design, limits, derivations): docs/internals-inputs.md.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from privgate.errors import DataError, PrivgateError, RecipeError, clip
from privgate.io.sources import OWN_PACKAGES, installed_roots

if TYPE_CHECKING:  # the recipe module loads torch; importing an entry point does not need it
    from privgate.recipe import Recipe

_SPEC = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")


def _inside(path: Path, folders: list[Path]) -> bool:
    return any(path == f or f in path.parents for f in folders)


def _evict_if_elsewhere(top: str, search_dirs: list[Path]) -> None:
    """Forget a cached module named ``top`` when the search folders hold a different file of that name.

    Two projects with a ``recipe.py`` (or ``data.py``) audited in one process
    must not get each other's module from ``sys.modules``.
    """
    for d in search_dirs:
        for candidate in (d / f"{top}.py", d / top / "__init__.py"):
            if candidate.is_file():
                cached = sys.modules.get(top)
                cached_file = _module_file(cached)
                if cached is not None and cached_file != candidate.resolve():
                    for name in [m for m in sys.modules if m == top or m.startswith(top + ".")]:
                        del sys.modules[name]
                return


def _module_file(module: Any) -> Path | None:
    f = getattr(module, "__file__", None)
    return Path(f).resolve() if f else None


def _origin(found: Any) -> Path | None:
    """The resolved file a module spec would load (``None`` for no spec or a namespace package)."""
    return Path(found.origin).resolve() if found is not None and found.origin else None


def _importable_from(top: str) -> Path | None:
    """Where ``top`` would be imported from on ``sys.path`` (found, not imported), whether or not this process has
    imported it yet: a refused run must say "installed package" before anything loaded numpy or pandas."""
    try:
        return _origin(importlib.machinery.PathFinder.find_spec(top))
    except (ImportError, ValueError):
        return None


def _refuse_not_in_project(
    top: str, dirs: list[Path], installed: list[Path], head: str, kind: str, error: type[PrivgateError]
) -> None:
    """Refuse a top-level module that is not the project's own: the standard library, privgate, an installed package
    (found in the project's folders or not), or one missing there."""
    where = clip(", ".join(str(d) for d in dirs), 300)
    if top in sys.stdlib_module_names or top in sys.builtin_module_names:
        if importlib.machinery.PathFinder.find_spec(top, [str(d) for d in dirs]) is not None:
            raise error(
                f"{head}: your module '{top}' has the name of a module of Python's standard library; rename it."
            )
        raise error(
            f"{head}: '{top}' is a module of Python's standard library; a {kind} must be defined in your "
            f"project ({where})."
        )
    if top in OWN_PACKAGES:
        raise error(f"{head}: '{top}' is privgate itself; a {kind} must be defined in your project ({where}).")
    found = importlib.machinery.PathFinder.find_spec(top, [str(d) for d in dirs])
    origin = _origin(found)
    if found is None or (origin is not None and _inside(origin, installed)):
        elsewhere = _module_file(sys.modules.get(top)) or _importable_from(top)
        if elsewhere is not None and _inside(elsewhere, installed):
            raise error(
                f"{head}: '{top}' is an installed package, not a module of your project ({where}); privgate "
                f"imports a {kind} only from your project."
            )
        raise error(f"{head}: no module '{top}' in {where}.")
    cached = _module_file(sys.modules.get(top))
    if cached is not None and _inside(cached, installed):
        raise error(
            f"{head}: your module '{top}' has the name of an installed package that is already in use; rename it."
        )


def _import_from(mod_name: str, dirs: list[Path], installed: list[Path], head: str, error: type[PrivgateError]) -> Any:
    """Import ``mod_name`` with the project's folders first on ``sys.path`` (for this import only); the module must
    come from them."""
    top = mod_name.split(".")[0]
    _evict_if_elsewhere(top, dirs)
    added = [str(d) for d in dirs if str(d) not in sys.path]
    sys.path[:0] = added
    # no __pycache__ left in the user's project: the import compiles its modules in memory only
    writes, sys.dont_write_bytecode = sys.dont_write_bytecode, True
    try:
        module = importlib.import_module(mod_name)
    except PrivgateError as exc:  # privgate's own sentence (a Recipe refused its settings): passed on as said
        raise type(exc)(f"{head}: {exc}") from None
    except (Exception, SystemExit) as exc:  # an import runs user code: report any failure in one sentence
        raise error(
            f"{head}: cannot import module '{mod_name}' ({exc.__class__.__name__}: {clip(str(exc), 200)})."
        ) from None
    finally:
        sys.dont_write_bytecode = writes
        for d in added:
            if d in sys.path:
                sys.path.remove(d)
    file = _module_file(module)
    if file is None or not _inside(file, dirs) or _inside(file, installed):
        where = clip(", ".join(str(d) for d in dirs), 300)
        raise error(
            f"{head}: module '{mod_name}' was imported from {file or 'no file'}, outside your project ({where})."
        )
    return module


def _attribute(module: Any, mod_name: str, attr: str, head: str, kind: str, error: type[PrivgateError]) -> Any:
    """``module.attr`` (dotted); no dunder on the way, and a callable must be defined in the project's module."""
    top = mod_name.split(".")[0]
    obj: Any = module
    for part in attr.split("."):
        if part.startswith("__") and part.endswith("__"):
            raise error(f"{head}: '{part}' is a Python internal attribute, not a {kind}.")
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise error(f"{head}: module '{mod_name}' has no attribute '{attr}'.") from None
    if callable(obj):
        defined_in = getattr(obj, "__module__", None)
        if not isinstance(defined_in, str) or not (defined_in == top or defined_in.startswith(top + ".")):
            raise error(
                f"{head}: '{attr}' is defined in "
                f"{f'module {defined_in!r}' if isinstance(defined_in, str) else 'no module'}, "
                f"not in your project's '{mod_name}'; privgate calls only functions defined in your project."
            )
    return obj


def is_entry_spec(value: str) -> bool:
    """Whether ``value`` has the form of a ``module:attr`` entry point (what :func:`import_entry` would import)."""
    return bool(_SPEC.match(value.strip()))


def import_entry(spec: str, search_dirs: list[Path], kind: str, error: type[PrivgateError]) -> Any:
    """Import ``module:attr`` from the user's project; see the module docstring for what is refused.

    Args:
        spec: ``module:attr``, the attribute possibly dotted.
        search_dirs: the project's folders, searched in order.
        kind: what the entry point is, for messages (``"recipe"``, ``"data factory"``).
        error: the :class:`PrivgateError` subclass to raise.

    Returns:
        The attribute; when it is callable, it is defined in the user's project.
    """
    head = f"{kind} {clip(repr(spec), 200)}"
    if not _SPEC.match(spec):
        example = "recipe:RECIPE" if kind == "recipe" else "data:members"
        raise error(f"{head}: expected 'module:attribute' (e.g. '{example}').")
    mod_name, _, attr = spec.partition(":")
    dirs = list(dict.fromkeys(Path(d).resolve() for d in search_dirs))
    installed = list(installed_roots())
    _refuse_not_in_project(mod_name.split(".")[0], dirs, installed, head, kind, error)
    module = _import_from(mod_name, dirs, installed, head, error)
    return _attribute(module, mod_name, attr, head, kind, error)


def load_recipe(spec: str | Any, search_dirs: list[Path] | None = None) -> Recipe:
    """Import a recipe from ``module:attr`` in the user's project (``search_dirs``, then the working directory).

    The attribute must be a :class:`Recipe`, a function of the project that
    returns one (called with no argument), or the project's own training
    function ``train(x, y, seed, device) -> nn.Module`` — told apart here, by
    its arguments, and wrapped as ``Recipe(train_fn=train)`` named by the spec
    (:mod:`privgate.training.function`). Anything else — a standard-library or
    installed module's function such as ``os:abort`` — is refused before it is
    called (:func:`privgate.inputs.entrypoints.import_entry`). Library callers
    may pass the training function itself instead of a spec.
    """
    from privgate.recipe import Recipe
    from privgate.recipe.signature import function_name, is_training_function
    from privgate.tree_recipe import TreeRecipe

    if not isinstance(spec, str):  # a library caller's own training function (privgate.api.as_recipe)
        if not is_training_function(spec):
            raise RecipeError(
                f"recipe {clip(repr(spec), 200)}: expected a privgate.Recipe, a 'module:attribute' spec or a "
                "training function train(x, y, seed, device)."
            )
        return Recipe(train_fn=spec, name=function_name(spec))
    obj = import_entry(spec, list(search_dirs or []) + [Path.cwd()], "recipe", RecipeError)
    if is_training_function(obj):
        return Recipe(train_fn=obj, name=spec)
    from privgate.inputs.targets.sklearn import is_estimator
    from privgate.sklearn_recipe import SklearnRecipe

    if is_estimator(obj) and not isinstance(obj, type):  # an unfitted scikit-learn estimator: its clones
        return SklearnRecipe(obj, name=spec)  # type: ignore[return-value]
    if callable(obj) and not isinstance(obj, (Recipe, TreeRecipe)):
        try:
            obj = obj()
        except Exception as exc:
            raise RecipeError(
                f"recipe '{clip(spec)}': calling it failed ({exc.__class__.__name__}: {clip(str(exc))})."
            ) from None
    if is_estimator(obj) and not isinstance(obj, type):  # a function of the project that returns an estimator
        return SklearnRecipe(obj, name=spec)  # type: ignore[return-value]
    if not isinstance(obj, (Recipe, TreeRecipe)):
        raise RecipeError(
            f"recipe '{clip(spec)}': is a {type(obj).__name__}, expected a privgate.Recipe, a privgate.TreeRecipe, "
            "a scikit-learn estimator or a training function train(x, y, seed, device) -> nn.Module."
        )
    return obj


def import_factory(spec: str, search_dirs: list[Path] | None = None) -> Any:
    """Import a data factory ``module:function`` from the user's project (see :func:`load_recipe`); not called here."""
    return import_entry(spec, list(search_dirs or []) + [Path.cwd()], "data factory", DataError)


def import_modules(recipe: str | None, factories: list[str], search_dirs: list[Path]) -> None:
    """Import the modules of a run's recipe and data factories now, calling nothing.

    The loaders import them again from ``sys.modules`` (the same file, so
    their top-level code runs once). Importing them first lets the output guard
    see every project module they import (:func:`privgate.io.guards.refuse_imported`)
    before any work is done.
    """
    dirs = list(search_dirs) + [Path.cwd()]
    if recipe:
        import_entry(recipe, dirs, "recipe", RecipeError)
    for spec in factories:
        import_entry(spec, dirs, "data factory", DataError)


__all__ = ["OWN_PACKAGES", "import_entry", "import_factory", "import_modules", "is_entry_spec", "load_recipe"]
