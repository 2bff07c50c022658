"""Output-path guards: nothing privgate writes may land on a file the user gave it to read.

Before any work the CLI lists its inputs and outputs, and :func:`check_outputs` refuses, with one sentence and exit
code 2, an output that is an input (after resolving links, ``..`` and hard links), another output or inside one, a
folder, below a file, not a regular file (:func:`special_kind`), a symbolic link (:func:`link_target`; except one to
this process's own stdout/stderr, :func:`stream_of`) or a name too long; and an artefacts folder holding an input.
:func:`refuse_imported` refuses the file of any imported module, called once the entry points are imported and again
by :func:`privgate.io.staging.commit`. Nothing has been written then. Why each rule: ``docs/outputs.md`` and
``docs/internals-training-stats.md``.
"""

from __future__ import annotations

import errno
import importlib.machinery
import importlib.util
import os
import stat
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from privgate.errors import PrivgateError


@dataclass(frozen=True)
class Named:
    """A path and what it is, in the words of a message: ``the JSON report (--json)``."""

    path: Path
    what: str
    folder: bool = False  # an output folder (artefacts) rather than a file


def _real(p: Path) -> str:
    return os.path.realpath(p)


def same_file(a: Path, b: Path) -> bool:
    """Whether ``a`` and ``b`` name one file: the same resolved path, or hard links to one inode."""
    if _real(a) == _real(b):
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them does not exist (yet)
        return False


def inside(child: Path, folder: Path) -> bool:
    """Whether ``child`` lies strictly below ``folder`` (resolved paths)."""
    c, f = _real(child), _real(folder)
    return c != f and c.startswith(f.rstrip(os.sep) + os.sep)


def module_file(module: str, search_dirs: Sequence[str | Path] = ()) -> Path | None:
    """The source file ``import module`` would load, with ``search_dirs`` first on the path, without importing it.

    Searched like :func:`privgate.inputs.entrypoints.load_recipe` imports: ``search_dirs``
    (which it puts first on ``sys.path``), then ``sys.path`` and the installed
    import hooks. Submodules are looked up in their package's folders, so no
    package ``__init__`` runs. None when it cannot be found (the import will
    then fail with its own message) or has no file.
    """
    top, *rest = module.split(".")
    dirs = [str(Path(d).resolve()) for d in search_dirs]
    spec = importlib.machinery.PathFinder.find_spec(top, dirs) if top else None
    if spec is None and top in sys.modules and getattr(sys.modules[top], "__file__", None):
        spec = importlib.util.spec_from_file_location(top, sys.modules[top].__file__)
    if spec is None and top:
        try:
            spec = importlib.util.find_spec(top)  # a top-level name: finds, never imports
        except (ImportError, ValueError):
            spec = None
    name = top
    for part in rest:
        if spec is None or not spec.submodule_search_locations:
            return None
        name = f"{name}.{part}"
        spec = importlib.machinery.PathFinder.find_spec(name, list(spec.submodule_search_locations))
    if spec is None or not spec.origin or not spec.has_location:
        return None
    return Path(spec.origin)


def spec_file(spec: str, role: str, search_dirs: Sequence[str | Path]) -> Named | None:
    """The Python file behind a ``module:attr`` spec, as an input named ``role``."""
    found = module_file(spec.partition(":")[0], search_dirs)
    return Named(found, f"{role}'s module {found.name}") if found else None


def is_factory(spec: str, base: Path) -> bool:
    """Whether a data spec is a ``module:function`` factory rather than a file, as
    :func:`privgate.inputs.data.load_dataset` decides (no such file here or below ``base``, no data suffix)."""
    p = Path(spec)
    candidates = [p] if p.is_absolute() else [p, base / p]
    return ":" in spec and not any(c.exists() for c in candidates) and p.suffix.lower() not in (".npz", ".pt", ".csv")


_KINDS = (
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISDIR, "a folder"),
)


def special_kind(path: str | Path) -> str | None:
    """What ``path`` is when it exists and is not a regular file (``"a FIFO (named pipe)"``, ``"a folder"`` …).

    Symbolic links are followed: a link to a device is a device. None for a
    regular file, a path that does not exist, or one that cannot be examined.
    """
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return None
    if stat.S_ISREG(mode):
        return None
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def name_too_long(path: str | Path) -> str | None:
    """A sentence when a part of ``path`` is longer than its file system allows (``ENAMETOOLONG``), else None."""
    p = Path(path)
    anchor = _first_existing(p.parent) or Path(".")
    try:
        most = os.pathconf(anchor, "PC_NAME_MAX")
    except (OSError, ValueError, AttributeError):
        most = 255
    for part in p.parts:
        size = len(os.fsencode(part))
        if size > most:
            return f"the name '{part[:40]}…' is {size} bytes long, more than the {most} the file system allows"
    try:
        os.stat(p)
    except OSError as exc:
        if exc.errno == errno.ENAMETOOLONG:
            return "the path is longer than the file system allows"
    except ValueError:  # an embedded NUL byte
        return "the path contains a NUL byte"
    return None


def link_target(path: str | Path) -> str | None:
    """What the symbolic link ``path`` points to (its text, cleaned for a message), or None when it is no link."""
    try:
        if not os.path.islink(path):
            return None
        target = os.readlink(path)
    except (OSError, ValueError):
        return None
    from privgate.plaintext import clean

    return clean(target, newlines=False, most=200)


