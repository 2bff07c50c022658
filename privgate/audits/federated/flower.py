"""Flower (``privgate[flower]``): a strategy wrapper that saves every round in the manifest layout.

:class:`AuditedStrategy` wraps any strategy of Flower's Message API (``flwr.serverapp.strategy.Strategy``)
and delegates every method to it. Each round's ``aggregate_train`` records the global model the round produced
and each client's parameters as the server received them, and writes them in one atomic step
(:func:`privgate.io.atomic.write_together`) in the layout of :mod:`privgate.audits.federated.manifest`
(``federation.yaml``: the global model, the setting of Gao 2024; ``updates.yaml``: the clients' updates), so
``privgate fl audit`` runs after any completed round. The layout, ``client_key``, ``clients`` and partial
participation: ``docs/federated.md`` ("Flower").
"""

from __future__ import annotations

import io
import os
import warnings
from collections.abc import Callable, Iterable, Mapping
from logging import INFO, WARNING
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from privgate.audits.federated.manifest import checkpoint_name, manifest_text, npz_bytes, state_bytes
from privgate.audits.federated.topology import parse_topology
from privgate.errors import PrivgateError, shown
from privgate.io.atomic import write_together

try:
    from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord
    from flwr.serverapp import Grid
    from flwr.serverapp.strategy import Strategy
    from flwr.supercore import log
except ImportError as exc:  # pragma: no cover - the extra is installed with the tests
    raise ImportError("privgate.audits.federated.flower needs Flower: pip install 'privgate[flower]'") from exc

#: A client's data: a file (.npz, .pt, .csv), ``(x, y)`` arrays, or an object with ``.x`` and ``.y``.
DataSpec = Any
#: What identifies a client in its replies (``partition-id`` in Flower's simulation, a name, a node id).
ClientKey = int | str

INITIAL = "rounds/r00/global.pt"
#: TorchScript is deprecated in torch 2.x but is the format that needs no recipe to audit (as in Target.load).
_JIT_DEPRECATED = r".*torch\.jit\.(script|save).* is deprecated"


class FlowerAuditError(PrivgateError):
    """The Flower wrapper cannot record a round: an undeclared client, arrays that do not fit the model, …"""


def _name(key: ClientKey) -> str:
    return key if isinstance(key, str) else f"client-{key}"


