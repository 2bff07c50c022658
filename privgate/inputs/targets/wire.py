"""One HTTP exchange with an endpoint, bounded in time and in size, over httpcore.

The rest (design, limits, derivations): docs/internals-inputs.md.
"""

from __future__ import annotations

import threading
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

#: Bytes of a request written at once (the deadline is checked before each piece).
PIECE = 16 << 10
#: Most bytes read of an error answer (4xx/5xx): enough for its message.
ERROR_BYTES = 64 << 10
#: Encodings asked for and decoded; anything else a server sends is refused.
ENCODINGS = ("gzip", "x-gzip", "deflate")


class TooLarge(Exception):
    """An answer larger than the limit: ``how`` says how it was found (declared, arrived, inflated)."""

    def __init__(self, limit: int, how: str) -> None:
        super().__init__(how)
        self.limit = limit
        self.how = how


class Undecodable(Exception):
    """An answer in an encoding not asked for, or whose compression is corrupt."""


@dataclass(frozen=True)
class Answer:
    """An answer: status, headers (names lower-cased) and the (decoded) body."""

    status: int
    headers: dict[str, str]
    body: bytes


class _Deadline(threading.local):
    """The deadline of the exchange running in this thread (requests run in their caller's thread)."""

    at: float | None = None

    def left(self, timeout: float | None, error: type[Exception]) -> float | None:
        """``timeout`` cut to what is left before the deadline; ``error`` when nothing is left."""
        if self.at is None:
            return timeout
        left = self.at - time.monotonic()
        if left <= 0:
            raise error("the request's deadline has passed")
        return left if timeout is None else min(timeout, left)


def _backend(httpcore: Any, deadline: _Deadline) -> Any:
    """httpcore's synchronous network backend, every wait cut to the deadline of the running exchange."""

    class _Stream(httpcore.NetworkStream):
        def __init__(self, inner: Any) -> None:
            self.inner = inner

        def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
            return self.inner.read(max_bytes, deadline.left(timeout, httpcore.ReadTimeout))

        def write(self, buffer: bytes, timeout: float | None = None) -> None:
            view = memoryview(buffer)
            for start in range(0, len(view), PIECE):
                self.inner.write(bytes(view[start : start + PIECE]), deadline.left(timeout, httpcore.WriteTimeout))

        def close(self) -> None:
            self.inner.close()

        def start_tls(self, ssl_context: Any, server_hostname: str | None = None, timeout: float | None = None) -> Any:
            left = deadline.left(timeout, httpcore.ConnectTimeout)
            return _Stream(self.inner.start_tls(ssl_context, server_hostname, left))

        def get_extra_info(self, info: str) -> Any:
            return self.inner.get_extra_info(info)

    class _Backend(httpcore.NetworkBackend):
        def __init__(self) -> None:
            self.inner = httpcore.SyncBackend()

        def connect_tcp(
            self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
            socket_options: Any = None,
        ) -> Any:  # fmt: skip
            left = deadline.left(timeout, httpcore.ConnectTimeout)
            return _Stream(self.inner.connect_tcp(host, port, left, local_address, socket_options))

        def connect_unix_socket(self, path: str, timeout: float | None = None, socket_options: Any = None) -> Any:
            raise httpcore.UnsupportedProtocol("endpoints are reached over TCP")

        def sleep(self, seconds: float) -> None:
            time.sleep(seconds)

    return _Backend()


class Wire:
    """Exchanges with one server: each within ``timeout`` seconds, each answer within ``max_bytes`` (module doc).

    Args:
        headers: sent with every request (the user's, e.g. credentials).
        timeout: seconds one whole exchange may take (connecting: at most 5 of them).
        max_bytes: the largest answer body read, decoded.
        concurrency: connections kept (requests in flight at once).
    """

    def __init__(self, headers: list[tuple[str, str]], timeout: float, max_bytes: int, concurrency: int) -> None:
        import httpcore

        self.httpcore = httpcore
        self.timeout = timeout
        self.max_bytes = max_bytes
        self.deadline = _Deadline()
        self.headers = [("Accept", "application/json"), ("Accept-Encoding", "gzip, deflate"), *headers]
        self.pool = httpcore.ConnectionPool(
            max_connections=concurrency,
            max_keepalive_connections=concurrency,
            network_backend=_backend(httpcore, self.deadline),
        )
        self.limits = {"connect": min(timeout, 5.0), "read": timeout, "write": timeout, "pool": timeout}

    def close(self) -> None:
        self.pool.close()

    def exchange(self, method: str, url: str, body: bytes | None = None) -> Answer:
        """One request and its answer, whole, within the deadline and the size limit (or an exception)."""
        headers = list(self.headers)
        if body is not None:
            headers += [("Content-Type", "application/json"), ("Content-Length", str(len(body)))]
        content = [body[i : i + PIECE] for i in range(0, len(body), PIECE)] if body else None
        self.deadline.at = time.monotonic() + self.timeout
        try:
            with self.pool.stream(
                method, url, headers=headers, content=content, extensions={"timeout": self.limits}
            ) as response:
                got = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in response.headers}
                if 300 <= response.status < 400:  # never followed, never read
                    return Answer(response.status, got, b"")
                limit = self.max_bytes if response.status < 400 else min(self.max_bytes, ERROR_BYTES)
                return Answer(response.status, got, _read(response, got, limit, cut=response.status >= 400))
        finally:
            self.deadline.at = None


def _declared(headers: dict[str, str]) -> int | None:
    try:
        return int(headers["content-length"])
    except (KeyError, ValueError):
        return None


def _decoder(headers: dict[str, str]) -> Any:
    """A zlib inflater for the answer's ``Content-Encoding`` (None for none); :class:`Undecodable` for another."""
    coding = headers.get("content-encoding", "").strip().lower()
    if coding in ("", "identity"):
        return None
    if coding not in ENCODINGS:
        raise Undecodable(f"in the encoding '{coding[:40]}', which privgate did not ask for")
    return zlib.decompressobj(zlib.MAX_WBITS | 32)  # gzip or zlib ("deflate"), told apart by their header


def _read(response: Any, headers: dict[str, str], limit: int, cut: bool) -> bytes:
    """The body, decoded, refused (:class:`TooLarge`) or — with ``cut`` — truncated past ``limit`` bytes."""
    declared = _declared(headers)
    if declared is not None and declared > limit and not cut:
        raise TooLarge(limit, f"it declares {declared:,} bytes")
    inflate = _decoder(headers)
    out = bytearray()
    arrived = 0
    chunks: Iterator[bytes] = response.iter_stream()
    for chunk in chunks:
        arrived += len(chunk)
        try:
            piece = inflate.decompress(chunk, limit + 1 - len(out)) if inflate else chunk
        except zlib.error:
            raise Undecodable("whose compressed body is corrupt") from None
        out += piece
        if len(out) > limit or arrived > limit or (inflate and inflate.unconsumed_tail):
            if cut:
                return bytes(out[:limit])
            inflated = inflate is not None and arrived <= limit
            raise TooLarge(limit, "more than that once inflated" if inflated else "more than that arrived")
    if inflate:
        try:
            out += inflate.flush()
        except zlib.error:
            raise Undecodable("whose compressed body is corrupt") from None
        if len(out) > limit and not cut:
            raise TooLarge(limit, "more than that once inflated")
    return bytes(out) if len(out) <= limit else bytes(out[:limit])


__all__ = ["ENCODINGS", "ERROR_BYTES", "Answer", "TooLarge", "Undecodable", "Wire"]
