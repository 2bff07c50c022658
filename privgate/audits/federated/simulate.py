"""Simulate a decentralised federation: N nodes × R rounds of local training and FedAvg over a topology.

All nodes start from one seeded build of the recipe (FedAvg, McMahan et al. 2017, arXiv 1602.05629); each round
every node trains ``local_epochs`` epochs on its shard, then takes the weighted average of its neighbourhood
(:func:`privgate.audits.federated.topology.mixing_matrix`); the model after aggregation is what is attacked.
**Stacked**: the N models are one parameter stack trained by :mod:`privgate.training.kernels`, aggregation one
matrix product per tensor; **sequential** (``engine: sequential``, or a model the engine cannot stack): one
``train_model`` call per node per round. Both draw the same batches and agree up to float rounding (tested).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from privgate import outputs
from privgate.audits.federated.topology import Topology, mixing_matrix
from privgate.errors import RecipeError
from privgate.recipe import Recipe
from privgate.threads import resolve_threads, torch_threads
from privgate.training.kernels import NotVectorisable, check_stackable, gradient_kernel
from privgate.training.loop import train_model
from privgate.training.optimisers import optimise
from privgate.training.plan import epoch_schedule

State = dict[str, torch.Tensor]


def round_seed(seed: int, r: int, node: int) -> int:
    """The seed of node ``node``'s batches in round ``r`` (0-based)."""
    return int(np.random.SeedSequence([int(seed), 0xFED, r, node]).generate_state(1)[0])


def init_seed(seed: int) -> int:
    """The seed of the federation's common initial model."""
    return int(np.random.SeedSequence([int(seed), 0x1A17]).generate_state(1)[0])


@dataclass
class Trajectory:
    """Every node's model after every round.

    Attributes:
        recipe: how the nodes train (builds the architecture to load states into).
        states: ``states[r][i]``, node i's ``state_dict`` at the end of round r.
        mode: ``"vectorised"`` or ``"sequential"``.
        kernel: ``"mlp"``, ``"vmap"`` or ``"loop"``.
        seconds: training time (aggregation included).
        notes: why the sequential loop was used, when it was.
    """

    recipe: Recipe
    states: list[list[State]]
    mode: str
    kernel: str
    seconds: float
    notes: list[str] = field(default_factory=list)

    @property
    def rounds(self) -> int:
        return len(self.states)

    @property
    def nodes(self) -> int:
        return len(self.states[0]) if self.states else 0


def _local(recipe: Recipe, local_epochs: int) -> Recipe:
    try:
        return dataclasses.replace(recipe, epochs=int(local_epochs))
    except (TypeError, ValueError) as exc:
        raise RecipeError(
            f"recipe '{recipe.name}': cannot set its epochs to the local epochs ({exc.__class__.__name__}: {exc})."
        ) from None


def _stacked(
    recipe: Recipe,
    x: torch.Tensor,
    y: torch.Tensor,
    shards: Sequence[np.ndarray],
    w: np.ndarray,
    rounds: int,
    seed: int,
    kernel: str,
) -> tuple[list[list[State]], str]:
    """Train all nodes as one stack (module docstring); ``(states, kernel used)``."""
    if not recipe.vectorisable or recipe.dp_sgd is not None:
        raise NotVectorisable(f"recipe '{recipe.name}' ({type(recipe).__name__}) trains with its own loop")
    check_stackable(recipe)
    net = recipe.build(seed=init_seed(seed))
    buffers = [n for n, _ in net.named_buffers()]
    if buffers:
        raise NotVectorisable(f"the model has buffers ({', '.join(buffers[:3])}), e.g. BatchNorm running statistics")
    k = len(shards)
    names = [n for n, _ in net.named_parameters()]
    p = [t.detach().unsqueeze(0).repeat((k,) + (1,) * t.dim()).contiguous() for _, t in net.named_parameters()]
    kern = gradient_kernel(net, net, p, names, x, y, int(recipe.batch_size), kernel, recipe.label_smoothing)
    params = kern.params
    rows = [torch.as_tensor(s, dtype=torch.long) for s in shards]
    mix = torch.as_tensor(w, dtype=params[0].dtype)
    out: list[list[State]] = []
    for r in range(rounds):
        gens = [torch.Generator().manual_seed(round_seed(seed, r, i)) for i in range(k)]

        def schedule(gens: list[torch.Generator] = gens) -> tuple[torch.Tensor, torch.Tensor, np.ndarray]:
            return epoch_schedule(gens, rows, int(recipe.batch_size))

        optimise(recipe, params, kern.grads, schedule)
        with torch.no_grad():
            for t in params:
                t.copy_((mix @ t.reshape(k, -1)).reshape(t.shape))
        snap = [t.detach().clone() for t in kern.unpack(params)]
        out.append([{n: snap[j][i] for j, n in enumerate(names)} for i in range(k)])
    return out, kern.name