class FederationRecorder:
    """Writes a Flower federation round by round in the manifest layout (module docstring).

    Args:
        folder: where the layout is written (created).
        clients: client key → training data, or a function of the key returning it.
        nonmembers: rows no client trained on, shared by all (the attacks' non-members).
        recipe: ``module:ATTR`` of a :class:`privgate.Recipe`; checkpoints are its model's state_dicts.
        model: instead of ``recipe``, an ``nn.Module`` (or a factory of one); checkpoints are TorchScript.
        name: the federation's name in reports.
        topology: recorded in the manifests (``fully``: Flower's server averages all clients).
        population: optional rows for the reference attacks (``rmia``, ``lira``).
        overwrite: replace the manifests of an earlier run in ``folder`` (its other files are left).
    """

    def __init__(
        self,
        folder: str | os.PathLike[str],
        *,
        clients: Mapping[ClientKey, DataSpec] | Callable[[ClientKey], DataSpec],
        nonmembers: DataSpec,
        recipe: str | None = None,
        model: nn.Module | Callable[[], nn.Module] | None = None,
        name: str = "flower",
        topology: str = "fully",
        population: DataSpec | None = None,
        overwrite: bool = False,
    ) -> None:
        self.folder = Path(folder)
        if (recipe is None) == (model is None):
            raise FlowerAuditError(
                "give recipe='module:ATTR' (state_dict checkpoints) or model=an nn.Module (TorchScript), exactly one."
            )
        if self.folder.exists() and not self.folder.is_dir():
            raise FlowerAuditError(f"{self.folder}: is a file; the federation is saved into a folder.")
        for existing in ("federation.yaml", "updates.yaml"):
            if (self.folder / existing).exists() and not overwrite:
                raise FlowerAuditError(
                    f"{self.folder / existing}: already holds a federation; choose a new folder or pass overwrite=True."
                )
        parse_topology(topology, 2, 0)  # an unknown name fails now, not after the first round
        self.name, self.topology, self.recipe = name, topology, recipe
        self._clients = clients
        self._order: list[ClientKey] = list(clients) if isinstance(clients, Mapping) else []
        self._pending: dict[Path, bytes] = {}
        self._data: dict[ClientKey, str] = {}
        self._nonmembers = self._reference(nonmembers, "nonmembers", "the non-members")
        self._population = self._reference(population, "population", "the population") if population else None
        for i, key in enumerate(self._order):
            self._data[key] = self._reference(self._declared(key), f"node{i}", f"client {shown(key)}'s data")
        self._template, self._scripted = self._model(recipe, model)
        self._globals: list[str] = []
        self._updates: dict[ClientKey, list[str]] = {k: [] for k in self._order}
        self._carried: list[str] = []
        self._kept: list[int] = []
        self.rounds = 0

    # ------------------------------------------------------------------ inputs

    def _declared(self, key: ClientKey) -> DataSpec:
        if isinstance(self._clients, Mapping):
            if key not in self._clients:
                known = ", ".join(shown(k) for k in self._clients)
                raise FlowerAuditError(
                    f"client {shown(key)} sent a model but has no training data in clients= (declared: {known}); "
                    "declare its data so its rows can be attacked."
                )
            return self._clients[key]
        try:
            return self._clients(key)
        except PrivgateError:
            raise
        except Exception as exc:
            raise FlowerAuditError(
                f"clients(key={shown(key)}) failed ({exc.__class__.__name__}: {exc}); it must return the client's data."
            ) from None

    def _reference(self, spec: DataSpec, stem: str, role: str) -> str:
        """The manifest's path for ``spec``: a file is referenced where it is, arrays are written to ``data/``."""
        if isinstance(spec, (str, os.PathLike)):
            p = Path(spec).resolve()
            if not p.is_file():
                raise FlowerAuditError(f"{spec}: {role} file not found.")
            if p.suffix.lower() not in (".npz", ".pt", ".csv"):
                raise FlowerAuditError(f"{spec}: {role} must be a .npz, .pt or .csv file (x and y, or a label column).")
            return os.path.relpath(p, self.folder.resolve())
        if hasattr(spec, "x") and hasattr(spec, "y"):
            spec = (spec.x, spec.y)
        if not (isinstance(spec, (tuple, list)) and len(spec) == 2):
            raise FlowerAuditError(f"{role}: expected a file or (x, y) arrays, got {type(spec).__name__}.")
        x, y = (s.detach().cpu().numpy() if isinstance(s, torch.Tensor) else np.asarray(s) for s in spec)
        if len(x) != len(y) or len(y) == 0:
            raise FlowerAuditError(f"{role}: x has {len(x)} rows and y {len(y)}; give one label per row, at least one.")
        rel = f"data/{stem}.npz"
        self._pending[self.folder / rel] = npz_bytes(x, y)
        return rel

    @staticmethod
    def _model(recipe: str | None, model: Any) -> tuple[nn.Module, torch.jit.ScriptModule | None]:
        if recipe is not None:
            from privgate.inputs.entrypoints import load_recipe

            return load_recipe(recipe, [Path.cwd()]).build(seed=0), None
        net = model if isinstance(model, nn.Module) else model()
        if not isinstance(net, nn.Module):
            raise FlowerAuditError(f"model=: expected an nn.Module or a factory of one, got {type(net).__name__}.")
        try:
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=_JIT_DEPRECATED, category=DeprecationWarning)
                scripted = torch.jit.script(net.eval())
        except Exception as exc:
            raise FlowerAuditError(
                f"model=: torch.jit.script failed ({exc.__class__.__name__}); pass recipe='module:ATTR' instead "
                "to save state_dicts."
            ) from None
        return net, scripted

    # ---------------------------------------------------------------- checkpoints

    def aligned(self, state: Mapping[str, torch.Tensor], who: str) -> dict[str, torch.Tensor]:
        """``state`` under the model's own names; nameless arrays (``"0"``, ``"1"``, …) are matched by order."""
        want = self._template.state_dict()
        if set(state) == set(want):
            named = dict(state)
        elif list(state) == [str(i) for i in range(len(want))]:  # ArrayRecord(list of NumPy arrays)
            named = dict(zip(want, state.values()))
        else:
            raise FlowerAuditError(
                f"{who}: arrays {', '.join(list(state)[:4])}{', …' if len(state) > 4 else ''} do not match the "
                f"model's {len(want)} tensors ({', '.join(list(want)[:4])}{', …' if len(want) > 4 else ''}); send "
                "ArrayRecord(model.state_dict()) of the recipe's model."
            )
        out = {}
        for k, ref in want.items():
            v = torch.as_tensor(named[k])
            if tuple(v.shape) != tuple(ref.shape):
                raise FlowerAuditError(
                    f"{who}: array {shown(k)} has shape {tuple(v.shape)}, the model's has {tuple(ref.shape)}."
                )
            out[k] = v.to(ref.dtype)
        return out

    def _bytes(self, state: Mapping[str, torch.Tensor], who: str) -> bytes:
        aligned = self.aligned(state, who)
        if self._scripted is None:
            return state_bytes(aligned)
        self._scripted.load_state_dict(aligned)
        buf = io.BytesIO()
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=_JIT_DEPRECATED, category=DeprecationWarning)
            torch.jit.save(self._scripted, buf)
        return buf.getvalue()

    # ------------------------------------------------------------------ rounds

    def begin(self, initial: Mapping[str, torch.Tensor]) -> None:
        """Keep the initial global model (``rounds/r00/global.pt``); written with round 1."""
        self._pending[self.folder / INITIAL] = self._bytes(initial, "the initial model")

    def record(
        self, server_round: int, global_state: Mapping[str, torch.Tensor] | None, updates: Mapping[ClientKey, Any]
    ) -> list[Path]:
        """Round ``server_round``: the global model after it (None: aggregation failed, the model is unchanged)
        and each replying client's parameters; writes the round's files and both manifests together."""
        r = server_round
        if r != self.rounds + 1:
            raise FlowerAuditError(f"round {r} came after round {self.rounds}; rounds are recorded 1, 2, … in order.")
        if r == 1 and (self.folder / INITIAL) not in self._pending:
            raise FlowerAuditError("round 1 was recorded before begin(initial model).")
        for key in updates:
            if key not in self._updates:
                if isinstance(self._clients, Mapping):
                    self._declared(key)  # raises: an undeclared client
                i = len(self._order)
                self._data[key] = self._reference(self._declared(key), f"node{i}", f"client {shown(key)}'s data")
                self._order.append(key)
                self._updates[key] = []
        files = dict(self._pending)
        globals_ = list(self._globals)
        kept, carried = list(self._kept), list(self._carried)
        if global_state is None:
            globals_.append(self._start_of(r))
            kept.append(r)
        else:
            globals_.append(checkpoint_name(r, "global"))
            files[self.folder / globals_[-1]] = self._bytes(global_state, f"round {r}: the global model")
        sent: dict[ClientKey, list[str]] = {}
        for i, key in enumerate(self._order):
            got = list(self._updates[key])
            while len(got) < r:  # rounds without a model from this client, this one included when it sent none
                rr = len(got) + 1
                if rr == r and key in updates:
                    got.append(checkpoint_name(r, i))
                    files[self.folder / got[-1]] = self._bytes(updates[key], f"round {r}: client {shown(key)}'s model")
                else:
                    got.append(got[-1] if got else self._start_of(rr))
                    carried.append(f"{_name(key)} in round {rr}")
            sent[key] = got
        files[self.folder / "federation.yaml"] = self._manifest([list(globals_) for _ in self._order], "global", kept)
        files[self.folder / "updates.yaml"] = self._manifest([sent[k] for k in self._order], "updates", carried)
        written = write_together(files)
        self._globals, self._updates, self._kept, self._carried = globals_, sent, kept, carried
        self._pending.clear()
        self.rounds = r
        return written

    def _start_of(self, r: int) -> str:
        """The global model sent to the clients at the start of round ``r``."""
        return INITIAL if r == 1 else self._globals[r - 2]

    def _manifest(self, checkpoints: list[list[str]], kind: str, notes: list[Any]) -> bytes:
        n = len(self._order)
        nodes = [
            {"name": _name(k), "data": self._data[k], "checkpoints": cps} for k, cps in zip(self._order, checkpoints)
        ]
        edges = parse_topology(self.topology, n, 0).edges if n >= 2 else []
        if kind == "global":
            comment = "Flower (privgate AuditedStrategy): round r of every client = the global model after round r."
            if notes:
                comment += f"\nAggregation returned no model in round(s) {notes}: the previous one is kept."
        else:
            comment = "Flower (privgate AuditedStrategy): round r of a client = the parameters it sent in round r."
            if notes:
                comment += "\nSent nothing (its last model, or the global model it started from, is kept): "
                comment += ", ".join(notes) + "."
        return manifest_text(
            name=self.name if kind == "global" else f"{self.name}-updates", recipe=self.recipe,
            topology=self.topology, edges=edges, nonmembers=self._nonmembers, nodes=nodes,
            population=self._population, comment=comment,
        )  # fmt: skip


