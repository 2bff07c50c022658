"""The Ray executor: tasks as Ray remote calls on a cluster, results gathered in submission order.

:func:`connect` (once per process): no address starts a local Ray from a thread that lives as long as the process
(:func:`_init`; Ray kills what it started when the starting thread ends), ``auto`` joins this machine's cluster,
``host:port`` / ``ray://host:port`` a remote one, probed first (:data:`CONNECT_TIMEOUT_S`, :data:`INIT_TIMEOUT_S`) so
a wrong address is one sentence within seconds; an initialised Ray is reused. Each task asks for ``threads`` CPUs
(and a GPU on ``cuda``, in a worker process of its own so that bare ``cuda`` is the GPU Ray assigned it) and holds
torch and BLAS to them; shared arguments go to the object store once; the user's
modules travel by value. Details: ``docs/ray.md`` and ``docs/internals-training-stats.md``.
"""

from __future__ import annotations

import contextlib
import socket
import sys
import threading
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from privgate.executors.base import INSTALL_RAY, ExecutorError

#: Seconds to wait for a TCP connection to the cluster's address.
CONNECT_TIMEOUT_S = 5.0
#: Seconds ``ray.init`` may take to join a cluster (starting a local one takes longer: :data:`START_TIMEOUT_S`).
INIT_TIMEOUT_S = 30.0
START_TIMEOUT_S = 120.0
#: Arguments at least this large (bytes, numpy arrays) that several tasks share go to the object store once.
SHARE_BYTES = 1 << 20

_LOCK = threading.Lock()
_CONNECTED: RayExecutor | None = None


def _import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise ExecutorError(
            f"--executor ray needs Ray, which is not installed; install it with {INSTALL_RAY}."
        ) from None
    return ray


def parse_address(address: str) -> tuple[str, int] | None:
    """``(host, port)`` of ``host:port`` or ``ray://host:port``; None for ``auto`` and ``local``.

    Raises:
        ExecutorError: anything else.
    """
    text = address.strip()
    if text in ("auto", "local"):
        return None
    rest = text[len("ray://") :] if text.startswith("ray://") else text
    host, sep, port = rest.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536 or "/" in rest:
        raise ExecutorError(
            f"--ray-address {address!r} is not host:port or ray://host:port (the address `ray start --head` prints)."
        )
    return host, int(port)


#: The HTTP/2 client preface and an empty SETTINGS frame: a gRPC server (Ray's GCS, a Ray Client server) answers
#: with a SETTINGS frame of its own (RFC 9113 §3.4); a web server, a database or a closed socket does not.
_H2_HELLO = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
_H2_SETTINGS = 0x04


def probe(address: str) -> None:
    """Fail fast unless a gRPC server answers at ``address`` (TCP connect, then the HTTP/2 handshake).

    ``auto`` and ``local`` are not probed (``ray.init`` finds or starts them).

    Raises:
        ExecutorError: a malformed address, nothing listening, or something that is not a gRPC server.
    """
    hostport = parse_address(address)
    if hostport is None:
        return
    host, port = hostport
    try:
        with socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S) as sock:
            sock.settimeout(CONNECT_TIMEOUT_S)
            sock.sendall(_H2_HELLO)
            head = b""
            while len(head) < 9:
                chunk = sock.recv(9 - len(head))
                if not chunk:
                    break
                head += chunk
    except OSError as exc:
        why = "timed out" if isinstance(exc, TimeoutError | socket.timeout) else (exc.strerror or type(exc).__name__)
        raise ExecutorError(
            f"no Ray cluster answers at --ray-address {address} ({why.lower()}); start one with `ray start --head` "
            f"and pass the address it prints."
        ) from None
    if len(head) < 9 or head[3] != _H2_SETTINGS:
        raise ExecutorError(
            f"--ray-address {address} answers, but not as a Ray cluster (no gRPC handshake); give the head's GCS "
            "port (6379 by default, printed by `ray start --head`) or ray://host:10001."
        )


