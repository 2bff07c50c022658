"""Project configuration: ``[tool.privgate]`` in ``pyproject.toml`` or a ``privgate.toml``.

The rest (design, limits, derivations): docs/internals-inputs.md.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from privgate.errors import ConfigError, clip, shown
from privgate.inputs.suggest import did_you_mean
from privgate.inputs.textfile import read_limited

KEYS = {
    "model": str,
    "policy": str,
    "members": str,
    "nonmembers": str,
    "population": str,
    "recipe": str,
    "seed": int,
    "json": str,
    "label_column": str,
    "drop_duplicates": bool,  # rows on both sides dropped from both (privgate.inputs.duplicates)
    "cache_dir": str,
    "threads": int,
    "exposed": int,
    "trust_checkpoint": bool,
    "trust_types": list,  # types a .skops model may name (privgate.inputs.targets.sklearn)
    "device": str,
    "engine": str,
    "executor": str,
    "ray_address": str,
    "models_per_task": int,
    "devices": str,  # --devices: all, N or GPU indices (privgate.device.parse_devices)
    # an endpoint URL as 'model' (privgate.inputs.targets.endpoint); headers only on the command line: they are secrets
    "max_queries": int,
    "endpoint_output": str,
    "endpoint_timeout": float,
    "endpoint_batch": int,
    "endpoint_concurrency": int,
    "endpoint_max_bytes": int,
    # language models (privgate.lm): a Hugging Face model directory as `model`, text data
    "text_field": str,
    "text_column": str,
    "reference_model": str,
    "base_model": str,
    "canaries": str,
    "user_field": str,
    "max_records": int,
    "max_text_mib": int,
    "max_canaries": int,
}

#: Keys naming something privgate writes, with the flags that may name the same outside the config's folder.
OUTPUTS: dict[str, str] = {"json": "--json", "cache_dir": "--cache-dir or $PRIVGATE_CACHE_DIR"}
#: Keys that can make privgate run code, trust code a model file names, or send the audit data to a server, with
#: the command-line flag that says the same (refused with ``code=False``: ``--no-config-code``).
CODE_KEYS: dict[str, str] = {
    "model": "the MODEL argument",  # an endpoint URL
    "members": "--members",  # module:function, as the three data keys
    "nonmembers": "--nonmembers",
    "population": "--population",
    "recipe": "--recipe",
    "trust_checkpoint": "--trust-checkpoint",
    "trust_types": "--trust-type",
    "executor": "--executor",
    "ray_address": "--ray-address",
}
#: Values of ``cache_dir`` that turn the cache off (privgate.options.CACHE_OFF): no folder.
_NO_FOLDER = ("off", "none", "0", "false", "")

#: Keys whose value must be one of a few words (the CLI's --device and --engine choices).
CHOICES: dict[str, tuple[str, ...]] = {
    "device": ("auto", "cpu", "cuda"),  # privgate.device.DEVICES
    "engine": ("auto", "vectorised", "sequential"),  # privgate.options.ENGINES
    "executor": ("local", "ray"),  # privgate.executors.EXECUTORS
}


@dataclass
class Config:
    """Settings from a config file, with the folder they are relative to."""

    values: dict[str, Any] = field(default_factory=dict)
    path: Path | None = None

    @property
    def base(self) -> Path:
        return self.path.parent if self.path else Path.cwd()

    def get(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)


def _read(path: Path) -> dict[str, Any]:
    """The TOML of ``path``, read with the settings-file size limit (:mod:`privgate.inputs.textfile`)."""
    text = read_limited(path, "config", ConfigError)
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML ({clip(str(exc))}).") from None
    except RecursionError:
        raise ConfigError(f"{path}: invalid TOML (nested too deeply).") from None


def _code_in(key: str, value: Any) -> str | None:
    """What ``key = value`` would have privgate run, trust or send that a file may not decide, or None."""
    from privgate.inputs.entrypoints import is_entry_spec

    if key == "recipe":
        return "names a training recipe, code privgate would import and run"
    if key in ("members", "nonmembers", "population") and is_entry_spec(value):
        return "names a data factory (module:function), code privgate would import and run"
    if key == "trust_checkpoint" and value:
        return "switches on loading pickled checkpoints, which runs code from the model file"
    if key == "trust_types" and value:
        return "trusts types a .skops model may have privgate import"
    if key == "executor" and value != "local":
        return "sends the training to a Ray cluster"
    if key == "ray_address":
        return "names a Ray cluster the training would be sent to"
    if key == "model" and value.strip().lower().startswith(("http://", "https://")):
        return "names an endpoint the audit data would be sent to"
    return None


def _refuse_code(key: str, value: Any, path: Path, prefix: str) -> None:
    what = _code_in(key, value)
    if what:
        raise ConfigError(
            f"{path}: '{prefix}{key}' {what}; --no-config-code ($PRIVGATE_NO_CONFIG_CODE) refuses code, trust "
            f"switches and servers a file names: give it on the command line ({CODE_KEYS[key]}) of a trusted "
            "workflow, or remove it from the file."
        )


def _validate(table: Any, path: Path, prefix: str, code: bool = True) -> dict[str, Any]:
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: '{prefix or 'privgate'}' must be a table.")
    for key, value in table.items():
        if key not in KEYS:
            hint = did_you_mean(key, KEYS)  # a close key is named; else every key is listed
            raise ConfigError(
                f"{path}: unknown key '{prefix}{clip(key, 100)}'"
                + (f"{hint}." if hint else f" (known: {', '.join(sorted(KEYS))}).")
            )
        want = KEYS[key]
        if want is float and isinstance(value, int) and not isinstance(value, bool):
            value = table[key] = float(value)  # endpoint_timeout = 5 is 5 seconds
        if not isinstance(value, want) or (want is int and isinstance(value, bool)):
            raise ConfigError(
                f"{path}: '{prefix}{key}' must be a {want.__name__}, got {type(value).__name__} {shown(value, 80)}."
            )
        at_least_one = ("threads", "models_per_task", "max_queries", "endpoint_batch", "endpoint_concurrency")
        if key in (*at_least_one, "max_records", "max_text_mib", "max_canaries") and value < 1:
            raise ConfigError(f"{path}: '{prefix}{key}' must be at least 1, got {value}.")
        if key == "threads":
            from privgate.threads import threads_problem

            problem = threads_problem(value)
            if problem:
                raise ConfigError(f"{path}: '{prefix}{key}': {problem}.")
        if key == "trust_types" and not all(isinstance(v, str) for v in value):
            raise ConfigError(f"{path}: '{prefix}trust_types' must be a list of type names (strings).")
        if key in CHOICES and value not in CHOICES[key]:
            raise ConfigError(
                f"{path}: '{prefix}{key}' must be one of {', '.join(CHOICES[key])}, got {shown(value, 80)}"
                f"{did_you_mean(value, CHOICES[key])}."
            )
        if key == "endpoint_max_bytes" and value < 1024:
            raise ConfigError(f"{path}: '{prefix}endpoint_max_bytes' must be at least 1024, got {value}.")
        if key == "endpoint_timeout" and not value > 0:
            raise ConfigError(f"{path}: '{prefix}endpoint_timeout' must be positive, got {value}.")
        if key == "devices":
            from privgate.device import parse_devices

            try:
                parse_devices(value)
            except ValueError as exc:
                raise ConfigError(f"{path}: '{prefix}devices': {exc}") from None
        if key == "exposed" and value < 0:
            raise ConfigError(f"{path}: '{prefix}exposed' must be 0 or more, got {value}.")
        if key in OUTPUTS:
            _confined(key, value, path, prefix)
        if not code and key in CODE_KEYS:
            _refuse_code(key, value, path, prefix)
    return dict(table)


def _confined(key: str, value: str, path: Path, prefix: str) -> None:
    """Refuse an output the config names outside the config's folder (after resolving ``..`` and links)."""
    if key == "cache_dir" and value.strip().lower() in _NO_FOLDER:
        return
    folder = os.path.realpath(path.parent)
    try:
        target = os.path.realpath(path.parent / value)  # an absolute value replaces the folder
    except (OSError, ValueError):  # a NUL byte, a loop of links: nothing privgate could write
        target = None
    inside = target is not None and (
        target.startswith(folder.rstrip(os.sep) + os.sep) or (key == "cache_dir" and target == folder)
    )
    if not inside:
        raise ConfigError(
            f"{path}: '{prefix}{key}' names {shown(value, 200)}, outside the config's folder {folder} (after "
            f"resolving '..' and links); a config file may only have privgate write inside its own folder, so "
            f"name a path elsewhere on the command line ({OUTPUTS[key]})."
        )


def load_config(path: str | Path, *, code: bool = True) -> Config:
    """Load an explicit config file (``privgate.toml`` or a ``pyproject.toml``).

    ``code=False``: refuse every key of :data:`CODE_KEYS` that would run code, trust or send data (module docstring).
    """
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"{p}: config file not found.")
    data = _read(p)
    if p.name == "pyproject.toml":
        table = data.get("tool", {}).get("privgate")
        if table is None:
            raise ConfigError(f"{p}: has no [tool.privgate] table.")
        return Config(_validate(table, p, "tool.privgate.", code), p.resolve())
    return Config(_validate(data, p, "", code), p.resolve())


def find_config(start: Path | None = None, *, code: bool = True) -> Config:
    """The nearest config from ``start`` (default: cwd) upward, or an empty one; ``code`` as :func:`load_config`."""
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        candidate = folder / "privgate.toml"
        if candidate.is_file():
            return load_config(candidate, code=code)
        pyproject = folder / "pyproject.toml"
        if pyproject.is_file() and "privgate" in _read(pyproject).get("tool", {}):
            return load_config(pyproject, code=code)
    return Config()