class AuditedStrategy(Strategy):
    """Any Flower strategy, delegated to, that saves every round for ``privgate fl audit`` (module docstring).

    ``AuditedStrategy(FedAvg(), "fl-run", clients={0: "c0.npz", 1: "c1.npz"},
    nonmembers="held_out.npz", recipe="recipe:RECIPE")`` then
    ``strategy.start(grid=grid, initial_arrays=..., num_rounds=R)`` as usual;
    the other arguments are :class:`FederationRecorder`'s, plus
    ``client_key`` (a reply's key, or a function of the reply message).
    Attributes not defined here are the wrapped strategy's.
    """

    def __init__(
        self,
        strategy: Strategy,
        folder: str | os.PathLike[str],
        *,
        client_key: str | Callable[[Message], ClientKey] = "partition-id",
        **recorder: Any,
    ) -> None:
        if not isinstance(strategy, Strategy):
            raise FlowerAuditError(
                f"AuditedStrategy wraps a flwr.serverapp.strategy.Strategy, got {type(strategy).__name__}."
            )
        if type(strategy).start is not Strategy.start:
            log(WARNING, "privgate: %s overrides start(); AuditedStrategy runs Strategy.start", type(strategy).__name__)
        self.strategy = strategy
        self.client_key = client_key
        self.recorder = FederationRecorder(folder, **recorder)
        self._sent: ArrayRecord | None = None

    def __getattr__(self, name: str) -> Any:
        if name == "strategy":  # not set yet (during __init__ or unpickling)
            raise AttributeError(name)
        return getattr(self.strategy, name)

    def summary(self) -> None:
        self.strategy.summary()
        log(INFO, "\t└──> privgate: every round saved to %s (privgate fl audit)", self.recorder.folder)

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        if self.recorder.rounds == 0 and self._sent is None:
            self.recorder.begin(arrays.to_torch_state_dict())
        self._sent = arrays
        return self.strategy.configure_train(server_round, arrays, config, grid)

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        if self._sent is None:
            raise FlowerAuditError(f"round {server_round}: aggregate_train before configure_train.")
        replies = list(replies)  # read twice: here, then by the wrapped strategy
        updates: dict[ClientKey, Any] = {}
        for msg in replies:
            if msg.has_error():
                continue
            key = self.key_of(msg, server_round)
            if key in updates:
                raise FlowerAuditError(f"round {server_round}: two replies from client {shown(key)}.")
            state = self._arrays(msg, server_round).to_torch_state_dict()
            updates[key] = self.recorder.aligned(state, f"round {server_round}: client {shown(key)}'s model")
        arrays, metrics = self.strategy.aggregate_train(server_round, replies)
        self.recorder.record(server_round, None if arrays is None else arrays.to_torch_state_dict(), updates)
        return arrays, metrics

    def configure_evaluate(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        return self.strategy.configure_evaluate(server_round, arrays, config, grid)

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]) -> MetricRecord | None:
        return self.strategy.aggregate_evaluate(server_round, replies)

    # ------------------------------------------------------------------ replies

    def key_of(self, msg: Message, server_round: int) -> ClientKey:
        """Which client sent ``msg``: ``client_key(msg)``, or the value under ``client_key`` in its records."""
        if callable(self.client_key):
            return self.client_key(msg)
        records = [*msg.content.config_records.values(), *msg.content.metric_records.values()]
        for rec in records:
            if self.client_key in rec:
                value = rec[self.client_key]
                if isinstance(value, float) and value.is_integer():
                    value = int(value)
                if not isinstance(value, (int, str)):
                    raise FlowerAuditError(
                        f"round {server_round}: {shown(self.client_key)} of node {msg.metadata.src_node_id} is a "
                        f"{type(value).__name__}; use an int or a str."
                    )
                return value
        raise FlowerAuditError(
            f"round {server_round}: the reply of node {msg.metadata.src_node_id} has no {shown(self.client_key)} in "
            "its ConfigRecord or MetricRecord; return it from the ClientApp (e.g. ConfigRecord({'partition-id': "
            "context.node_config['partition-id']})) or pass client_key=a function of the reply message."
        )

    def _arrays(self, msg: Message, server_round: int) -> ArrayRecord:
        found = msg.content.array_records
        key = getattr(self.strategy, "arrayrecord_key", "arrays")
        if key in found:
            return found[key]
        if len(found) == 1:
            return next(iter(found.values()))
        raise FlowerAuditError(
            f"round {server_round}: the reply of node {msg.metadata.src_node_id} has {len(found)} ArrayRecords "
            f"({', '.join(found) or 'none'}); expected the fitted model under {shown(key)}."
        )


__all__ = ["AuditedStrategy", "FederationRecorder", "FlowerAuditError"]
