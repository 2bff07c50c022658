"""A hostile Open Inference Protocol v2 server on 127.0.0.1: each model name is one way of misbehaving.

``GET /v2/models/NAME`` (metadata) and ``POST /v2/models/NAME/infer`` answer as
:data:`MODES` says; ``ok`` is a well-behaved two-class model (probabilities from
the first feature), so a run gets as far as the misbehaviour under test. The
server runs in daemon threads of the test process and is bounded: a trickling
answer stops after :data:`MOST_SECONDS`, when the client hangs up, or when the
server is stopped; it keeps what it was sent (:attr:`Hostile.seen`: the
``Authorization`` header of every request, by model name) for the tests to read.
"""

from __future__ import annotations

import base64
import json
import threading
import time
import zlib
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

#: The longest a trickling answer keeps going (then the handler returns).
MOST_SECONDS = 120.0

INPUTS = [{"name": "x", "datatype": "FP64", "shape": [-1, 4]}]
OUTPUTS = [{"name": "probs", "datatype": "FP64", "shape": [-1, 2]}]


def _metadata(outputs: list[dict[str, Any]] | None = None, inputs: Any = None) -> dict[str, Any]:
    return {
        "name": "m",
        "inputs": INPUTS if inputs is None else inputs,
        "outputs": OUTPUTS if outputs is None else outputs,
    }


