"""``torch.export`` programs (``.pt2``, ``torch.export.save``) as white-box targets, read without running file code.

``torch.export.load`` unpickles weights, constants and sample inputs a payload marks so, ``sympify``-s (``eval``)
the shape expressions, and ``ep.module()`` ``exec``-s guard code and writes names into generated Python. So the
archive is checked first, from its zip headers and JSON: entry sizes and ratios, an allow-list of entry names,
no pickled payload or custom object, sample inputs that load with ``weights_only=True``, names that are plain
identifiers, shape expressions of symbols and integers only, no guard code, one tensor input, and every
``call_function`` an aten/prims op of the core ATen set (or :data:`EXTRA_OPS`). Only then is it loaded; its batch
dimension must be dynamic. Anything else is one sentence naming the file (:class:`~privgate.errors.TargetError`).
"""

from __future__ import annotations

import io
import json
import re
import warnings
import zipfile
from pathlib import Path
from typing import Any

import torch
from torch import nn

from privgate.errors import TargetError, clip

#: The largest entry (uncompressed) and whole archive accepted.
MAX_ENTRY = 2 << 30
MAX_TOTAL = 4 << 30
#: The largest JSON entry (graph, payload config) parsed, and the most entries in an archive.
MAX_JSON = 64 << 20
MAX_ENTRIES = 10_000
#: Compression beyond this ratio, for an entry above :data:`RATIO_FROM` bytes, is a deflate bomb.
MAX_RATIO = 200
RATIO_FROM = 16 << 20
#: Entry names (below the archive's root folder) a plain exported program has.
ALLOWED_ENTRIES = re.compile(
    r"(archive_format|archive_version|byteorder|\.data/version|\.data/serialization_id|models/\w+\.json"
    r"|data/weights/(weight_\d+|\w+_weights_config\.json)|data/constants/(tensor_\d+|\w+_constants_config\.json)"
    r"|data/sample_inputs/\w+\.pt)"
)
#: aten ops outside the core ATen set that export's default IR keeps for a classifier's layers.
EXTRA_OPS = frozenset({
    "linear", "conv1d", "conv2d", "conv3d", "dropout", "batch_norm", "layer_norm", "group_norm", "flatten",
    "unflatten", "reshape", "view", "contiguous", "softmax", "log_softmax", "gelu", "silu", "relu6", "hardtanh",
    "leaky_relu", "elu", "matmul", "t", "transpose", "squeeze", "unsqueeze", "max_pool1d", "max_pool2d",
    "avg_pool1d", "avg_pool2d", "adaptive_avg_pool1d", "adaptive_avg_pool2d", "embedding", "type_as", "to",
    "scaled_dot_product_attention", "_native_batch_norm_legit_no_training", "chunk", "split", "einsum", "sym_size",
})  # fmt: skip
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_DOTTED = re.compile(r"[A-Za-z0-9_]+(\.[A-Za-z0-9_]+)*")
#: A shape symbol as export writes it (``Symbol('s31', positive=True, integer=True)``) or bare (``s31``).
_SYMBOL = re.compile(r"Symbol\('[a-z]+\d+'(, (positive|integer|nonnegative|real)=(True|False))*\)|[a-z]+\d+")


def is_exported(path: Path) -> bool:
    """Whether ``path`` is a ``torch.export`` archive (a ``.pt2`` file, or a zip holding an ``archive_format``)."""
    if path.suffix.lower() == ".pt2":
        return True
    try:
        with zipfile.ZipFile(path) as z:
            return any(n.rsplit("/", 1)[-1] == "archive_format" for n in z.namelist()[:MAX_ENTRIES])
    except (zipfile.BadZipFile, OSError, ValueError):
        return False


def _refuse(p: Path, why: str) -> TargetError:
    return TargetError(f"{p}: not a torch.export program privgate loads: {why}.")


def _read_json(p: Path, zf: zipfile.ZipFile, name: str) -> Any:
    try:
        return json.loads(zf.read(name))
    except (ValueError, RecursionError, zipfile.BadZipFile, OSError) as exc:
        raise _refuse(p, f"entry '{clip(name, 60)}' is not readable JSON ({exc.__class__.__name__})") from None


def _op_allowed(target: str) -> bool:
    if target == "_operator.getitem":
        return True
    parts = target.split(".")
    if len(parts) != 5 or parts[:2] != ["torch", "ops"] or parts[2] not in ("aten", "prims"):
        return False
    packet = getattr(getattr(torch.ops, parts[2]), parts[3], None)
    op = getattr(packet, parts[4], None) if packet is not None else None
    if not isinstance(op, torch._ops.OpOverload):
        return False
    return parts[3] in EXTRA_OPS or torch.Tag.core in op.tags or torch.Tag.pointwise in op.tags


