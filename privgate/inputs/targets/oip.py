"""The Open Inference Protocol v2 over HTTP: URLs, requests with retries, tensors in and out.

KServe, Triton, MLServer and Seldon Core 2 all speak this protocol
(https://kserve.github.io/website/latest/modelserving/data_plane/v2_protocol/):

* ``GET  {base}/v2/models/{name}[/versions/{v}]`` — the model's metadata: its
  ``inputs`` and ``outputs`` as ``{name, datatype, shape}``, when the server
  knows them (MLServer's scikit-learn runtime lists none unless its settings do);
* ``POST {base}/v2/models/{name}[/versions/{v}]/infer`` with
  ``{"inputs": [{"name", "shape", "datatype", "data"}], "outputs": [{"name"}]}``
  — the answer's ``outputs`` are tensors of the same form, ``data`` flattened
  in row-major order.

:class:`Client` sends them with httpx: bounded timeouts (connect and read),
retries with exponential back-off on 429, 5xx and dropped connections
(honouring ``Retry-After``, capped), and every failure as one
:class:`~privgate.errors.TargetError` sentence naming the URL — never a
header, whose values may be credentials.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import numpy as np

from privgate.errors import TargetError

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


@dataclass(frozen=True)
class ModelURL:
    """``http(s)://HOST[:PORT][/PREFIX]/v2/models/NAME[/versions/V]``, split; :attr:`shown` has no credentials."""

    base: str
    name: str
    version: str | None
    shown: str

    @property
    def model_path(self) -> str:
        return f"{self.base}/v2/models/{self.name}" + (f"/versions/{self.version}" if self.version else "")

    @property
    def infer_path(self) -> str:
        return self.model_path + "/infer"


def parse_url(url: str) -> ModelURL:
    """Split an endpoint URL; one sentence when it does not name a model of the protocol."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    netloc = host if ":" not in host else f"[{host}]"
    if parts.port:
        netloc += f":{parts.port}"
    shown = urlunsplit((parts.scheme, netloc, parts.path, "", ""))  # no user:password@, no ?query
    m = _PATH.match(parts.path)
    if parts.scheme not in ("http", "https") or not host or m is None:
        raise TargetError(
            f"{shown or 'the model URL'}: expected an Open Inference Protocol v2 model URL, "
            "http(s)://HOST:PORT/v2/models/NAME."
        )
    base = urlunsplit((parts.scheme, parts.netloc, m.group("prefix"), "", ""))
    return ModelURL(base, m.group("name"), m.group("version"), shown)


def _server_message(response: Any) -> str:
    try:
        body = response.json()
        text = body.get("error") or body.get("detail") or "" if isinstance(body, dict) else ""
    except Exception:  # noqa: BLE001 - not JSON: a traceback's last line says what went wrong
        lines = [line for line in response.text.splitlines() if line.strip()]
        text = lines[-1] if lines else ""
    text = " ".join(str(text).split())
    return f": {text[:200]}" if text else ""


class Client:
    """httpx with the protocol's two calls, bounded timeouts and retries (see the module docstring)."""

    def __init__(
        self,
        url: ModelURL,
        headers: dict[str, str],
        timeout: float,
        retries: int,
        backoff: float,
        concurrency: int,
    ) -> None:
        try:
            import httpx
        except ImportError:
            raise TargetError(f"{url.shown}: live endpoints need httpx: pip install 'privgate[serve]'.") from None
        self.httpx = httpx
        self.url = url
        self.retries = retries
        self.backoff = backoff
        self.client = httpx.Client(
            headers=headers,
            timeout=httpx.Timeout(timeout, connect=min(timeout, 5.0)),
            limits=httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency),
            follow_redirects=False,
            trust_env=False,  # no proxy from the environment: the endpoint is what the user named
        )
        self.requests = 0
        self.retried = 0

    def close(self) -> None:
        self.client.close()

    def call(self, method: str, path: str, payload: dict[str, Any] | None = None) -> dict[str, Any]:
        """One request, retried on 429/5xx and dropped connections; its JSON answer, or one sentence."""
        httpx = self.httpx
        last = ""
        for attempt in range(self.retries + 1):
            if attempt:
                self.retried += 1
            self.requests += 1
            try:
                response = self.client.request(method, path, json=payload)
            except httpx.TimeoutException:
                last = f"no answer within {self.client.timeout.read:g} s"
                wait = self.backoff * 2**attempt
            except httpx.TransportError as exc:
                last = f"cannot connect ({exc.__class__.__name__})"
                wait = self.backoff * 2**attempt
            else:
                if response.status_code == 404:
                    raise TargetError(
                        f"{self.url.shown}: the server has no model '{self.url.name}'"
                        + (f" version '{self.url.version}'" if self.url.version else "")
                        + f" (HTTP 404{_server_message(response)})."
                    )
                if response.status_code in (401, 403):
                    raise TargetError(
                        f"{self.url.shown}: the server refused the credentials (HTTP {response.status_code}); "
                        "pass them with --header 'Authorization: Bearer …'."
                    )
                if response.status_code not in RETRY_STATUS and response.status_code >= 400:
                    raise TargetError(
                        f"{self.url.shown}: the server rejected the request (HTTP {response.status_code}"
                        f"{_server_message(response)})."
                    )
                if response.status_code < 400:
                    try:
                        body = response.json()
                    except ValueError:
                        raise TargetError(f"{self.url.shown}: the server's answer is not JSON.") from None
                    if not isinstance(body, dict):
                        raise TargetError(f"{self.url.shown}: the server's answer is not a JSON object.")
                    return body
                last = f"HTTP {response.status_code}{_server_message(response)}"
                wait = _retry_after(response) or self.backoff * 2**attempt
            if attempt < self.retries:
                time.sleep(min(wait, MAX_WAIT))
        tries = "once" if self.retries == 0 else f"{self.retries + 1} times"
        raise TargetError(f"{self.url.shown}: the endpoint failed {tries} ({last}).")


def _retry_after(response: Any) -> float | None:
    value = response.headers.get("retry-after")
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None


def tensor(name: str, x: np.ndarray, datatype: str) -> dict[str, Any]:
    """An input tensor of the protocol: ``x`` flattened, cast to ``datatype``."""
    arr = np.ascontiguousarray(x, dtype=DATATYPES[datatype])
    return {"name": name, "shape": list(arr.shape), "datatype": datatype, "data": arr.ravel().tolist()}


def read_tensor(out: dict[str, Any], where: str) -> np.ndarray:
    """An output tensor of the protocol as an array of its shape; one sentence when it is malformed."""
    try:
        shape = [int(s) for s in out["shape"]]
        data = np.asarray(out["data"], dtype=DATATYPES.get(str(out.get("datatype", "FP64")), np.float64))
        return data.reshape(shape)
    except (KeyError, TypeError, ValueError) as exc:
        raise TargetError(f"{where}: the server's output tensor is malformed ({exc.__class__.__name__}).") from None


__all__ = ["DATATYPES", "FLOATS", "RETRY_STATUS", "Client", "ModelURL", "parse_url", "read_tensor", "tensor"]
