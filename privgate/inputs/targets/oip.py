"""The Open Inference Protocol v2 over HTTP: URLs, requests with retries, metadata and tensors in and out.

The rest (design, limits, derivations): docs/internals-inputs.md.
"""

from __future__ import annotations

import base64
import json
import re
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

import numpy as np

from privgate.errors import TargetError, shown
from privgate.inputs.targets.redact import Redactor

_PATH = re.compile(r"^(?P<prefix>.*?)/v2/models/(?P<name>[^/]+)(?:/versions/(?P<version>[^/]+))?/?$")

#: Datatypes of the protocol, as numpy dtypes.
DATATYPES = {
    "BOOL": np.bool_,
    "UINT8": np.uint8,
    "UINT16": np.uint16,
    "UINT32": np.uint32,
    "UINT64": np.uint64,
    "INT8": np.int8,
    "INT16": np.int16,
    "INT32": np.int32,
    "INT64": np.int64,
    "FP16": np.float16,
    "FP32": np.float32,
    "FP64": np.float64,
}
FLOATS = ("FP16", "FP32", "FP64")
#: Statuses worth another try: the server is busy or briefly broken.
RETRY_STATUS = frozenset({429, 500, 502, 503, 504})
#: Longest wait between two tries, whatever ``Retry-After`` asks.
MAX_WAIT = 10.0
#: Largest answer read by default (``--endpoint-max-bytes``): 256 rows of 10,000 classes as JSON fit.
MAX_BYTES = 32 << 20
#: Longest tensor name accepted from a server.
MAX_NAME = 256


@dataclass(frozen=True)
class ModelURL:
    """``http(s)://[USER:PASSWORD@]HOST[:PORT][/PREFIX]/v2/models/NAME[/versions/V]``, split.

    :attr:`shown` has no credentials nor query string; :attr:`base` no credentials: they are sent as a
    ``Basic`` ``Authorization`` header (:attr:`credentials`, never in a repr).
    """

    base: str
    name: str
    version: str | None
    shown: str
    credentials: tuple[str, str] | None = field(default=None, repr=False, compare=False)

    @property
    def model_path(self) -> str:
        return f"{self.base}/v2/models/{self.name}" + (f"/versions/{self.version}" if self.version else "")

    @property
    def infer_path(self) -> str:
        return self.model_path + "/infer"


def _netloc(parts: Any) -> str:
    host = parts.hostname or ""
    netloc = host if ":" not in host else f"[{host}]"
    return netloc + (f":{parts.port}" if parts.port else "")


def parse_url(url: str) -> ModelURL:
    """Split an endpoint URL; one sentence when it does not name a model of the protocol."""
    parts = urlsplit(url)
    try:
        netloc = _netloc(parts)
    except ValueError:  # a port that is not a number
        netloc = ""
    shown_url = urlunsplit((parts.scheme, netloc, parts.path, "", ""))  # no user:password@, no ?query
    m = _PATH.match(parts.path)
    if parts.scheme not in ("http", "https") or not netloc or m is None:
        raise TargetError(
            f"{shown_url or 'the model URL'}: expected an Open Inference Protocol v2 model URL, "
            "http(s)://HOST:PORT/v2/models/NAME."
        )
    base = urlunsplit((parts.scheme, netloc, m.group("prefix"), "", ""))
    credentials = None
    if parts.username is not None or parts.password is not None:
        credentials = (unquote(parts.username or ""), unquote(parts.password or ""))
    return ModelURL(base, m.group("name"), m.group("version"), shown_url, credentials)


def _location(value: str | None) -> str:
    """Where a redirect points, shown without credentials or query (or 'elsewhere')."""
    try:
        parts = urlsplit(value or "")
        where = urlunsplit((parts.scheme, _netloc(parts), parts.path, "", ""))
    except ValueError:
        where = ""
    return f"to {shown(where, 200)}" if where else "elsewhere"


