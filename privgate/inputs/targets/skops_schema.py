"""What loading a ``.skops`` file would import and decode, read from its schema without importing or inflating it.

The rest (design, limits, derivations): docs/internals-inputs.md.
"""

from __future__ import annotations

import io
import json
import re
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from privgate.errors import DataError, TargetError, clip, shown
from privgate.inputs.npzlimits import MAX_ARRAY_BYTES, check_zip, npy_bytes, size_text
from privgate.inputs.targets.skops_types import BIT_GENERATOR, FIXED, ROLES

#: The largest ``schema.json`` read (uncompressed): far above a fitted pipeline's (the mortgage forest's is 0.2 MiB).
MAX_SCHEMA_BYTES = 64 << 20
#: The most nodes a schema may hold (skops keeps about 300 bytes of Python objects per node).
MAX_NODES = 1_000_000
#: The deepest nesting of nodes (skops builds and audits a tree recursively; a pipeline nests about 20 deep).
MAX_DEPTH = 100
#: The most bytes the arrays of one file may decode to, every reference counted: as much as one audit array.
MAX_DECODED = MAX_ARRAY_BYTES
#: The most entries the zip may declare (a forest of 1,000 trees has about 2,000).
MAX_ENTRIES = 200_000
#: The most entries a sparse matrix's nested ``.npz`` may declare (scipy writes at most 6).
MAX_SPARSE_ENTRIES = 16
#: What a reference costs beyond its entry's bytes: a ``bytes`` value is read then copied, a ``bytearray`` goes
#: through a list of Python ints (8 bytes each).
_COPIES = {"BytesNode": 2, "BytearrayNode": 10, "NdArrayNode": 1, "SparseMatrixNode": 1}
_PART = re.compile(r"^[A-Za-z_]\w*$")
_PROTOCOL = 2  # skops.io._protocol.PROTOCOL of the skops privgate is tested with; newer files are skops' to refuse


@dataclass
class Scan:
    """What a schema names and decodes to.

    Attributes:
        imports: every name a node would make skops import or call → the loaders that would.
        fixed: names carried by nodes that import nothing (a ``JsonNode``'s ``builtins.str``): skops audits them
            by name, so they are handed to it as trusted.
        decoded: bytes every array reference decodes to, summed.
        nodes: how many nodes the schema holds.
    """

    imports: dict[str, set[str]] = field(default_factory=dict)
    fixed: set[str] = field(default_factory=set)
    decoded: int = 0
    nodes: int = 0


def scan(path: Path, most: int = MAX_DECODED) -> Scan:
    """Walk ``path``'s schema (module docstring); one sentence (:class:`TargetError`) for a damaged or oversized file.

    The zip's entries are checked first as audit data's are (:func:`~privgate.inputs.npzlimits.check_zip`).
    """
    try:
        with open(path, "rb") as f:
            _entries(f, MAX_ENTRIES, str(path))
            with zipfile.ZipFile(f) as zf:
                return _Walk(path, zf, most, check_zip(zf, str(path), most)).run()
    except (zipfile.BadZipFile, OSError, EOFError, ValueError) as exc:
        raise TargetError(f"{path}: not a readable skops file ({clip(str(exc), 120)}).") from None
    except DataError as exc:
        raise TargetError(str(exc)) from None


