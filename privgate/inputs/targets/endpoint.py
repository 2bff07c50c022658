"""A live inference endpoint as a black-box target: ``privgate check http://HOST:PORT/v2/models/NAME``.

The rest (design, limits, derivations): docs/internals-inputs.md.
"""

from __future__ import annotations

import re
import time
import weakref
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from privgate.errors import TargetError, shown
from privgate.inputs.targets import oip
from privgate.inputs.targets.blackbox import BlackBox
from privgate.inputs.targets.onnxfile import SCORES

#: The output MLServer's scikit-learn runtime answers with the estimator's predict_proba.
MLSERVER_PROBA = "predict_proba"
#: A header's name: an HTTP token (RFC 9110 §5.1).
_TOKEN = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
#: A header's value: visible ASCII, spaces and tabs (no line break that would start another header).
_VALUE = re.compile(r"^[\t\x20-\x7e]*$")
#: The smallest answer limit accepted (any metadata is larger).
MIN_BYTES = 1024


@dataclass(frozen=True)
class Access:
    """How an endpoint is queried.

    Attributes:
        headers: HTTP headers sent with every request (e.g. ``Authorization``); values never reach a report.
        max_queries: the most distinct rows privgate may send (``None``: no limit).
        output: the output tensor to read, when the server has several (or answers labels by default).
        batch: rows per request.
        concurrency: requests in flight at once.
        timeout: seconds a whole request may take, answer included (connect: at most 5).
        max_bytes: the largest answer read (its body, decompressed).
        retries: further tries of a request after a 429, a 5xx or a dropped connection.
        backoff: seconds before the first retry, doubled after each.
    """

    headers: tuple[tuple[str, str], ...] = ()
    max_queries: int | None = None
    output: str | None = None
    batch: int = 256
    concurrency: int = 4
    timeout: float = 30.0
    max_bytes: int = oip.MAX_BYTES
    retries: int = 3
    backoff: float = 0.5
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for key, low in (("batch", 1), ("concurrency", 1), ("retries", 0), ("max_bytes", MIN_BYTES)):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise TargetError(f"endpoint setting '{key}' must be an integer of at least {low}, got {value!r}.")
        if self.max_queries is not None and (not isinstance(self.max_queries, int) or self.max_queries < 1):
            raise TargetError(f"endpoint setting 'max_queries' must be a positive integer, got {self.max_queries!r}.")
        if not self.timeout > 0:
            raise TargetError(f"endpoint setting 'timeout' must be positive, got {self.timeout!r}.")
        for name, value in self.headers:
            _check_header(name, value)


def _check_header(name: Any, value: Any) -> None:
    """A header privgate can send as given; the message names the header, never its value."""
    if not isinstance(name, str) or not _TOKEN.match(name):
        raise TargetError(f"--header: {shown(name, 80)} is not a header name (letters, digits and -_.!#$%&'*+^`|~).")
    if not isinstance(value, str) or not _VALUE.match(value):
        raise TargetError(
            f"--header {name}: its value holds a line break, another control character or a character beyond ASCII "
            "(the value is not shown)."
        )


def parse_header(text: str) -> tuple[str, str]:
    """``'Name: value'`` as ``(name, value)``; the message names the header, never its value."""
    name, sep, value = text.partition(":")
    name = name.strip()
    if not sep or not name or not _TOKEN.match(name):  # it may be a bare secret: none of it is shown
        raise TargetError(
            "--header: expected 'Name: value', e.g. 'Authorization: Bearer TOKEN' (the value given is not shown)."
        )
    _check_header(name, value.strip())
    return name, value.strip()


