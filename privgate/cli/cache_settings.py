"""Where the CLI keeps the reference-model cache, and the secret key that authenticates its entries.

Folder: ``--cache-dir``, else ``$PRIVGATE_CACHE_DIR``, else the config's ``cache_dir``, else
``$XDG_CACHE_HOME/privgate`` (``off`` turns the cache off). Key (HMAC-SHA256 tags,
:mod:`privgate.training.cache`): ``--cache-key-file`` / ``$PRIVGATE_CACHE_KEY_FILE``, else
``$PRIVGATE_CACHE_KEY``, else the user's ``$XDG_CONFIG_HOME/privgate/cache-key``, created on first use. A key
shorter than :data:`MIN_KEY_BYTES`, or a key file that is not a regular file or exceeds
:data:`MAX_KEY_FILE_BYTES`, is exit 2. The key never comes from the config file (repository content), nor
lives in the cache folder. The reasons and edge cases: docs/threat-model.md, docs/internals-core.md.
"""

from __future__ import annotations

import os
import secrets
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from privgate.cli.guard import Environment, err_console, process_environment
from privgate.errors import PrivgateError
from privgate.io.atomic import temp_name
from privgate.options import CACHE_OFF

#: The fewest bytes a cache key may have (64 hex digits, or 32 random bytes, are what privgate writes).
MIN_KEY_BYTES = 32
#: The most bytes a key file may hold: a key is 32 to a few hundred bytes.
MAX_KEY_FILE_BYTES = 4096
#: The name of the user's key file, in ``$XDG_CONFIG_HOME/privgate/``.
KEY_FILE_NAME = "cache-key"
_MAKE_KEY = 'python -c "import secrets; print(secrets.token_hex(32))"'
_DELETE = "delete the file: privgate creates a new one"
_NAMED, _USERS = "the cache key file named by --cache-key-file", "the user's cache key file"


def cache_options(config_key: bool = False) -> Callable[[Any], Any]:
    """``--cache-dir`` and ``--cache-key-file``; ``config_key``: the command also reads the config's ``cache_dir``."""
    also = ", else the config's 'cache_dir'" if config_key else ""

    def add(fn: Any) -> Any:
        fn = click.option(
            "--cache-key-file",
            "cache_key_file",
            type=click.Path(dir_okay=False),
            envvar="PRIVGATE_CACHE_KEY_FILE",
            show_envvar=True,
            help="File holding the secret key that authenticates cache entries (at least 32 bytes; keep it out of "
            "the repository). This flag, else $PRIVGATE_CACHE_KEY_FILE, else $PRIVGATE_CACHE_KEY (the key itself, "
            "e.g. a CI secret), else $XDG_CONFIG_HOME/privgate/cache-key, created on first use. Never from the "
            "config file.",
        )(fn)
        return click.option(
            "--cache-dir",
            type=click.Path(file_okay=False),
            envvar="PRIVGATE_CACHE_DIR",
            show_envvar=True,
            help="Where trained reference models are cached (default: the user's cache folder, "
            "$XDG_CACHE_HOME/privgate or ~/.cache/privgate; 'off' for none). This flag, else "
            f"$PRIVGATE_CACHE_DIR{also}. Entries without a valid tag for the cache key are retrained, with a warning.",
        )(fn)

    return add


def _home() -> Path | None:
    try:
        return Path.home()
    except (RuntimeError, KeyError):  # no $HOME and no passwd entry
        return None


def _xdg(value: str | None, fallback: str) -> Path | None:
    """An XDG base directory: ``value`` when it is an absolute path, else ``~/fallback`` (None without a home)."""
    if value and Path(value).is_absolute():
        return Path(value)
    home = _home()
    return home / fallback if home is not None else None


def default_cache_dir(env: Environment) -> Path | None:
    """The user's cache folder for privgate: ``$XDG_CACHE_HOME/privgate`` or ``~/.cache/privgate``."""
    base = _xdg(env.xdg_cache_home, ".cache")
    return base / "privgate" if base is not None else None


def default_key_file(env: Environment) -> Path | None:
    """The user's key file: ``$XDG_CONFIG_HOME/privgate/cache-key`` or ``~/.config/privgate/cache-key``."""
    base = _xdg(env.xdg_config_home, ".config")
    return base / "privgate" / KEY_FILE_NAME if base is not None else None