def _walk_strings(p: Path, node: Any, key: str = "") -> None:
    """Every name that ``ep.module()`` writes into Python, and every shape expression ``sympify`` reads, checked."""
    if isinstance(node, dict):
        for k, v in node.items():
            if k == "range_constraints" and isinstance(v, dict):
                for sym in v:
                    if not _plain_expr(str(sym)):
                        raise _refuse(p, f"shape symbol {clip(ascii(str(sym)), 40)} is not a plain symbol")
            if k in ("metadata", "verifiers", "module_call_graph", "in_spec", "out_spec", "torch_version"):
                continue
            _walk_strings(p, v, k)
    elif isinstance(node, list):
        for v in node:
            _walk_strings(p, v, key)
    elif isinstance(node, str):
        if key == "name" and not _NAME.fullmatch(node):
            raise _refuse(p, f"the graph names {clip(ascii(node), 40)}, not a plain identifier")
        if key in ("parameter_name", "buffer_name", "tensor_constant_name", "fqn") and not _DOTTED.fullmatch(node):
            raise _refuse(p, f"the weight name {clip(ascii(node), 40)} is not a dotted identifier")
        if key == "expr_str" and not _plain_expr(node):
            raise _refuse(p, f"the shape expression {clip(ascii(node), 40)} is not symbols and integers")


def _plain_expr(expr: str) -> bool:
    """Whether ``expr`` is shape symbols and integers joined by + - * and parentheses (what ``sympify`` may read)."""
    return re.fullmatch(r"[-+*() 0-9]*", _SYMBOL.sub("0", expr)) is not None


def _check_graph(p: Path, model: dict[str, Any]) -> None:
    if not isinstance(model, dict):
        raise _refuse(p, "its program is not a JSON object")
    if model.get("guards_code"):
        raise _refuse(p, "it carries guard code (Python that loading it would run)")
    graph = (model.get("graph_module") or {}).get("graph") or {}
    if not isinstance(graph, dict) or not isinstance(graph.get("nodes"), list):
        raise _refuse(p, "its graph is missing")
    if any(not isinstance(i, dict) or set(i) != {"as_tensor"} for i in graph.get("inputs") or []):
        raise _refuse(p, "an input of its graph is not a tensor")
    for node in graph["nodes"]:
        target = str(node.get("target", "")) if isinstance(node, dict) else ""
        if not _op_allowed(target):
            raise _refuse(
                p,
                f"its graph calls '{clip(target, 80)}', not an aten/prims operator privgate allows "
                "(custom operators, higher-order operators and operators that touch files are refused)",
            )
    try:
        _walk_strings(p, model)
    except RecursionError:
        raise _refuse(p, "its program nests too deeply") from None


def check_archive(p: Path) -> None:
    """Refuse, before loading, an archive with an entry too large, a bomb, a pickle, or a graph privgate won't run."""
    try:
        zf = zipfile.ZipFile(p)
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        raise _refuse(p, f"not a readable zip archive ({exc.__class__.__name__})") from None
    with zf:
        infos = zf.infolist()
        if not infos or len(infos) > MAX_ENTRIES:
            raise _refuse(p, f"it holds {len(infos)} entries")
        root = infos[0].filename.split("/", 1)[0]
        total = 0
        for info in infos:
            name, total = clip(info.filename, 60), total + info.file_size
            head, _, rest = info.filename.partition("/")
            if head != root or not ALLOWED_ENTRIES.fullmatch(rest):
                raise _refuse(p, f"entry '{name}' is not part of a plain exported program (no pickles or code)")
            if info.file_size > MAX_ENTRY or total > MAX_TOTAL:
                raise _refuse(p, f"entry '{name}' inflates to {info.file_size:,} bytes, more than privgate loads")
            if info.file_size > RATIO_FROM and info.file_size > MAX_RATIO * max(info.compress_size, 1):
                raise _refuse(p, f"entry '{name}' inflates {info.file_size // max(info.compress_size, 1):,} times")
            if rest.endswith(".json") and info.file_size > MAX_JSON:
                raise _refuse(p, f"entry '{name}' is {info.file_size:,} bytes of JSON")
        names = [i.filename.partition("/")[2] for i in infos]
        sizes = {i.filename.partition("/")[2]: i.file_size for i in infos}
        models = [n for n in names if n.startswith("models/")]
        if len(models) != 1:
            raise _refuse(p, f"it holds {len(models)} programs, not one")
        for n in names:
            if n.endswith("_config.json"):
                config = _read_json(p, zf, f"{root}/{n}")
                entries = config.get("config") if isinstance(config, dict) else None
                if not isinstance(entries, dict) or not all(isinstance(e, dict) for e in entries.values()):
                    raise _refuse(p, f"entry '{clip(n, 60)}' is not a payload configuration")
                for entry in entries.values():
                    stored = str(entry.get("path_name", ""))
                    if entry.get("use_pickle") or not stored.startswith(("weight_", "tensor_")):
                        raise _refuse(p, "a weight or constant in it is pickled (loading it would run file code)")
                    folder = n.rsplit("/", 1)[0]
                    _check_payload(p, entry, sizes.get(f"{folder}/{stored}", 0))
            elif n.startswith("data/sample_inputs/"):
                try:  # torch.export.load falls back to a full unpickle when this fails: it must not
                    torch.load(io.BytesIO(zf.read(f"{root}/{n}")), weights_only=True)
                except Exception:  # noqa: BLE001 - any failure means torch would unpickle it
                    raise _refuse(p, "its sample inputs are pickled objects, not tensors") from None
        _check_graph(p, _read_json(p, zf, f"{root}/{models[0]}"))


