"""The source files the user's code can run, for cache keys: every project module its imports reach, bounded.

:func:`code_of` lists the functions and classes a recipe holds (a training function, a model factory,
an ``Augment``'s transform, an estimator's class and the callables among its parameters);
:func:`project_sources` reads their modules' ``import`` statements — at top level or inside functions,
absolute or relative, and ``importlib.import_module("literal")`` — and follows them through the
project's files, transitively. Installed packages and the standard library end the walk and enter by name
and version. The walk is bounded (:data:`MAX_FILES`, :data:`MAX_BYTES`); past the bound it says so
(:class:`Uncovered`). What no walk sees is in docs/threat-model.md ("The cache").
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import hashlib
import importlib.machinery
import importlib.metadata
import marshal
import site
import sys
import sysconfig
import threading
import types
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: ``ast.parse`` one thread at a time: CPython 3.11's AST constructor keeps its recursion depth in shared state, and
#: two threads parsing at once can fail with "AST constructor recursion depth mismatch" (cpython gh-106905)
_PARSE = threading.Lock()

#: Top-level packages that are privgate, not the user's project (their changes are the engine's version).
OWN_PACKAGES = ("privgate", "pytest_privgate")
#: Most project files one key reads, and most bytes in all.
MAX_FILES = 2000
MAX_BYTES = 64 << 20
#: Most objects :func:`code_of` looks into.
MAX_OBJECTS = 10_000
_SCALARS = (str, bytes, int, float, complex, bool, type(None), range, slice)
_IMPORTERS = ("import_module", "__import__")


class Uncovered(Exception):  # noqa: N818 - a state, not a failure: the cache is skipped, the run goes on
    """The code a recipe reaches is larger than the walk's bounds, so no key covers it (the message says so)."""


@dataclass(frozen=True)
class Sources:
    """What a key covers: the project files (labels relative to their import folder), the packages and the digest."""

    files: tuple[str, ...]
    packages: tuple[str, ...]
    digest: str