def _checked(key: bytes, where: str, fix: str) -> bytes:
    key = key.strip()
    if len(key) < MIN_KEY_BYTES:
        raise PrivgateError(
            f"{where}: a cache key needs at least {MIN_KEY_BYTES} bytes, this one has {len(key)} ({fix})."
        )
    return key


def _read_key_file(path: Path, what: str, fix: str) -> bytes:
    """The key in ``path``: a regular file of at most :data:`MAX_KEY_FILE_BYTES` (exit 2 otherwise, never a hang);
    one others may read, or reached through a symbolic link, is used with a warning."""
    from privgate.inputs.textfile import read_regular

    raw, st = read_regular(path, what, PrivgateError, MAX_KEY_FILE_BYTES)
    if os.path.islink(path):
        _warn(
            f"{path} ({what}) is a symbolic link to {os.path.realpath(path)}; the key is read there: keep it in a "
            "private file outside any repository or shared folder"
        )
    if os.name == "posix" and st.st_mode & 0o077:
        _warn(
            f"{path} ({what}) has mode {stat.S_IMODE(st.st_mode):04o}: whoever can read it can forge cache entries "
            f"privgate trusts; make it private: chmod 600 {path}"
        )
    return _checked(raw, f"{path} ({what})", fix)


def _warn(message: str) -> None:
    err_console().print(f"warning: {message}", markup=False, highlight=False)


def _create_key_file(path: Path) -> bytes:
    """A new random key at ``path`` (mode 0600), or the bytes of the one another run created there first.

    The key is written whole to a temporary file, then linked to ``path``: the link fails when ``path`` exists,
    so two first runs at once both end up with the one that got there first.
    """
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    key = secrets.token_hex(MIN_KEY_BYTES).encode()
    tmp = temp_name(path)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(key + b"\n")
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(tmp, path)
        except FileExistsError:  # another run's, read as any key file
            return _read_key_file(path, _USERS, _DELETE)
        except OSError:  # a file system without hard links: the rename is atomic, a concurrent first run may differ
            os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return key


def resolve_key(env: Environment, key_file: str | None) -> tuple[bytes | None, str | None]:
    """The run's cache key (see the module docstring), or ``(None, why)`` when the user's key file cannot be had.

    Raises:
        PrivgateError: a key file (named, or the user's that exists) that cannot be read, is not a regular file or
            holds more than :data:`MAX_KEY_FILE_BYTES`, or a key that is too short (exit 2).
    """
    if key_file:
        return _read_key_file(Path(key_file), _NAMED, f"write one with {_MAKE_KEY}"), None
    if env.cache_key is not None:
        return _checked(env.cache_key.encode(), "$PRIVGATE_CACHE_KEY", f"make one with {_MAKE_KEY}"), None
    path = default_key_file(env)
    if path is None:
        return None, "there is no home folder for the cache key file (set $XDG_CONFIG_HOME or $PRIVGATE_CACHE_KEY)"
    if os.path.lexists(path):  # read as a named key file: exit 2 when it is not one
        return _read_key_file(path, _USERS, _DELETE), None
    try:
        raw = _create_key_file(path)
    except OSError as exc:
        return None, f"the cache key file {path} cannot be created ({exc.strerror or exc.__class__.__name__})"
    return _checked(raw, f"{path} ({_USERS})", _DELETE), None


def cache_settings(cache_dir: str | Path | None, key_file: str | None) -> dict[str, Any]:
    """The :class:`~privgate.options.RunOptions` settings of the run's cache: ``cache_dir`` and ``cache_key``.

    ``cache_dir``: what the flag, ``$PRIVGATE_CACHE_DIR`` or the config named (None: the user's cache folder).
    When no key can be had the cache is off for the run, with one warning on stderr.
    """
    if cache_dir is not None and str(cache_dir).strip().lower() in CACHE_OFF:
        return {"cache_dir": "off"}
    env = process_environment()
    folder = Path(cache_dir) if cache_dir is not None else default_cache_dir(env)
    key, why = resolve_key(env, key_file)
    if folder is None:
        why = why or "there is no home folder for the default cache (set $XDG_CACHE_HOME or --cache-dir)"
    if key is None or folder is None:
        err_console().print(
            f"warning: {why}; reference models are trained without a cache in this run", markup=False, highlight=False
        )
        return {"cache_dir": "off"}
    return {"cache_dir": folder, "cache_key": key}


__all__ = [
    "MAX_KEY_FILE_BYTES",
    "MIN_KEY_BYTES",
    "cache_options",
    "cache_settings",
    "default_cache_dir",
    "default_key_file",
    "resolve_key",
]