class Endpoint(BlackBox):
    """An Open Inference Protocol v2 model (see the module docstring)."""

    fmt = "endpoint"

    def __init__(self, url: oip.ModelURL, client: oip.Client, access: Access, metadata: dict[str, Any]) -> None:
        self.url = url
        self.source = url.shown
        self.sha256 = None
        self.client = client
        self.access = access
        self.metadata = metadata
        read = oip.read_metadata(metadata, self.source)
        self.input_name, self.datatype, self.row_shape = read.input_name, read.datatype, read.row_shape
        self.listed = list(read.outputs)
        self.output = access.output or self._from_metadata(self.listed)
        weakref.finalize(self, client.close)  # its connections close with it (a target has no close of its own)
        self.asked_for_proba = False
        self.memo: dict[bytes, np.ndarray] = {}
        self.queries = 0
        self.seconds = 0.0
        self.kind = None

    @classmethod
    def connect(cls, url: str, access: Access | None = None) -> Endpoint:
        """Parse ``url``, read the model's metadata (a bounded request: a server that is down is one sentence)."""
        access = access or Access()
        parsed = oip.parse_url(url)
        client = oip.Client(
            parsed,
            dict(access.headers),
            access.timeout,
            access.retries,
            access.backoff,
            access.concurrency,
            access.max_bytes,
        )
        t0 = time.perf_counter()
        try:
            with _masked(client):
                metadata = client.call("GET", parsed.model_path)
                endpoint = cls(parsed, client, access, metadata)
        except BaseException:
            client.close()
            raise
        endpoint.seconds += time.perf_counter() - t0
        return endpoint

    def _from_metadata(self, listed: list[str]) -> str | None:
        if len(listed) <= 1:
            return listed[0] if listed else None
        named = [n for n in listed if SCORES.search(n)]
        if named:
            return named[0]
        raise TargetError(
            f"{self.source}: the model has {len(listed)} outputs ({', '.join(shown(n, 80) for n in listed[:10])}) "
            "and none is recognisably the "
            "class probabilities or logits; name one with --endpoint-output."
        )

    # ------------------------------------------------------------------ querying

    def _infer(self, x: np.ndarray, output: str | None) -> tuple[str, np.ndarray, str]:
        """One request: ``(output name, its tensor, its datatype)`` for the rows ``x``."""
        payload: dict[str, Any] = {"inputs": [oip.tensor(self.input_name, x, self.datatype, self.source)]}
        if output:
            payload["outputs"] = [{"name": output}]
        try:
            body = self.client.call("POST", self.url.infer_path, payload)
        except TargetError as exc:  # a server's 500 often means rows it cannot take: say what was sent
            raise TargetError(f"{str(exc).rstrip('.')}, sent {len(x)} row(s) of shape {tuple(x.shape[1:])}.") from None
        listed = body.get("outputs")
        if not isinstance(listed, list):
            raise TargetError(f"{self.source}: the answer has outputs {shown(listed, 80)}, expected a list of tensors.")
        outs = [o for o in listed if isinstance(o, dict)]
        chosen = [o for o in outs if o.get("name") == output] if output else outs
        if len(chosen) != 1:
            names = ", ".join(shown(o.get("name"), 80) for o in outs[:10]) or "none"
            want = f"the output '{output}'" if output else "one output"
            raise TargetError(f"{self.source}: the answer holds outputs {names}, expected {want}.")
        arr = oip.read_tensor(chosen[0], self.source)
        if arr.ndim == 0 or arr.shape[0] != len(x):
            raise TargetError(
                f"{self.source}: the server answered {arr.shape[0] if arr.ndim else 0} rows of output for "
                f"{len(x)} input rows (shape {list(arr.shape)})."
            )
        name = oip.tensor_name(chosen[0], self.source, "its output") or ""
        return name, arr, str(chosen[0].get("datatype", ""))

    def _settle_output(self, x: np.ndarray) -> None:
        """Decide which output to read when neither the user nor the metadata said (see the module docstring)."""
        name, _, datatype = self._infer(x[:1], None)
        self.queries += 1  # the probe rows are queries too (sent again with the batch they belong to)
        if datatype in oip.FLOATS:
            self.output = name
            return
        try:  # integer labels: MLServer's scikit-learn runtime selects predict_proba by the output's name
            self._infer(x[:1], MLSERVER_PROBA)
            self.queries += 1
        except TargetError:
            raise TargetError(
                f"{self.source}: the endpoint answers {shown(datatype or 'non-float', 40)} {shown(name, 80)} (labels, "
                "not scores) and has no 'predict_proba' output; name its probability output with --endpoint-output."
            ) from None
        self.output = MLSERVER_PROBA
        self.asked_for_proba = True

    def _check_rows(self, x: np.ndarray) -> None:
        """Rows of another shape than the metadata's input takes (``-1``: any) are refused before any query."""
        want, got = self.row_shape, tuple(x.shape[1:])
        if want is None or (len(want) == len(got) and all(w < 0 or w == g for w, g in zip(want, got))):
            return
        shown = tuple(w if w >= 0 else "?" for w in want)
        raise TargetError(
            f"{self.source}: the model's input '{self.input_name}' takes rows of shape {shown}, the audit data has "
            f"rows of shape {got}."
        )

    def raw(self, x: np.ndarray) -> np.ndarray:
        with _masked(self.client):
            return self._raw(x)

    def _raw(self, x: np.ndarray) -> np.ndarray:
        x = np.ascontiguousarray(x)
        self._check_rows(x)
        keys = [row.tobytes() for row in x]
        todo = list(dict.fromkeys(k for k in keys if k not in self.memo))
        if todo:
            rows = {k: i for i, k in reversed(list(enumerate(keys)))}
            fresh = x[[rows[k] for k in todo]]
            self._spend(len(todo) + (2 if self.output is None else 0))  # finding the output costs up to 2 rows
            t0 = time.perf_counter()
            try:
                if self.output is None:
                    self._settle_output(fresh)
                out = self._query(fresh)
            finally:
                self.seconds += time.perf_counter() - t0
            self.queries += len(todo)
            self.memo.update(zip(todo, out))
        return np.stack([self.memo[k] for k in keys]) if keys else np.zeros((0, 0))

    def _spend(self, rows: int) -> None:
        cap = self.access.max_queries
        if cap is not None and self.queries + rows > cap:
            raise TargetError(
                f"{self.source}: the query budget of {cap} rows (--max-queries) would be exceeded: {self.queries} "
                f"sent, {rows} more needed; raise the budget or audit fewer rows."
            )

    def _query(self, x: np.ndarray) -> list[np.ndarray]:
        step = self.access.batch
        chunks = [x[i : i + step] for i in range(0, len(x), step)]
        if len(chunks) == 1 or self.access.concurrency == 1:
            answers = [self._infer(c, self.output)[1] for c in chunks]
        else:
            with ThreadPoolExecutor(max_workers=min(self.access.concurrency, len(chunks))) as pool:
                answers = [f[1] for f in pool.map(lambda c: self._infer(c, self.output), chunks)]
        return [row for a in answers for row in np.asarray(a, dtype=np.float64)]

    def describe(self) -> dict[str, Any]:
        section = {
            "url": self.url.shown,
            "protocol": "open-inference-v2",
            "model": self.url.name,
            "input": {"name": self.client.redact(self.input_name), "datatype": self.datatype},
            "output": self.client.redact(self.output) if self.output is not None else None,
            "queries": self.queries,
            "requests": self.client.requests,
            "retries": self.client.retried,
            "seconds": round(self.seconds, 3),
            "max_queries": self.access.max_queries,
            "batch": self.access.batch,
            "concurrency": self.access.concurrency,
            "headers": sorted({name for name, _ in self.access.headers}),  # names only: values may be secrets
        }
        if self.asked_for_proba:
            section["note"] = (
                "the endpoint answers labels by default; privgate asked for its 'predict_proba' output "
                "(MLServer's scikit-learn runtime)"
            )
        return {**super().describe(), "endpoint": section}


@contextmanager
def _masked(client: oip.Client) -> Iterator[None]:
    """Every sentence raised inside with the credentials masked: the server chose the names it quotes."""
    try:
        yield
    except TargetError as exc:
        raise TargetError(client.mask(str(exc))) from None


__all__ = ["Access", "Endpoint", "MLSERVER_PROBA", "parse_header"]
