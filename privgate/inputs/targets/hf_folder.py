"""A model folder is data: what privgate checks in it before ``transformers``, ``tokenizers`` or PEFT read it.

The rest (design, limits, derivations): docs/internals-inputs.md.
"""

from __future__ import annotations

import json
import math
import stat
from pathlib import Path
from typing import Any

from privgate.errors import TargetError, clip, shown

MiB = 1 << 20
#: The most bytes of one configuration file (JSON, text, chat template) of a model folder.
CONFIG_LIMIT = 16 * MiB
#: The most bytes of one tokenizer vocabulary file (the largest published ``tokenizer.json`` files are about 33 MB).
TOKENIZER_LIMIT = 48 * MiB
#: The most layers a config may ask for (published models have at most a few hundred).
MAX_LAYERS = 1024
#: Suffixes of the files that transformers, tokenizers and PEFT parse as text or JSON.
READ_SUFFIXES = (".json", ".txt", ".jinja", ".model", ".tiktoken")
_VOCABULARIES = ("tokenizer.json", "tekken.json", "merges.txt")
#: The configuration files privgate parses itself before a library does.
JSON_FILES = (
    "config.json",
    "generation_config.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "adapter_config.json",
    "preprocessor_config.json",
    "processor_config.json",
    "chat_template.json",
    "model.safetensors.index.json",
)
#: Entries by which a configuration file asks ``transformers`` to import code from the folder. (PEFT's
#: ``auto_mapping``, which every adapter carries, names the base's class; only ``AutoPeftModel`` reads it.)
CODE_KEYS = ("auto_map", "custom_pipelines")
#: Keys naming the attention implementation: a value ``org/name`` is a kernel transformers fetches and imports.
_ATTENTION = ("attn_implementation", "_attn_implementation")
_LAYERS = ("num_hidden_layers", "n_layer", "num_layers", "n_layers", "num_decoder_layers", "num_encoder_layers")
_PER_VALUE = (
    "num_labels",
    "vocab_size",
    "hidden_size",
    "n_embd",
    "d_model",
    "intermediate_size",
    "n_inner",
    "ffn_dim",
    "moe_intermediate_size",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "num_local_experts",
    "num_experts",
    "n_routed_experts",
    "moe_num_experts",
    "r",
    "num_virtual_tokens",
    "token_dim",
)


def _mib(n: int) -> str:
    return f"{n / MiB:.1f} MiB" if n >= MiB else f"{n:,} bytes"


def _is_vocabulary(name: str) -> bool:
    return name in _VOCABULARIES or name.startswith("vocab.") or name.endswith((".model", ".tiktoken"))


def check_sizes(folder: Path) -> None:
    """Every file of ``folder`` a library parses is within its limit (module docstring); one sentence if not."""
    for where in (folder, folder / "additional_chat_templates"):
        if not where.is_dir():
            continue
        for entry in sorted(where.iterdir()):
            if not entry.name.endswith(READ_SUFFIXES):
                continue
            try:
                st = entry.stat()
            except OSError:
                continue  # a dangling link: the library does not find the file either
            if not stat.S_ISREG(st.st_mode):
                continue  # transformers opens regular files only (os.path.isfile)
            vocabulary = _is_vocabulary(entry.name)
            limit = TOKENIZER_LIMIT if vocabulary else CONFIG_LIMIT
            if st.st_size > limit:
                kind = "tokenizer vocabulary" if vocabulary else "configuration file"
                raise TargetError(
                    f"{entry}: is {_mib(st.st_size)}, more than the {_mib(limit)} privgate reads for a {kind} of a "
                    "model folder (a fixed limit, above the size of published models' files; it cannot be raised)."
                )


def read_json(path: Path) -> dict[str, Any]:
    """``path`` parsed as one JSON object (at most :data:`CONFIG_LIMIT`); one sentence naming it if it is not."""
    from privgate.inputs.textfile import read_limited

    text = read_limited(path, path.name, TargetError, limit=CONFIG_LIMIT)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TargetError(f"{path}: is not valid JSON (line {exc.lineno}).") from None
    except RecursionError:
        raise TargetError(
            f"{path}: is JSON nested too deeply for privgate to read (a configuration file is flat)."
        ) from None
    except ValueError:  # a number of more digits than Python converts (4,300)
        raise TargetError(f"{path}: holds a number of more digits than privgate reads in JSON.") from None
    if not isinstance(data, dict):
        raise TargetError(f"{path}: must be a JSON object.")
    return data


def _code_entry(value: Any) -> tuple[str | None, Any] | None:
    """The first entry of code named by ``value`` (an ``auto_map`` mapping, a list, a string), or ``None``."""
    if isinstance(value, dict):
        for key, item in value.items():
            if item:
                return str(key), item
        return None
    if isinstance(value, (list, tuple)):
        named = [v for v in value if v]
        return ("AutoTokenizer", named[0]) if named else None
    return (None, value) if value else None


def _find_code(data: Any, path: str = "") -> tuple[str, str | None, Any] | None:
    """(key path, entry, value) of the first :data:`CODE_KEYS` entry naming code anywhere in ``data``, or of an
    attention implementation that names a kernel repository (``org/name``: code ``transformers`` would fetch)."""
    stack: list[tuple[Any, str]] = [(data, path)]
    while stack:
        node, at = stack.pop()
        if isinstance(node, dict):
            for key, value in node.items():
                here = f"{at}.{key}" if at else str(key)
                if key in CODE_KEYS and (entry := _code_entry(value)) is not None:
                    return here, entry[0], entry[1]
                if key in _ATTENTION and isinstance(value, str) and "/" in value:
                    return here, None, value
                stack.append((value, here))
        elif isinstance(node, list):
            stack.extend((v, f"{at}[{i}]") for i, v in enumerate(node))
    return None