@functools.lru_cache(maxsize=1)
def installed_roots() -> tuple[Path, ...]:
    """Folders of the standard library and of installed packages (site-packages, the user's site)."""
    paths = [sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")]
    paths += site.getsitepackages() if hasattr(site, "getsitepackages") else []
    user = site.getusersitepackages() if hasattr(site, "getusersitepackages") else None
    paths += [user] if isinstance(user, str) else []
    return tuple(dict.fromkeys(Path(p).resolve() for p in paths if p))


def _installed(path: Path) -> bool:
    return any(f == path or f in path.parents for f in installed_roots()) or bool(
        {"site-packages", "dist-packages"} & set(path.parts)
    )


@functools.lru_cache(maxsize=1)
def _providers() -> dict[str, str]:
    """Top-level module -> the version of the installed distribution whose files (its RECORD) hold it."""
    out: dict[str, str] = {}
    for dist in importlib.metadata.distributions():
        version = dist.version
        for line in (dist.read_text("RECORD") or "").splitlines():
            out.setdefault(line.split(",", 1)[0].split("/", 1)[0].removesuffix(".py"), version)
    return out


@functools.lru_cache(maxsize=256)
def package_version(top: str) -> str:
    """``top version``: the version of the installed distribution that provides the top-level module ``top``.

    Its distribution of the same name, else the loaded module's ``__version__``, else the distribution whose
    files hold it (every installed distribution's RECORD read once, about a second).
    """
    try:
        return f"{top} {importlib.metadata.version(top)}"
    except (importlib.metadata.PackageNotFoundError, ValueError):
        pass
    loaded = getattr(sys.modules.get(top), "__version__", None)
    return f"{top} {loaded if isinstance(loaded, str) else _providers().get(top, '?')}"


def code_of(value: Any, most: int = MAX_OBJECTS) -> list[Any]:
    """The functions, classes and modules ``value`` holds, looked into field by field.

    Dataclass fields, dicts, sequences, ``functools.partial``, bound methods, a
    function's closure and defaults, a torch module's submodules, a
    scikit-learn estimator's ``get_params(deep=False)`` and the attributes of
    an object of the project's own class; any other object counts by its class.

    Raises:
        Uncovered: ``value`` holds more than ``most`` objects.
    """
    found: list[Any] = []
    seen: dict[int, Any] = {}  # by id, each object held so that no id is reused while the walk runs
    todo = [value]
    while todo:
        v = todo.pop()
        if isinstance(v, _SCALARS) or id(v) in seen:
            continue
        if len(seen) >= most:
            raise Uncovered(f"the recipe holds more than {most} objects")
        seen[id(v)] = v
        if isinstance(v, (type, types.FunctionType, types.BuiltinFunctionType, types.ModuleType)):
            found.append(v)
            if isinstance(v, types.FunctionType):
                todo += [c.cell_contents for c in v.__closure__ or () if _filled(c)]
                todo += [*(v.__defaults__ or ()), *(v.__kwdefaults__ or {}).values()]
        elif isinstance(v, types.MethodType):
            todo += [v.__func__, v.__self__]
        elif isinstance(v, functools.partial):
            todo += [v.func, *v.args, *v.keywords.values()]
        elif isinstance(v, dict):
            todo += [*v.keys(), *v.values()]
        elif isinstance(v, (list, tuple, set, frozenset)):
            todo += list(v)
        else:
            found.append(type(v))
            if callable(getattr(v, "named_modules", None)):  # a torch module: its submodules, not its tensors
                todo += _submodules(v)
            elif dataclasses.is_dataclass(v):
                todo += [getattr(v, f.name) for f in dataclasses.fields(v)]
            else:
                todo += _params(v) + (list(getattr(v, "__dict__", {}).values()) if _own_class(type(v)) else [])
    return found


@functools.lru_cache(maxsize=1024)
def _own_class(cls: type) -> bool:
    """Whether ``cls`` is defined in a file of the user's: not installed, not privgate's."""
    name, file = _origin(cls)
    return file is not None and not _installed(file) and name.split(".")[0] not in OWN_PACKAGES


def _filled(cell: Any) -> bool:
    try:
        cell.cell_contents  # noqa: B018 - an empty cell raises
    except ValueError:
        return False
    return True


def _params(estimator: Any) -> list[Any]:
    if not callable(getattr(estimator, "get_params", None)):
        return []
    try:
        return list(estimator.get_params(deep=False).values())
    except Exception:  # noqa: BLE001 - a foreign estimator whose parameters cannot be listed counts by its class
        return []


def _submodules(net: Any) -> list[Any]:
    try:
        return [m for _, m in list(net.named_modules())[1:]]
    except Exception:  # noqa: BLE001 - an object with a named_modules that is not torch's
        return []


def _origin(obj: Any) -> tuple[str, Path | None]:
    """The module name and the source file (None when it has none) of a function, class or module."""
    if isinstance(obj, types.ModuleType):
        name, file = obj.__name__, getattr(obj, "__file__", None)
    else:
        name = getattr(obj, "__module__", None) or "?"
        code = getattr(obj, "__code__", None)
        file = code.co_filename if code is not None else getattr(sys.modules.get(name), "__file__", None)
    path = Path(file) if file else None
    return name, path.resolve() if path is not None and path.is_file() else None


def _import_folder(module: str, file: Path) -> Path:
    """The folder ``module`` was imported from: ``file``'s folder, up one per package level."""
    up = module.count(".") + (file.name == "__init__.py")
    folder = file.parent
    for _ in range(up if module != "__main__" else 0):
        folder = folder.parent
    return folder


def _imports(tree: ast.AST) -> Iterable[tuple[int, str, list[str]]]:
    """(level, module, names) of every import in ``tree``: statements anywhere, and import_module("literal")."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield 0, alias.name, []
        elif isinstance(node, ast.ImportFrom):
            yield node.level, node.module or "", [a.name for a in node.names if a.name != "*"]
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            fn = node.func
            name = fn.attr if isinstance(fn, ast.Attribute) else fn.id if isinstance(fn, ast.Name) else ""
            target = node.args[0].value
            if name in _IMPORTERS and isinstance(target, str) and target and not target.startswith("."):
                yield 0, target, []


def _in_folder(folder: Path, parts: Sequence[str]) -> list[Path]:
    """The files ``import a.b`` loads below ``folder`` (packages' ``__init__.py`` and the module), as far as found."""
    out: list[Path] = []
    for i, part in enumerate(parts):
        pkg = folder / part
        if (pkg / "__init__.py").is_file():
            out.append(pkg / "__init__.py")
        elif i == len(parts) - 1:
            hits = [f for f in (folder / f"{part}.py", *folder.glob(f"{part}.*.so")) if f.is_file()]
            out += hits[:1]
            break
        elif not pkg.is_dir():  # neither a package nor a namespace folder
            break
        folder = pkg
    return out


class _Walk:
    """One breadth-first walk over the project's files (module docstring)."""

    def __init__(self, folders: list[Path], max_files: int, max_bytes: int):
        self.folders, self.max_files, self.max_bytes = folders, max_files, max_bytes
        self.files: dict[Path, str] = {}  # file -> the SHA-256 of its bytes
        self.packages: set[str] = set()
        self.size = 0
        self.queue: list[tuple[Path, bytes]] = []  # Python files still to read the imports of
        self.tops: dict[str, Path | None] = {}

    def add(self, file: Path) -> None:
        """Key ``file``'s bytes and read its imports later (a project file: not installed, not yet seen)."""
        file = file.resolve()
        if file in self.files or _installed(file):
            return
        if len(self.files) >= self.max_files:
            raise Uncovered(f"it reaches more than {self.max_files} project files")
        try:
            data = file.read_bytes()
        except OSError as exc:
            raise Uncovered(f"{file} cannot be read ({exc.__class__.__name__})") from None
        self.size += len(data)
        if self.size > self.max_bytes:
            most = f"{self.max_bytes >> 20} MiB" if self.max_bytes >= 1 << 20 else f"{self.max_bytes} bytes"
            raise Uncovered(f"it reaches more than {most} of project files")
        self.files[file] = hashlib.sha256(data).hexdigest()
        if file.suffix == ".py":
            self.queue.append((file, data))

    def absolute(self, name: str, names: list[str]) -> None:
        """``import name`` / ``from name import names``: the project's files of it, or the package's version."""
        top, *rest = name.split(".")
        if not top or top in sys.stdlib_module_names or top in sys.builtin_module_names or top in OWN_PACKAGES:
            return
        where = self._top(top)
        if where is None:
            return  # not found: the import fails at run time, or makes its module in a way no file shows
        if _installed(where):
            self.packages.add(package_version(top))
            return
        folder = where.parent.parent if where.name == "__init__.py" else where.parent
        if where.is_file():
            self.add(where)
        for parts in [rest, *([*rest, n] for n in names)]:
            for f in _in_folder(folder, [top, *parts]):
                self.add(f)

    def _top(self, top: str) -> Path | None:
        """Where the top-level module ``top`` lives: the project's folders first, then what Python would import."""
        if top not in self.tops:
            found = None
            try:
                spec = importlib.machinery.PathFinder.find_spec(top, [str(d) for d in self.folders])
                loaded = getattr(sys.modules.get(top), "__file__", None)
                if spec is None and loaded:
                    found = Path(loaded).resolve()
                elif spec is None:
                    spec = importlib.machinery.PathFinder.find_spec(top)
            except (ImportError, ValueError):
                spec = None
            if found is None and spec is not None:
                if spec.origin and spec.has_location:
                    found = Path(spec.origin).resolve()
                elif spec.submodule_search_locations:  # a namespace package: its folder
                    found = Path(next(iter(spec.submodule_search_locations))).resolve()
            self.tops[top] = found
        return self.tops[top]

    def relative(self, file: Path, level: int, module: str, names: list[str]) -> None:
        """``from .module import names`` in ``file``: the package's ``__init__.py``, the module, each name's module."""
        folder = file.parent
        for _ in range(level - 1):
            folder = folder.parent
        parts = module.split(".") if module else []
        for f in (folder / "__init__.py", *_in_folder(folder, parts)):
            if f.is_file():
                self.add(f)
        for n in names:
            for f in _in_folder(folder, [*parts, n]):
                self.add(f)

    def run(self) -> None:
        while self.queue:
            file, data = self.queue.pop(0)
            try:
                with _PARSE:
                    tree = ast.parse(data, filename=str(file))
            except (SyntaxError, ValueError):
                continue  # it cannot be imported either; its bytes are keyed
            for level, module, names in _imports(tree):
                if level:
                    self.relative(file, level, module, names)
                else:
                    self.absolute(module, names)

    def label(self, file: Path) -> str:
        """``file`` relative to the folder it is imported from, so a key does not depend on where the project lies."""
        for d in self.folders:
            if d in file.parents:
                return file.relative_to(d).as_posix()
        return file.name


def _compiled(obj: Any, module: str) -> bytes:
    """What stands in for the source of code that has no file: its compiled code, else its qualified name."""
    code = getattr(obj, "__code__", None)
    try:
        if code is not None:
            return marshal.dumps(code)
    except ValueError:  # a code object marshal cannot write
        pass
    return f"{module}.{getattr(obj, '__qualname__', type(obj).__qualname__)}".encode()


def project_sources(
    roots: Iterable[Any],
    folders: Sequence[Path] = (),
    max_files: int | None = None,
    max_bytes: int | None = None,
) -> Sources:
    """The project files ``roots`` (functions, classes, modules) reach through imports, and their digest.

    Args:
        roots: what the key is of (:func:`code_of`).
        folders: more folders the project imports from, after those the roots' own modules were
            imported from and before the working directory.
        max_files, max_bytes: the walk's bounds (default :data:`MAX_FILES`, :data:`MAX_BYTES`).

    Raises:
        Uncovered: past :data:`MAX_FILES` files or :data:`MAX_BYTES` bytes, or a project file that cannot be read.
    """
    found: list[tuple[str, Path | None, Any]] = []
    for obj in roots:
        name, file = _origin(obj)
        found.append((name, file, obj))
    imported = [_import_folder(n, f) for n, f, _ in found if f is not None and not _installed(f)]
    walk = _Walk(
        list(dict.fromkeys([*imported, *(Path(d).resolve() for d in folders), Path.cwd().resolve()])),
        MAX_FILES if max_files is None else max_files,
        MAX_BYTES if max_bytes is None else max_bytes,
    )
    unfiled: list[bytes] = []
    for name, file, obj in found:
        top = name.split(".")[0]
        if top in OWN_PACKAGES or top in sys.stdlib_module_names or top in sys.builtin_module_names:
            continue
        if file is None:  # made at run time (exec, a notebook) or native: its compiled code or its name stands in
            unfiled.append(_compiled(obj, name))
        elif _installed(file):
            walk.packages.add(package_version(top))
        else:
            walk.add(file)
    walk.run()
    h = hashlib.sha256(b"sources1|")
    labelled = sorted((walk.label(f), sha) for f, sha in walk.files.items())
    for label, sha in labelled:
        h.update(f"{label}={sha}|".encode())
    for p in sorted(walk.packages):
        h.update(f"{p}|".encode())
    for code in sorted(unfiled):
        h.update(hashlib.sha256(code).digest())
    return Sources(tuple(label for label, _ in labelled), tuple(sorted(walk.packages)), h.hexdigest())


def key_or_warning(fingerprint: Callable[[Any], str], recipe: Any) -> tuple[str, list[str]]:
    """``(fingerprint(recipe), [])``; or, past the walk's bounds, no key and the warning that the cache was skipped."""
    try:
        return fingerprint(recipe), []
    except Uncovered as exc:
        return "", [
            f"the reference-model cache was not used: {exc}, more than a cache key covers "
            "(privgate.io.sources), so the reference models were trained"
        ]


__all__ = [
    "MAX_BYTES",
    "MAX_FILES",
    "OWN_PACKAGES",
    "Sources",
    "Uncovered",
    "code_of",
    "installed_roots",
    "key_or_warning",
    "package_version",
    "project_sources",
]