def _server_message(body: bytes) -> str:
    """What an error answer says (its JSON ``error`` or ``detail``, else its last line), short."""
    try:
        data = json.loads(body)
        text: Any = (data.get("error") or data.get("detail") or "") if isinstance(data, dict) else ""
    except RecursionError:
        return " (its message: JSON nested too deeply to read)"
    except ValueError:  # not JSON: a traceback's last line says what went wrong
        lines = [line for line in body.decode("utf-8", "replace").splitlines() if line.strip()]
        text = lines[-1] if lines else ""
    text = " ".join((text if isinstance(text, str) else shown(text, 200)).split())
    return f": {text[:200]}" if text else ""


class Client:
    """The protocol's two calls with bounded exchanges and retries (see the module docstring).

    Args:
        url: the model.
        headers: sent with every request; the URL's ``user:password`` is sent as ``Basic`` authorization unless
            they hold an ``Authorization`` of their own.
        timeout: seconds one whole exchange may take (``--endpoint-timeout``).
        retries: further tries after a 429, a 5xx, a timeout or a dropped connection.
        backoff: seconds before the first retry, doubled after each.
        concurrency: requests in flight at once.
        max_bytes: the largest answer read (``--endpoint-max-bytes``).
    """

    def __init__(
        self,
        url: ModelURL,
        headers: dict[str, str],
        timeout: float,
        retries: int,
        backoff: float,
        concurrency: int,
        max_bytes: int = MAX_BYTES,
    ) -> None:
        try:
            import httpcore

            from privgate.inputs.targets.wire import Wire
        except ImportError:
            raise TargetError(f"{url.shown}: live endpoints need httpcore: pip install 'privgate[serve]'.") from None
        self.httpcore = httpcore
        self.url = url
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self.max_bytes = max_bytes
        sent = list(headers.items())
        if url.credentials and not any(k.lower() == "authorization" for k in headers):
            basic = base64.b64encode(":".join(url.credentials).encode()).decode()
            sent.append(("Authorization", f"Basic {basic}"))
        #: Masks every credential sent in a text (what servers say is quoted through it).
        self.redact = Redactor([v for _, v in sent] + list(url.credentials or ()))
        self.wire = Wire(sent, timeout, max_bytes, concurrency)
        self.requests = 0
        self.retried = 0

    def close(self) -> None:
        self.wire.close()

    def mask(self, text: str) -> str:
        """``text`` with every credential masked; the endpoint's URL it starts with is kept as the user typed it."""
        head = self.url.shown
        return head + self.redact(text[len(head) :]) if text.startswith(head) else self.redact(text)

    def _fail(self, text: str) -> TargetError:
        return TargetError(self.mask(f"{self.url.shown}: {text}"))

    def call(self, method: str, path: str, payload: dict[str, Any] | None = None) -> dict[str, Any]:
        """One request, retried on 429/5xx, timeouts and dropped connections; its JSON answer, or one sentence."""
        from privgate.inputs.targets.wire import TooLarge, Undecodable

        httpcore = self.httpcore
        body = json.dumps(payload).encode() if payload is not None else None
        last = ""
        for attempt in range(self.retries + 1):
            if attempt:
                self.retried += 1
            self.requests += 1
            wait = self.backoff * 2**attempt
            try:
                answer = self.wire.exchange(method, path, body)
            except httpcore.TimeoutException:
                last = f"no complete answer within {self.timeout:g} s, the --endpoint-timeout"
            except httpcore.ConnectError:
                last = "cannot connect (ConnectError)"
            except (httpcore.NetworkError, httpcore.RemoteProtocolError) as exc:
                last = f"the connection failed ({exc.__class__.__name__})"
            except TooLarge as exc:
                raise self._fail(
                    f"the server's answer is larger than {_size(exc.limit)}, the most privgate reads of one answer "
                    f"({exc.how}); raise --endpoint-max-bytes (config 'endpoint_max_bytes') if the model's answers "
                    "are that large, or send fewer rows per request with --endpoint-batch."
                ) from None
            except Undecodable as exc:
                raise self._fail(f"the server answered {exc}.") from None
            else:
                status = answer.status
                if 300 <= status < 400:
                    raise self._fail(
                        f"the server redirects (HTTP {status}) {_location(answer.headers.get('location'))}; privgate "
                        "follows no redirect (the headers sent, credentials included, would go along): give the URL "
                        "the model is served at."
                    )
                said = self.redact(_server_message(answer.body)) if status >= 400 else ""
                if status == 404:
                    version = f" version '{self.url.version}'" if self.url.version else ""
                    raise self._fail(f"the server has no model '{self.url.name}'{version} (HTTP 404{said}).")
                if status in (401, 403):
                    raise self._fail(
                        f"the server refused the credentials (HTTP {status}); pass them with --header "
                        "'Authorization: Bearer …'."
                    )
                if status not in RETRY_STATUS and status >= 400:
                    raise self._fail(f"the server rejected the request (HTTP {status}{said}).")
                if status < 400:
                    return self._json(answer.body)
                last = f"HTTP {status}{said}"
                wait = _retry_after(answer.headers) or wait
            if attempt < self.retries:
                time.sleep(min(wait, MAX_WAIT))
        tries = "once" if self.retries == 0 else f"{self.retries + 1} times"
        raise self._fail(f"the endpoint failed {tries} ({last}).")

    def _json(self, body: bytes) -> dict[str, Any]:
        try:
            data = json.loads(body)
        except RecursionError:
            raise self._fail("the server's answer is JSON nested too deeply to read.") from None
        except ValueError:
            raise self._fail("the server's answer is not JSON.") from None
        if not isinstance(data, dict):
            raise self._fail("the server's answer is not a JSON object.")
        return data


