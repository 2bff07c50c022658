"""Size limits of ``.npz`` audit data, checked from the file's headers before any array is allocated.

The rest (design, limits, derivations): docs/internals-inputs.md.
"""

from __future__ import annotations

import math
import zipfile
from pathlib import Path
from typing import BinaryIO

import numpy as np

from privgate.errors import DataError, clip

#: The largest array (and zip entry, uncompressed) accepted: 2 GiB, far above any audit set privgate runs.
MAX_ARRAY_BYTES = 2 << 30
#: Compression beyond this ratio, for an entry above :data:`RATIO_FROM` bytes, is a deflate bomb.
MAX_RATIO = 200
RATIO_FROM = 64 << 20


def size_text(n: float) -> str:
    """``n`` bytes for a sentence: ``60.0 MiB``."""
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if n < 1024 or unit == "PiB":
            return f"{n:.0f} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} PiB"  # pragma: no cover


def _header(zf: zipfile.ZipFile, info: zipfile.ZipInfo) -> tuple[tuple[int, ...], np.dtype] | None:
    """(shape, dtype) from an ``.npy`` entry's header, reading only the header; None when it is not one."""
    with zf.open(info) as f:
        try:
            version = np.lib.format.read_magic(f)
            if version == (1, 0):
                shape, _, dtype = np.lib.format.read_array_header_1_0(f)
            elif version in ((2, 0), (3, 0)):
                shape, _, dtype = np.lib.format.read_array_header_2_0(f)
            else:
                return None
        except (ValueError, EOFError, OSError, zipfile.BadZipFile):
            return None
    return tuple(int(s) for s in shape), np.dtype(dtype)


def check_npz(path: str | Path, most: int = MAX_ARRAY_BYTES, source: BinaryIO | None = None) -> None:
    """Refuse an ``.npz`` whose headers declare more than ``most`` bytes in one array or entry, or a deflate bomb.

    ``source``: the file, opened (read from its start; ``path`` then only names it).

    Raises:
        DataError: one sentence naming the file, the array and its declared size.
    """
    p = Path(path)
    try:
        if source is not None:
            source.seek(0)
        zf = zipfile.ZipFile(source if source is not None else p)
    except (zipfile.BadZipFile, OSError, ValueError):
        return  # np.load gives its own error (or reads a plain .npy)
    with zf:
        check_zip(zf, str(p), most)


def check_zip(zf: zipfile.ZipFile, where: str, most: int = MAX_ARRAY_BYTES) -> dict[str, int | None]:
    """:func:`check_npz` on an open zip, named ``where`` in its sentences: each ``.npy`` entry's declared bytes."""
    declared: dict[str, int | None] = {}
    for info in zf.infolist():
        name = clip(info.filename, 60)
        if info.file_size > most:
            raise DataError(
                f"{where}: array '{name}' inflates to {size_text(info.file_size)}, more than the {size_text(most)} "
                f"privgate loads from one array."
            )
        if info.file_size > RATIO_FROM and info.file_size > MAX_RATIO * max(info.compress_size, 1):
            raise DataError(
                f"{where}: array '{name}' inflates {info.file_size / max(info.compress_size, 1):,.0f} times (from "
                f"{size_text(info.compress_size)} to {size_text(info.file_size)}): a compression bomb, not audit data."
            )
        if info.filename.endswith(".npy"):
            declared[info.filename] = npy_bytes(zf, info, where, most)
    return declared


def npy_bytes(zf: zipfile.ZipFile, info: zipfile.ZipInfo, where: str, most: int = MAX_ARRAY_BYTES) -> int | None:
    """The bytes the ``.npy`` entry ``info`` declares (shape × dtype), checked; None when it is not an ``.npy``."""
    found = _header(zf, info)
    if found is None:
        return None
    shape, dtype = found
    declared = math.prod(shape) * dtype.itemsize
    if declared > most or declared > max(info.file_size, 0) + 65536:
        raise DataError(
            f"{where}: array '{clip(info.filename, 60)}' declares shape {shape} of {dtype} ({size_text(declared)}), "
            + (
                f"more than the {size_text(most)} privgate loads from one array."
                if declared > most
                else f"but its entry holds only {size_text(info.file_size)}: the file is damaged or forged."
            )
        )
    return declared


__all__ = ["MAX_ARRAY_BYTES", "MAX_RATIO", "RATIO_FROM", "check_npz", "check_zip", "npy_bytes", "size_text"]