def refuse_code(path: Path, data: dict[str, Any]) -> None:
    """One sentence when the configuration file ``path`` (parsed: ``data``) asks a library to run code."""
    found = _find_code(data)
    if found is not None:
        where, entry, value = found
        named = f"entry '{clip(entry, 80)}' " if entry is not None else ""
        raise TargetError(
            f"{path}: '{where}' {named}names code ({shown(value, 120)}) for transformers to import; privgate reads "
            "a model folder as data and never runs its code (remove the entry to use the classes transformers ships)."
        )
    if path.name == "adapter_config.json" and data.get("megatron_config"):
        raise TargetError(
            f"{path}: 'megatron_config' makes PEFT import the module 'megatron_core' names "
            f"({shown(data.get('megatron_core'), 80)}); privgate reads a model folder as data and never runs code "
            "it names (remove the entry)."
        )
    archs = data.get("architectures") if path.name == "config.json" else None
    for arch in archs if isinstance(archs, list) else []:
        if not isinstance(arch, str) or not arch.isidentifier():
            raise TargetError(
                f"{path}: 'architectures' entry {shown(arch, 120)} is not a class name (a module path names code, "
                "which privgate never runs from a model folder)."
            )


def read_folder(folder: Path) -> dict[str, dict[str, Any]]:
    """The configuration files of ``folder`` (:data:`JSON_FILES`), checked (module docstring) and parsed, by name."""
    check_sizes(folder)
    configs: dict[str, dict[str, Any]] = {}
    for name in JSON_FILES:
        path = folder / name
        if path.is_file():
            configs[name] = read_json(path)
            refuse_code(path, configs[name])
    return configs


def weights_extent(files: list[Path]) -> tuple[int, int]:
    """(values, tensors) the safetensors ``files`` hold, read from their headers only (nothing is loaded)."""
    from safetensors import safe_open

    values = tensors = 0
    for f in files:
        try:
            with safe_open(str(f), framework="pt") as st:
                for key in st.keys():  # noqa: SIM118 - a safetensors handle, not a dict
                    values += math.prod(st.get_slice(key).get_shape())
                    tensors += 1
        except Exception as exc:  # noqa: BLE001 - safetensors raises its own error type and OSError
            first = (str(exc).strip().splitlines() or [exc.__class__.__name__])[0]
            raise TargetError(f"{f}: is not a readable safetensors file ({clip(first, 160)}).") from None
    return values, tensors


def _counts(data: Any) -> list[tuple[str, str, int]]:
    """(key path, key, value) of every integer of :data:`_LAYERS` / :data:`_PER_VALUE` in ``data``, at any depth."""
    found, stack = [], [(data, "")]
    while stack:
        node, at = stack.pop()
        if isinstance(node, dict):
            for key, value in node.items():
                here = f"{at}.{key}" if at else str(key)
                if key in _LAYERS + _PER_VALUE and isinstance(value, int) and not isinstance(value, bool):
                    found.append((here, key, value))
                elif key == "rank_pattern" and isinstance(value, dict):  # a PEFT adapter's ranks per module
                    found.extend((f"{here}.{k}", "r", v) for k, v in value.items() if isinstance(v, int))
                elif isinstance(value, (dict, list)):
                    stack.append((value, here))
        elif isinstance(node, list):
            stack.extend((v, at) for v in node)
    return found


def check_counts(path: Path, data: dict[str, Any], weights: list[Path], *, layers: bool = True) -> int:
    """The values ``weights`` hold, after checking that no count in ``data`` (``path``) exceeds them.

    Every layer needs at least one tensor, every label, expert, hidden unit, vocabulary entry or LoRA rank at
    least one value: a config asking for more than its weights hold describes other weights (and could make
    ``transformers`` build a model of any size). Layers (``layers``: a model's config, not an adapter's) are
    also at most :data:`MAX_LAYERS`.
    """
    if not weights:
        return 0
    values, tensors = weights_extent(weights)
    names = ", ".join(f.name for f in weights[:3]) + (" …" if len(weights) > 3 else "")
    for where, key, value in _counts(data):
        if key in _LAYERS and not layers:
            continue
        is_layers = key in _LAYERS
        bound = min(tensors, MAX_LAYERS) if is_layers else values
        if value > bound:
            what = (
                f"the {MAX_LAYERS:,} privgate builds"
                if is_layers and bound == MAX_LAYERS
                else f"the {bound:,} {'tensors' if is_layers else 'values'} its weights ({names}) hold"
            )
            raise TargetError(
                f"{path}: '{where}' is {value:,}, more than {what}, so it does not describe these weights; privgate "
                "refuses it before allocating any memory."
            )
    return values


def safetensors_files(folder: Path, adapter: bool = False) -> list[Path]:
    """The weights files of ``folder``: its adapter's (``adapter_model.safetensors``) or the model's."""
    files = sorted(p for p in folder.glob("*.safetensors") if p.is_file())
    is_adapter = [p for p in files if p.name.startswith("adapter_model")]
    return is_adapter if adapter else [p for p in files if p not in is_adapter]


__all__ = [
    "CODE_KEYS",
    "CONFIG_LIMIT",
    "JSON_FILES",
    "MAX_LAYERS",
    "READ_SUFFIXES",
    "TOKENIZER_LIMIT",
    "check_counts",
    "check_sizes",
    "read_folder",
    "read_json",
    "refuse_code",
    "safetensors_files",
    "weights_extent",
]