def _size(n: int) -> str:
    """``32 MiB (33,554,432 bytes)``, or ``1,000 bytes``."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):g} {unit} ({n:,} bytes)"
    return f"{n:,} bytes"


def _retry_after(headers: dict[str, str]) -> float | None:
    value = headers.get("retry-after")
    try:
        wait = float(value) if value is not None else None
    except ValueError:
        return None
    return max(0.0, wait) if wait is not None and np.isfinite(wait) else None


@dataclass(frozen=True)
class Metadata:
    """What a model's metadata says privgate needs: its first input and its outputs' names."""

    input_name: str = "input-0"
    datatype: str = "FP64"
    row_shape: tuple[int, ...] | None = None
    outputs: tuple[str, ...] = ()


def _tensors(body: dict[str, Any], key: str, where: str) -> list[dict[str, Any]]:
    found = body.get(key)
    if found is None:
        return []
    if not isinstance(found, list) or not all(isinstance(t, dict) for t in found):
        raise TargetError(f"{where}: the model's metadata has {key} {shown(found, 80)}, expected a list of tensors.")
    return found


def tensor_name(tensor: dict[str, Any], where: str, what: str) -> str | None:
    """A tensor's name as the server gives it (None when it gives none); one sentence when it is no name."""
    name = tensor.get("name")
    if name is None or name == "":
        return None
    if not isinstance(name, str) or len(name) > MAX_NAME:
        raise TargetError(f"{where}: the server names {what} {shown(name, 80)}, expected a name of text.")
    return name


def read_metadata(body: dict[str, Any], where: str) -> Metadata:
    """The model's first input (name, datatype, row shape) and its outputs' names; one sentence when malformed.

    A datatype privgate does not know is sent as FP64 (the server says so if it minds).
    """
    inputs = _tensors(body, "inputs", where)
    names = tuple(n for o in _tensors(body, "outputs", where) if (n := tensor_name(o, where, "an output")) is not None)
    if not inputs:
        return Metadata(outputs=names)
    first = inputs[0]
    name = tensor_name(first, where, "the input") or "input-0"
    datatype = first.get("datatype")
    datatype = datatype if isinstance(datatype, str) and datatype in DATATYPES else "FP64"
    shape = first.get("shape")
    if shape is not None and not (
        isinstance(shape, list)
        and len(shape) >= 1
        and all(isinstance(s, int) and not isinstance(s, bool) and s >= -1 for s in shape)
    ):
        raise TargetError(
            f"{where}: the model's metadata gives the input '{name}' the shape {shown(shape, 80)}, expected a list "
            "of integers (-1: any size)."
        )
    return Metadata(name, datatype, tuple(shape[1:]) if shape else None, names)