def stream_of(path: str | Path) -> int | None:
    """1 or 2 when ``path`` is a symbolic link to the file this process writes its standard output (or error) to.

    ``/dev/stdout``, ``/dev/fd/1`` and ``/proc/self/fd/1`` are such links, and so is any link whose target is
    the same open file (same device and inode) as file descriptor 1 or 2: a pipe, a terminal or a regular file.
    A path that is no link is never a stream, even when stdout is redirected onto it.
    """
    try:
        if not os.path.islink(path):
            return None
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    for fd in (1, 2):
        try:
            own = os.fstat(fd)
        except OSError:
            continue
        if (own.st_dev, own.st_ino) == (st.st_dev, st.st_ino):
            return fd
    return None


def refuse_special(path: str | Path, what: str) -> None:
    """Raise the sentence of :func:`check_outputs` when ``path`` is a special file, a link or an impossible name.

    A link to this process's standard output or error (:func:`stream_of`) is allowed: it is written as a stream.
    """
    p = Path(path)
    long = name_too_long(p)
    if long:
        raise _refuse(p, f"{what} cannot be written: {long}")
    if stream_of(p) is not None:
        return
    kind = special_kind(p)
    if kind == "a folder":
        raise _refuse(p, f"{what} is a folder; give a file path")
    if kind:
        raise _refuse(p, f"{what} exists and is {kind}, not a regular file; privgate leaves it alone")
    target = link_target(p)
    if target is not None:
        raise _refuse(
            p,
            f"{what} is a symbolic link (to {target}); privgate never replaces a link with a file nor writes "
            f"through one, so name the file itself (or /dev/stdout for standard output)",
        )


def _exists(p: Path) -> bool:
    try:
        return p.exists()
    except (OSError, ValueError):  # a name too long, a NUL byte: it does not exist
        return False


def _first_existing(p: Path) -> Path | None:
    for d in (p, *p.parents):
        if _exists(d):
            return d
    return None


def _refuse(path: Path, sentence: str) -> PrivgateError:
    return PrivgateError(f"{path}: {sentence}, and nothing was written.")


def check_outputs(outputs: Iterable[Named], inputs: Iterable[Named]) -> None:
    """Refuse an output that is an input, another output, inside another output, a folder, or below a file.

    Raises:
        PrivgateError: one sentence naming the path, what it is and what it collides with.
    """
    outs = list(outputs)
    ins = [i for i in inputs if _exists(i.path)]
    for o in outs:
        for i in ins:
            if same_file(o.path, i.path):
                raise _refuse(
                    o.path, f"{o.what} would overwrite an input, {i.what} ({i.path}); refusing to overwrite it"
                )
        if o.folder:
            long = name_too_long(o.path)
            if long:
                raise _refuse(o.path, f"{o.what} cannot be created: {long}")
            if _exists(o.path) and not o.path.is_dir():
                kind = special_kind(o.path)
                raise _refuse(o.path, f"{o.what} must be a folder, but this is {kind or 'a file'}")
            for i in ins:
                if inside(i.path, o.path):
                    raise _refuse(
                        o.path,
                        f"{o.what} holds an input, {i.what} ({i.path}), and privgate writes files there; "
                        f"choose another folder",
                    )
        else:
            refuse_special(o.path, o.what)
        anchor = _first_existing(o.path.parent)
        if anchor is not None and not anchor.is_dir():
            raise _refuse(o.path, f"{o.what} cannot be created, because {anchor} is a file, not a folder")
    for n, a in enumerate(outs):
        for b in outs[n + 1 :]:
            if same_file(a.path, b.path):
                raise _refuse(b.path, f"given as both {a.what} and {b.what}; each output needs its own path")
            for outer, inner in ((a, b), (b, a)):
                if inside(inner.path, outer.path):
                    where = "where attack files are written" if outer.folder else "which is a file"
                    raise _refuse(
                        inner.path,
                        f"{inner.what} lies inside {outer.path}, {outer.what}, {where}; choose a path outside it",
                    )


def _file_id(path: str | Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return st.st_dev, st.st_ino


#: Where installed modules live: the interpreter's own library and any site-packages.
_INSTALLED = (os.path.realpath(sys.base_prefix), os.path.realpath(sys.prefix))


def _installed_file(file: str) -> bool:
    return file.startswith(_INSTALLED) or "site-packages" in file or "dist-packages" in file


def refuse_imported(outputs: Iterable[Named]) -> None:
    """Refuse an output that is the file of a Python module this process has imported (its ``__file__``).

    The user's project modules are among them, however they were reached (the
    recipe's ``import defs``, a factory's helper); so are installed ones, which
    no report may overwrite either. Files are compared by device and inode, so
    symlinks count, and hard links to a project module; an installed module
    (thousands once torch is loaded) is only looked at when its file name is
    the output's. Outputs that do not exist yet cannot be a module and cost nothing.

    Raises:
        PrivgateError: one sentence naming the output, the module and its file.
    """
    existing: dict[tuple[int, int], Named] = {}
    for o in outputs:
        key = None if o.folder else _file_id(o.path)
        if key is not None:
            existing.setdefault(key, o)
    if not existing:
        return
    names = {os.path.basename(_real(o.path)) for o in existing.values()}
    names |= {o.path.name for o in existing.values()}
    for name, module in sorted(sys.modules.items(), key=lambda item: item[0] == "__main__"):
        file = getattr(module, "__dict__", {}).get("__file__")  # not getattr: a lazy module would import itself
        if not isinstance(file, str) or (_installed_file(file) and os.path.basename(file) not in names):
            continue
        hit = existing.get(_file_id(file))
        if hit is not None:
            raise _refuse(
                hit.path,
                f"{hit.what} would overwrite an input, the Python module '{name}' the run imported ({file}); "
                f"refusing to overwrite it",
            )


__all__ = [
    "Named",
    "check_outputs",
    "inside",
    "is_factory",
    "link_target",
    "module_file",
    "name_too_long",
    "refuse_imported",
    "refuse_special",
    "same_file",
    "spec_file",
    "special_kind",
    "stream_of",
]