def _check_payload(p: Path, entry: dict[str, Any], stored: int) -> None:
    """A weight's or constant's declared shape must fit the bytes it is stored in, at one byte an element at least:
    torch allocates what an empty entry declares (a view past a stored entry's end is torch's own error)."""
    meta = entry.get("tensor_meta")
    try:
        sizes = [int(d["as_int"]) for d in meta["sizes"]]
        strides = [int(d["as_int"]) for d in meta["strides"]]
        offset = int(meta["storage_offset"]["as_int"])
    except (KeyError, TypeError, ValueError):
        raise _refuse(p, f"weight '{clip(str(entry.get('path_name')), 40)}' has no plain shape") from None
    if min(sizes, default=1) < 0 or min(strides, default=0) < 0 or offset < 0 or len(sizes) != len(strides):
        raise _refuse(p, f"weight '{clip(str(entry.get('path_name')), 40)}' has a negative shape")
    extent = 0 if 0 in sizes else offset + 1 + sum((n - 1) * st for n, st in zip(sizes, strides))
    if extent > stored:
        raise _refuse(
            p,
            f"weight '{clip(str(entry.get('path_name')), 40)}' declares shape {clip(str(sizes), 60)} "
            f"({extent:,} elements) but its entry holds {stored:,} bytes",
        )


class ExportedModule(nn.Module):
    """An exported program's module: one tensor in, the graph's outputs out; train/eval fixed at export."""

    def __init__(self, program: nn.Module) -> None:
        super().__init__()
        self.program = program

    def forward(self, x: torch.Tensor) -> Any:
        return self.program(x)

    def train(self, mode: bool = True) -> ExportedModule:
        self.training = mode  # the graph's dropout and batch-norm modes were fixed when it was exported
        return self


def load_exported(p: Path) -> ExportedModule:
    """The module of the ``torch.export`` program at ``p``, checked before and after loading.

    Raises:
        TargetError: one sentence naming the file and what is wrong.
    """
    import torch.utils._pytree as pytree

    check_archive(p)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ep = torch.export.load(str(p))
    except Exception as exc:  # noqa: BLE001 - torch raises many types for damaged or foreign archives
        raise _refuse(p, f"torch cannot read it ({exc.__class__.__name__}); it may be truncated or damaged") from None
    if ep.call_spec.in_spec != pytree.tree_structure(((torch.zeros(1),), {})):
        raise _refuse(p, "its forward does not take exactly one tensor")
    inputs = [n for n in ep.graph.nodes if n.op == "placeholder" and n.name in ep.graph_signature.user_inputs]
    val = inputs[0].meta.get("val") if len(inputs) == 1 else None
    if not isinstance(val, torch.Tensor) or val.dim() == 0:
        raise _refuse(p, "its input is not a batch of rows")
    if not isinstance(val.shape[0], torch.SymInt):
        raise TargetError(
            f"{p}: the exported program's batch dimension is fixed at {int(val.shape[0])} rows; export it with "
            "dynamic_shapes=({0: torch.export.Dim('batch')},) so privgate can score any number of rows."
        )
    if any(n.op not in ("placeholder", "call_function", "output", "get_attr") for n in ep.graph.nodes):
        raise _refuse(p, "its graph calls a module")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return ExportedModule(ep.module())
    except Exception as exc:  # noqa: BLE001 - the checked graph still fails to become a module
        raise _refuse(p, f"torch cannot build its module ({exc.__class__.__name__})") from None


__all__ = ["EXTRA_OPS", "ExportedModule", "check_archive", "is_exported", "load_exported"]