def _aggregate(states: list[State], w: np.ndarray) -> list[State]:
    """``Θ ← W Θ`` for every floating-point tensor of the state dicts (integer buffers stay each node's own)."""
    k = len(states)
    out: list[State] = [{} for _ in range(k)]
    for name, first in states[0].items():
        if not torch.is_floating_point(first):
            for i in range(k):
                out[i][name] = states[i][name].clone()
            continue
        stack = torch.stack([s[name] for s in states]).reshape(k, -1)
        mixed = torch.as_tensor(w, dtype=stack.dtype) @ stack
        for i in range(k):
            out[i][name] = mixed[i].reshape(first.shape).clone()
    return out


def _sequential(
    recipe: Recipe,
    x: np.ndarray,
    y: np.ndarray,
    shards: Sequence[np.ndarray],
    w: np.ndarray,
    rounds: int,
    seed: int,
) -> list[list[State]]:
    """One ``train_model(recipe, ..., model=net)`` call per node per round, then FedAvg on the state dicts."""
    net = recipe.build(seed=init_seed(seed))
    start = {n: t.detach().clone() for n, t in net.state_dict().items()}
    current = [start for _ in shards]
    out: list[list[State]] = []
    for r in range(rounds):
        trained = []
        for i, rows in enumerate(shards):
            net.load_state_dict(current[i])
            try:
                model = train_model(recipe, x[rows], y[rows], seed=round_seed(seed, r, i), model=net)
            except RecipeError:
                raise
            except Exception as exc:
                raise RecipeError(
                    f"recipe '{recipe.name}': training node {i} failed ({exc.__class__.__name__}: {exc})."
                ) from None
            trained.append({n: t.detach().clone() for n, t in model.state_dict().items()})
        current = _aggregate(trained, w)
        out.append(current)
    return out


def train_federation(
    recipe: Recipe,
    x: np.ndarray,
    y: np.ndarray,
    shards: Sequence[np.ndarray],
    topology: Topology,
    *,
    rounds: int,
    local_epochs: int = 1,
    seed: int = 0,
    engine: str = "auto",
    threads: int | None = None,
    kernel: str = "auto",
) -> Trajectory:
    """Run the federation (module docstring) and return every node's model after every round.

    Args:
        recipe: how every node trains (model, optimiser, learning rate, batch size).
        x, y: all rows; ``shards[i]`` are the indices of node i's training rows.
        topology: who aggregates with whom.
        rounds: communication rounds R.
        local_epochs: epochs of local training per round.
        seed: drives the initial model and every node's batches.
        engine: ``auto`` (stacked when the engine can, else sequential), ``vectorised``
            (a model the engine cannot stack is a :class:`RecipeError`) or ``sequential``.
        threads: torch threads (default one, :mod:`privgate.threads`).
        kernel: the stacked gradient kernel (``auto``, ``mlp``, ``vmap``).
    """
    if len(shards) != topology.n:
        raise ValueError(f"{len(shards)} shards for a topology of {topology.n} nodes")
    if rounds < 1 or local_epochs < 1:
        raise ValueError("rounds and local_epochs must be at least 1")
    local = _local(recipe, local_epochs)
    w = mixing_matrix(topology, [len(s) for s in shards])
    xa = np.ascontiguousarray(x, dtype=np.float32)
    ya = np.ascontiguousarray(y, dtype=np.int64)
    notes: list[str] = []
    start = time.perf_counter()
    with torch_threads(resolve_threads(threads)):
        if engine != "sequential":
            try:
                states, used = _stacked(
                    local, torch.from_numpy(xa), torch.from_numpy(ya), shards, w, rounds, seed, kernel
                )
                return Trajectory(recipe, states, "vectorised", used, time.perf_counter() - start, notes)
            except NotVectorisable as exc:
                if engine == "vectorised":
                    raise RecipeError(
                        f"recipe '{recipe.name}': engine 'vectorised' cannot stack the node models: {exc} (use "
                        "engine 'auto' or 'sequential')."
                    ) from None
                notes.append(f"trained the {topology.n} nodes one after another with recipe.train: {exc}")
        states = _sequential(local, xa, ya, shards, w, rounds, seed)
    return Trajectory(recipe, states, "sequential", "loop", time.perf_counter() - start, notes)


def node_log_proba(recipe: Recipe, states: Sequence[State], x: np.ndarray, batch: int = 4096) -> np.ndarray:
    """``[N, n, classes]`` log class probabilities of every node's model on ``x`` (eval mode, no gradients).

    Raw outputs are read like a target's (:mod:`privgate.outputs`): logits, one logit, or probabilities.
    """
    net = recipe.build()
    xt = torch.as_tensor(np.asarray(x), dtype=torch.float32)
    out = []
    with torch.no_grad():
        for state in states:
            net.load_state_dict(state)
            net.eval()
            raw = torch.cat([net(xt[i : i + batch]) for i in range(0, len(xt), batch)]).double().numpy()
            out.append(outputs.log_proba(raw, outputs.kind_of(raw) or outputs.LOGITS))
    return np.stack(out)


__all__ = ["State", "Trajectory", "init_seed", "node_log_proba", "round_seed", "train_federation"]