def _out_of_range(values: np.ndarray, datatype: str) -> str | None:
    """Why ``values`` (float64, finite) do not fit ``datatype``, or None when they do."""
    dtype = np.dtype(DATATYPES[datatype])
    if dtype.kind == "f":
        top = float(np.finfo(dtype).max)
        return f"beyond {datatype}'s range (±{top:g})" if values.size and np.abs(values).max() > top else None
    if dtype.kind == "b":
        return None if np.isin(values, (0, 1)).all() else "other than 0 and 1"
    info = np.iinfo(dtype)
    top = 2.0 ** (info.bits - 1 if info.min < 0 else info.bits)  # exclusive, exact in float64 (info.max is not)
    if values.size and (values.min() < info.min or values.max() >= top):
        return f"outside {datatype}'s range ({info.min}..{info.max})"
    return None if np.array_equal(values, np.round(values)) else "that are not integers"


def tensor(name: str, x: np.ndarray, datatype: str, where: str) -> dict[str, Any]:
    """An input tensor of the protocol: ``x`` flattened, cast to ``datatype`` (refused when it does not fit)."""
    values = np.ascontiguousarray(x, dtype=np.float64)
    problem = _out_of_range(values, datatype)
    if problem is not None:
        raise TargetError(
            f"{where}: the model's input '{name}' takes {datatype}, and the audit data has values {problem}."
        )
    arr = values.astype(DATATYPES[datatype])
    return {"name": name, "shape": list(arr.shape), "datatype": datatype, "data": arr.ravel().tolist()}


def read_tensor(out: dict[str, Any], where: str) -> np.ndarray:
    """An output tensor of the protocol as an array of its shape; one sentence when it is malformed.

    Its values must be finite numbers that fit its datatype: NaN, ±Infinity or an FP16 value past 65504 is a
    model or server fault, refused here rather than turned into a score no attack can rank.
    """
    name = shown(out.get("name"), 80)
    datatype = out.get("datatype", "FP64")
    if not isinstance(datatype, str) or datatype not in DATATYPES:
        raise TargetError(f"{where}: the server's output {name} has the datatype {shown(datatype, 40)}.")
    shape = out.get("shape")
    if not (isinstance(shape, list) and all(isinstance(s, int) and not isinstance(s, bool) for s in shape)):
        raise TargetError(f"{where}: the server's output {name} has the shape {shown(shape, 80)}, expected integers.")
    try:
        values = np.asarray(out.get("data"), dtype=np.float64)
    except (TypeError, ValueError, OverflowError):
        raise TargetError(f"{where}: the server's output {name} holds data that are not numbers.") from None
    if values.size != int(np.prod(shape, dtype=object)) or any(s < 0 for s in shape):
        raise TargetError(
            f"{where}: the server's output {name} has the shape {shown(shape, 80)} but {values.size:,} values."
        )
    values = values.reshape(shape)
    bad = ~np.isfinite(values)
    if bad.any():
        rows = int(bad.reshape(len(bad), -1).any(axis=1).sum()) if values.ndim else 1
        raise TargetError(
            f"{where}: the server's output {name} holds {int(bad.sum()):,} value(s) that are not finite numbers "
            f"(NaN or ±Infinity) in {rows:,} row(s); the model gives those rows no score."
        )
    problem = _out_of_range(values, datatype)
    if problem is not None:
        raise TargetError(f"{where}: the server's output {name} holds values {problem}, its datatype {datatype}.")
    return values.astype(DATATYPES[datatype])


__all__ = [
    "DATATYPES",
    "FLOATS",
    "MAX_BYTES",
    "RETRY_STATUS",
    "Client",
    "Metadata",
    "ModelURL",
    "parse_url",
    "read_metadata",
    "read_tensor",
    "tensor",
    "tensor_name",
]