class _Walk:
    def __init__(self, path: Path, zf: zipfile.ZipFile, most: int, arrays: dict[str, int | None]) -> None:
        self.path, self.zf, self.most = path, zf, most
        self.arrays = arrays  # an entry's declared array bytes, read once
        self.found = Scan()
        self.by_id: dict[Any, int] = {}  # a shared object's cost, counted once
        self.nested: dict[str, int] = {}  # a nested .npz's decoded bytes, checked once
        self.biggest: tuple[int, str] = (0, "")

    def bad(self, what: str) -> TargetError:
        return TargetError(f"{self.path}: not a skops file privgate loads ({what}); the file is damaged or forged.")

    def run(self) -> Scan:
        schema = self.schema()
        protocol = schema.get("protocol")
        if isinstance(protocol, bool) or not isinstance(protocol, int) or not 0 <= protocol <= _PROTOCOL:
            raise self.bad(f"its schema's protocol is {shown(protocol, 20)}")
        self.protocol = protocol
        stack: list[tuple[Any, int]] = [(schema, 0)]
        while stack:
            value, depth = stack.pop()
            if isinstance(value, list):
                stack.extend((v, depth) for v in value)
                continue
            if not isinstance(value, dict):
                continue
            if "__loader__" in value:
                depth += 1
                if depth > MAX_DEPTH:
                    raise self.bad(f"its nodes nest more than {MAX_DEPTH} deep")
                self.found.nodes += 1
                if self.found.nodes > MAX_NODES:
                    raise self.bad(f"its schema holds more than {MAX_NODES:,} nodes")
                self.node(value)
            stack.extend((v, depth) for v in value.values())
        return self.found

    def schema(self) -> dict[str, Any]:
        try:
            info = self.zf.getinfo("schema.json")
        except KeyError:
            raise self.bad("it has no schema.json") from None
        if info.file_size > MAX_SCHEMA_BYTES:
            raise self.bad(
                f"its schema.json inflates to {size_text(info.file_size)}, more than {size_text(MAX_SCHEMA_BYTES)}"
            )
        with self.zf.open(info) as f:
            raw = f.read(MAX_SCHEMA_BYTES + 1)
        try:
            schema = json.loads(raw[:MAX_SCHEMA_BYTES])
        except RecursionError:
            raise self.bad("its schema.json is nested too deeply") from None
        except (ValueError, UnicodeDecodeError) as exc:
            raise self.bad(f"its schema.json is not JSON: {clip(str(exc), 80)}") from None
        if not isinstance(schema, dict):
            raise self.bad("its schema.json is not a JSON object")
        return schema

    def node(self, state: dict[str, Any]) -> None:
        loader = state["__loader__"]
        if loader == "CachedNode":
            return  # refers to a node seen before it
        if not isinstance(loader, str) or loader == BIT_GENERATOR or (loader not in ROLES and loader not in FIXED):
            raise self.bad(f"a node's loader is {shown(loader, 60)}")
        name = self.name(state.get("__module__"), state.get("__class__"))
        if loader == "FunctionNode" and self.protocol == 0:  # protocol 0 imports the name its content gives
            content = state.get("content")
            if not isinstance(content, dict):
                raise self.bad("a protocol-0 function node has no content")
            name = self.name(content.get("module_path"), content.get("function"))
        if loader in FIXED:
            self.found.fixed.add(name)
        else:
            self.found.imports.setdefault(name, set()).add(loader)
        if loader == "RandomGeneratorNode":
            self.found.imports.setdefault(self.bit_generator(state), set()).add(BIT_GENERATOR)
        if loader in _COPIES and state.get("type", "numpy") in ("numpy", "scipy"):
            self.reference(state, loader)

    def name(self, module: Any, cls: Any) -> str:
        if not isinstance(module, str) or not isinstance(cls, str) or not _PART.match(cls):
            raise self.bad(f"a node names {shown(module, 60)}.{shown(cls, 60)}")
        if not all(_PART.match(p) for p in module.split(".")):
            raise self.bad(f"a node names the module {shown(module, 60)}")
        return f"{module}.{cls}"

    def bit_generator(self, state: dict[str, Any]) -> str:
        """The bit generator a ``Generator`` node calls, named in its content (resolved in ``numpy.random``)."""
        try:
            name = json.loads(state["content"]["bit_generator"]["content"]["bit_generator"]["content"])
        except (KeyError, TypeError, ValueError):
            name = None
        if not isinstance(name, str) or not _PART.match(name):
            raise self.bad("a random generator names no bit generator")
        return f"numpy.random.{name}"

    def reference(self, state: dict[str, Any], loader: str) -> None:
        entry = state.get("file")
        if not isinstance(entry, str):
            raise self.bad(f"a {loader} names no array entry")
        try:
            info = self.zf.getinfo(entry)
        except KeyError:
            raise self.bad(f"a node names the entry {shown(entry, 60)}, which the zip does not hold") from None
        cost = info.file_size * _COPIES[loader]
        if loader == "NdArrayNode":
            if entry not in self.arrays:
                self.arrays[entry] = npy_bytes(self.zf, info, str(self.path), self.most)
            declared = self.arrays[entry]
            if declared is None:
                raise self.bad(f"the entry {shown(entry, 60)} is not a numpy array")
            cost += declared
        elif loader == "SparseMatrixNode":
            cost += self.sparse(info)
        key = state.get("__id__")
        if key and isinstance(key, (int, str)):  # skops builds a node once per __id__
            extra = max(cost - self.by_id.get(key, 0), 0)
            self.by_id[key] = max(cost, self.by_id.get(key, 0))
            cost = extra
        self.found.decoded += cost
        self.biggest = max(self.biggest, (info.file_size, entry))
        if self.found.decoded > self.most:
            raise TargetError(
                f"{self.path}: the skops file's arrays decode to more than the {size_text(self.most)} privgate loads "
                f"from one model (every node naming an entry reads it again; the largest, "
                f"{shown(self.biggest[1], 60)}, holds {size_text(self.biggest[0])})."
            )

    def sparse(self, info: zipfile.ZipInfo) -> int:
        """A sparse matrix's nested ``.npz``: at most :data:`MAX_SPARSE_ENTRIES` entries, each checked as audit
        data's are, and their decoded bytes (read once)."""
        if info.filename not in self.nested:
            where = f"{self.path}: the sparse matrix {shown(info.filename, 60)}"
            if self.found.decoded + info.file_size > self.most:
                return info.file_size  # over the bound already: reference() says so without reading it
            try:
                with self.zf.open(info) as f:
                    data = io.BytesIO(f.read())
                _entries(data, MAX_SPARSE_ENTRIES, where)
                with zipfile.ZipFile(data) as inner:
                    arrays = check_zip(inner, where, self.most)
                    self.nested[info.filename] = sum(
                        i.file_size + (arrays.get(i.filename) or 0) for i in inner.infolist()
                    )
            except (zipfile.BadZipFile, EOFError, ValueError):
                raise self.bad(f"the entry {shown(info.filename, 60)} is not a scipy sparse matrix") from None
        return self.nested[info.filename]


def _entries(f: BinaryIO, most: int, where: str) -> None:
    """Refuse a zip whose end record declares more than ``most`` entries, before :mod:`zipfile` reads them."""
    end = zipfile._EndRecData(f)  # the end-of-central-directory record (zip64 aware), as ZipFile reads it
    if end is None:
        raise zipfile.BadZipFile("File is not a zip file")
    if end[zipfile._ECD_ENTRIES_TOTAL] > most:
        raise TargetError(
            f"{where}: the zip declares {end[zipfile._ECD_ENTRIES_TOTAL]:,} entries, more than the {most:,} "
            "privgate reads; the file is damaged or forged."
        )


__all__ = [
    "MAX_DECODED",
    "MAX_DEPTH",
    "MAX_ENTRIES",
    "MAX_NODES",
    "MAX_SCHEMA_BYTES",
    "MAX_SPARSE_ENTRIES",
    "Scan",
    "scan",
]
