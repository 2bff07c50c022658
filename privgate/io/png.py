"""PNG encoding of small 8-bit images, with no dependency beyond zlib (PNG specification, W3C 2003, ISO/IEC 15948).

Used for model-inversion reconstructions (the attack's artefacts) and for the
images inlined in the HTML report.
"""

from __future__ import annotations

import struct
import zlib

import numpy as np


def png_bytes(image: np.ndarray) -> bytes:
    """A PNG of a uint8 array ``[h, w]`` (grayscale), ``[h, w, 1]``, ``[h, w, 3]`` (RGB) or ``[h, w, 4]`` (RGBA)."""
    img = np.ascontiguousarray(image, dtype=np.uint8)
    if img.ndim == 3 and img.shape[2] == 1:
        img = img[:, :, 0]
    h, w = img.shape[:2]
    colour = 0 if img.ndim == 2 else {3: 2, 4: 6}[img.shape[2]]
    raw = b"".join(b"\x00" + img[row].tobytes() for row in range(h))

    def chunk(tag: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", w, h, 8, colour, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b"")


__all__ = ["png_bytes"]