def _init(ray: Any, address: str, timeout: float) -> None:
    """``ray.init`` in a helper thread, given ``timeout`` seconds (a non-Ray port would otherwise block for minutes).

    When the call starts Ray here (``local``), the thread stays alive after it
    returns, until the process ends: the processes Ray starts get SIGKILL when
    the thread that started them ends (module docstring).
    """
    box: dict[str, BaseException] = {}
    started = threading.Event()
    local = address == "local"

    def go() -> None:
        try:
            with warnings.catch_warnings():  # Ray's FutureWarning tips are not the user's to act on
                warnings.simplefilter("ignore", FutureWarning)
                ray.init(address=address, include_dashboard=False, log_to_driver=False, logging_level="error")
        except BaseException as exc:  # handed to the caller's thread
            box["error"] = exc
            started.set()
            return
        started.set()
        if local:  # the parent thread of Ray's processes: it must not end before they do
            threading.Event().wait()

    name = "privgate-ray-local" if local else "privgate-ray-init"
    thread = threading.Thread(target=go, name=name, daemon=True)
    thread.start()
    if not started.wait(timeout):
        if local:
            raise ExecutorError(
                f"Ray did not start on this machine within {timeout:g} s (--executor ray without --ray-address); "
                "start a cluster with `ray start --head` and pass its address, or use --executor local."
            )
        raise ExecutorError(
            f"--ray-address {address}: no Ray cluster answered within {timeout:g} s (is it the head's GCS port, "
            "6379 by default, or a ray:// client port?)."
        )
    if "error" in box:
        exc = box["error"]
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        if local:
            raise ExecutorError(f"Ray could not start on this machine ({first}); use --executor local.") from None
        raise ExecutorError(f"could not join the Ray cluster at --ray-address {address} ({first}).") from None


def connect(address: str | None = None) -> RayExecutor:
    """The process's Ray executor, connecting (or starting a local Ray) the first time (module docstring).

    Raises:
        ExecutorError: Ray is not installed, the address is malformed, or no cluster answers there.
    """
    global _CONNECTED
    ray = _import_ray()
    with _LOCK:
        if ray.is_initialized():
            if _CONNECTED is None:
                _CONNECTED = RayExecutor(ray)
            return _CONNECTED
        target = (address or "local").strip()
        probe(target)
        _init(ray, target, START_TIMEOUT_S if target == "local" else INIT_TIMEOUT_S)
        _CONNECTED = RayExecutor(ray)
        return _CONNECTED


#: Folder names of installed packages: a module below one is never the user's, whichever environment it came from.
_INSTALL_DIRS = ("site-packages", "dist-packages")


def _installed(path: Path, roots: set[Path]) -> bool:
    return any(root in path.parents for root in roots) or any(part in _INSTALL_DIRS for part in path.parts)