def _probs(rows: list[list[float]]) -> list[float]:
    flat: list[float] = []
    for row in rows:
        p = min(max(0.5 + 0.4 * float(row[0]), 0.01), 0.99)
        flat += [1 - p, p]
    return flat


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Hostile

    # ------------------------------------------------------------------ plumbing

    def log_message(self, *args: object) -> None:
        pass

    def _json(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def _trickle(self, data: bytes, every: float = 0.2) -> None:
        """Send ``data`` a byte at a time, one per ``every`` seconds, until done, hung up on, stopped or too long."""
        end = time.monotonic() + MOST_SECONDS
        for i in range(len(data)):
            if self.server.stopping.is_set() or time.monotonic() > end:
                return
            try:
                self.wfile.write(data[i : i + 1])
            except OSError:
                return
            self.server.stopping.wait(every)

    def _flood(self, chunk: bytes, total: int, chunked: bool = False) -> None:
        """Send ``total`` bytes of ``chunk`` repeated (as HTTP chunks when ``chunked``) until done or hung up on."""
        sent = 0
        try:
            while sent < total and not self.server.stopping.is_set():
                piece = chunk[: total - sent]
                self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece) if chunked else piece)
                sent += len(piece)
            if chunked:
                self.wfile.write(b"0\r\n\r\n")
        except OSError:
            pass
        self.server.sent[self.path] = self.server.sent.get(self.path, 0) + sent

    # ------------------------------------------------------------------ the protocol, misbehaving

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        self._answer(None)

    def do_POST(self) -> None:  # noqa: N802
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self._answer(json.loads(body))

    def _answer(self, payload: dict[str, Any] | None) -> None:
        parts = self.path.split("/")  # ['', 'v2', 'models', NAME, ('infer')]
        mode = parts[3] if len(parts) > 3 else ""
        auth = self.headers.get("Authorization", "")
        self.server.seen.setdefault(mode, []).append(auth)
        infer = payload is not None
        rows = payload["inputs"][0]["data"] if infer else []
        n = payload["inputs"][0]["shape"][0] if infer else 0
        width = payload["inputs"][0]["shape"][1] if infer else 0
        rows = [rows[i * width : (i + 1) * width] for i in range(n)]

        def outputs(data: list[Any], datatype: str = "FP64", name: str = "probs") -> dict[str, Any]:
            return {"outputs": [{"name": name, "datatype": datatype, "shape": [n, 2], "data": data}]}

        if mode == "ok":
            self._json(200, outputs(_probs(rows)) if infer else _metadata())
        elif mode == "slow-body":  # the headers at once, then the body a byte every 0.2 s (each read is quick)
            data = b" " * 1_000_000
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self._trickle(data)
        elif mode == "slow-headers":  # the status line, then the headers a byte every 0.2 s
            self.wfile.write(b"HTTP/1.1 200 OK\r\n")
            self._trickle(b"X-Slow: " + b"a" * 100_000)
        elif mode == "huge":  # declares 300 MB (and sends them as fast as it can)
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(300_000_000))
            self.end_headers()
            self._flood(b" " * 65536, 300_000_000)
        elif mode == "huge-chunked":  # 300 MB in chunks, no length said
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            self._flood(b" " * 65536, 300_000_000, chunked=True)
        elif mode == "gzip-bomb":  # 256 KB on the wire, 256 MiB of spaces once decoded
            data = self.server.bomb()
            self._json(200, data, {"Content-Encoding": "gzip"})
        elif mode == "echo":  # an error message that repeats the credentials it was sent
            said = auth
            if auth.startswith("Basic "):
                said += " = " + base64.b64decode(auth[6:]).decode()
            self._json(400, {"error": f"bad token {said}"})
        elif mode == "echo-busy":  # the same, as a 503 (retried, the last answer quoted)
            self._json(503, {"detail": f"overloaded, token {auth.split()[-1] if auth else ''} queued"})
        elif mode == "echo-names":  # tensor names that repeat the credentials
            named = [{"name": f"logits {auth}", "datatype": "FP64", "shape": [-1, 2]}]
            if infer:
                self._json(200, outputs(_probs(rows), name=f"logits {auth}"))
            else:
                self._json(200, _metadata(named, [{"name": auth, "datatype": "FP64", "shape": [-1, 4]}]))
        elif mode == "echo-datatype":  # a datatype that repeats the credentials, on an answer of labels
            if infer:
                self._json(200, {"outputs": [{"name": "label", "datatype": auth, "shape": [n], "data": [0] * n}]})
            else:
                self._json(200, _metadata([]))
        elif mode == "deep-metadata":
            self._json(200, b"[" * 100_000 + b"]" * 100_000)
        elif mode == "deep-answer":
            self._json(200, b"[" * 100_000 + b"]" * 100_000 if infer else _metadata())
        elif mode == "deep-error":
            self._json(400, b'{"error": ' + b"[" * 100_000 + b"]" * 100_000 + b"}")
        elif mode == "bad-shape":
            self._json(200, _metadata(inputs=[{"name": "x", "datatype": "FP64", "shape": ["-1", "abc"]}]))
        elif mode == "bad-inputs":
            self._json(200, _metadata(inputs={"x": 1}))
        elif mode == "bad-output-shape":
            self._json(200, {"outputs": [{"name": "probs", "datatype": "FP64", "shape": ["-1", "abc"], "data": []}]}
                       if infer else _metadata())  # fmt: skip
        elif mode in ("nan", "infinity"):  # the last row's probabilities are not numbers
            data = _probs(rows)
            data[-2:] = [float("nan" if mode == "nan" else "inf")] * 2
            self._json(200, outputs(data) if infer else _metadata())
        elif mode == "fp16-overflow":  # logits beyond FP16's range, declared FP16
            data = [70000.0 * (i % 2) for i in range(2 * n)]
            self._json(200, outputs(data, "FP16") if infer else _metadata([{**OUTPUTS[0], "datatype": "FP16"}]))
        elif mode == "int-overflow":  # no outputs listed; an answer of INT8 labels holding 1000
            self._json(200, outputs([1000] * (2 * n), "INT8") if infer else _metadata([]))
        elif mode == "redirect":  # to another host, which records whether the credentials came along
            target = f"http://127.0.0.1:{self.server.other_port}/v2/models/collect" + ("/infer" if infer else "")
            self._json(307, {"moved": target}, {"Location": target})
        else:
            self._json(404, {"error": f"Model {mode} not found"})


class Hostile(ThreadingHTTPServer):
    """The server; :meth:`start` runs it in a daemon thread, :meth:`stop` ends it and every trickling answer."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.stopping = threading.Event()
        self.seen: dict[str, list[str]] = {}
        self.sent: dict[str, int] = {}
        self.other_port = 0
        self._bomb: bytes | None = None
        self._lock = threading.Lock()

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def bomb(self) -> bytes:
        """256 MiB of spaces, gzipped (about 256 KB), built once."""
        with self._lock:
            if self._bomb is None:
                z = zlib.compressobj(9, zlib.DEFLATED, 31)
                block = b" " * (1 << 20)
                self._bomb = b"".join(z.compress(block) for _ in range(256)) + z.flush()
            return self._bomb

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that hangs up on a misbehaving answer is what the tests expect

    def start(self) -> Hostile:
        threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True).start()
        return self

    def stop(self) -> None:
        self.stopping.set()
        self.shutdown()
        self.server_close()


@contextmanager
def hostile(other_port: int = 0):
    """A running :class:`Hostile` server (``other_port``: where ``redirect`` points)."""
    server = Hostile()
    server.other_port = other_port
    server.start()
    try:
        yield server
    finally:
        server.stop()


__all__ = ["Hostile", "hostile"]