def _user_modules(objects: Sequence[Any]) -> set[str]:
    """Modules of the user's own code among ``objects`` (recipes, factories, mechanisms), not installed ones.

    Installed means below this interpreter's prefixes or in any ``site-packages``
    (an environment layered on another one through a ``.pth`` file imports
    numpy from outside its own prefix: sent by value, numpy's classes cannot be
    pickled).
    """
    installed = {Path(p).resolve() for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
    found: set[str] = set()
    for obj in objects:
        for candidate in (
            type(obj),
            getattr(obj, "model_factory", None),
            getattr(obj, "train_fn", None),  # a recipe of the user's own training function
            obj if callable(obj) else None,
        ):
            name = getattr(candidate, "__module__", None)
            module = sys.modules.get(name or "")
            file = getattr(module, "__file__", None)
            if not name or module is None or not file or name == "__main__" or name.split(".")[0] == "privgate":
                continue
            if not _installed(Path(file).resolve(), installed):
                found.add(name)
    return found


def _call(fn: Callable[..., Any], threads: int | None, *args: Any) -> Any:
    """What a Ray worker runs: ``fn(*args)`` with torch and BLAS held to ``threads``."""
    from privgate.threads import limit_threads

    with limit_threads(threads):
        return fn(*args)


class RayExecutor:
    """Submits tasks to the connected Ray cluster; results in submission order."""

    name = "ray"

    def __init__(self, ray: Any) -> None:
        self._ray = ray

    @property
    def workers(self) -> int:
        return max(1, int(self._ray.cluster_resources().get("CPU", 1)))

    def map(
        self, fn: Callable[..., Any], tasks: Sequence[tuple[Any, ...]], *, threads: int | None = None, gpus: float = 0
    ) -> list[Any]:
        """Run ``fn(*task)`` for every task as a Ray task of ``threads`` CPUs (and ``gpus`` GPUs); results in order."""
        if not tasks:
            return []
        ray = self._ray
        from ray import cloudpickle

        for name in _user_modules([fn, *(a for t in tasks for a in t)]):
            cloudpickle.register_pickle_by_value(sys.modules[name])
        self._fits(max(1, int(threads or 1)), gpus)
        shared = self._share(tasks)
        # A GPU task gets a fresh worker process (max_calls=1, Ray's own default for a function declared with GPUs,
        # which .options() cannot set): Ray sets CUDA_VISIBLE_DEVICES to the GPU it assigns before each task, and a
        # reused worker whose CUDA already started would keep the GPU of its first task; bare 'cuda' is then the
        # assigned GPU.
        declared = ray.remote(num_gpus=gpus, max_calls=1)(_call) if gpus else ray.remote(_call)
        remote = declared.options(num_cpus=max(1, int(threads or 1)), max_retries=0)
        refs = [remote.remote(fn, threads, *(shared.get(id(a), a) for a in t)) for t in tasks]
        try:
            return ray.get(refs)
        except ray.exceptions.RayTaskError as exc:  # the task's own exception (a RecipeError stays one sentence)
            inner = getattr(exc, "cause", None)
            raise (inner if isinstance(inner, BaseException) else exc.as_instanceof_cause()) from None
        except ray.exceptions.RayError as exc:  # Ray itself failed (a worker or node died, an object was lost)
            self._cancel(refs)
            first = (str(exc).strip().splitlines() or [""])[0][:200]
            raise ExecutorError(
                f"Ray failed while running privgate's tasks ({type(exc).__name__}{': ' + first if first else ''}); "
                "nothing was written, run again or use --executor local."
            ) from None
        except BaseException:
            self._cancel(refs)
            raise

    def _cancel(self, refs: list[Any]) -> None:
        for ref in refs:
            with contextlib.suppress(Exception):  # best effort: Ray itself may be failing
                self._ray.cancel(ref, force=True)

    def _fits(self, cpus: int, gpus: float) -> None:
        """A task no node can hold would wait forever: say so instead."""
        nodes = [n.get("Resources", {}) for n in self._ray.nodes() if n.get("Alive", True)]
        if nodes and cpus > max(r.get("CPU", 0) for r in nodes):
            raise ExecutorError(
                f"each task asks for --threads {cpus} CPUs but no node of the Ray cluster has that many "
                f"(the largest has {max(int(r.get('CPU', 0)) for r in nodes)}); lower --threads."
            )
        if nodes and gpus and not any(r.get("GPU", 0) >= gpus for r in nodes):
            raise ExecutorError(
                "the run trains on cuda but no node of the Ray cluster has a GPU; pass --device cpu or add GPU nodes."
            )

    def _share(self, tasks: Sequence[tuple[Any, ...]]) -> dict[int, Any]:
        """Object-store references for large arrays that more than one task receives (put once, not per task)."""
        seen: dict[int, Any] = {}
        count: dict[int, int] = {}
        for t in tasks:
            for a in t:
                if getattr(a, "nbytes", 0) >= SHARE_BYTES:
                    seen[id(a)] = a
                    count[id(a)] = count.get(id(a), 0) + 1
        return {i: self._ray.put(a) for i, a in seen.items() if count[i] > 1}


__all__ = ["CONNECT_TIMEOUT_S", "INIT_TIMEOUT_S", "RayExecutor", "connect", "parse_address", "probe"]
