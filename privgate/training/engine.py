"""Train K models of one recipe at once, each on its own subset with its own seed, and cache them.

Reference-model attacks (shadow models, Shokri et al. 2017, arXiv 1610.05820;
LiRA, Carlini et al. 2022, arXiv 2112.03570; RMIA, Zarifzadeh et al. 2024,
arXiv 2312.03262) need many models "like the target". Training them one after
another pays every step's fixed costs K times; this engine trains all K at once:

* the K freshly built models are stacked (``torch.func.stack_module_state``);
* one training step computes every model's gradient on its own mini-batch with
  one of two kernels:

  - the **MLP kernel** (:mod:`privgate.training.mlp`), for an ``nn.Sequential`` of
    Linear layers and Tanh/ReLU/Sigmoid/LeakyReLU: backpropagation written out
    with batched matrix products into buffers allocated once;
  - the **vmap kernel**, for any other model without buffers:
    ``torch.func.vmap`` over ``torch.func.grad`` of a ``functional_call``, the
    K models' parameters, batches, labels and loss weights as mapped axes;

* the recipe's optimiser (Adam or SGD with momentum and L2 weight decay) is
  applied functionally to the stacked parameters, with exactly the update rule
  of ``torch.optim.Adam`` / ``torch.optim.SGD``.

Model ``k`` is initialised and shuffled exactly as ``recipe.train(x[mask_k],
y[mask_k], seed=seeds[k])`` would do it (same ``torch.manual_seed`` before
building, same ``randperm`` generator per epoch, a smaller last batch weighted
as its mean); models whose subsets need fewer steps per epoch sit out the extra
steps unchanged. The results agree with the sequential loop up to float rounding
of batched matrix products (tested for both kernels).

Recipes the engine cannot replicate — a subclass that overrides
:meth:`~privgate.recipe.Recipe.train` (DP-SGD training), a model with buffers
(BatchNorm running statistics), a model ``vmap`` cannot map, or one that run
with another model's parameters does not give that model's output (a forward
patched on the instance) — are trained by calling ``recipe.train`` once per
model; :attr:`Ensemble.notes` says so. Before the MLP kernel is used, its
forward pass is compared with the model's own on a few rows.

Cache (:mod:`privgate.training.cache`): every trained model is stored under ``cache_dir``
keyed by a SHA-256 of the recipe (its fields, the class and factory names, the
architecture and the state of a fresh build), the training data bytes, the
model's membership mask and its seed. Entries carry a content hash and are
verified on load; one that fails (edited, swapped, truncated) is retrained and
overwritten, and an unusable cache folder is skipped, each with a warning in
:attr:`Ensemble.warnings`. Concurrent runs on one cache (pytest-xdist)
serialise training of the same ensemble with an ``fcntl`` lock, so the second
run waits and then finds every model cached; without ``fcntl`` concurrent
writers produce identical files and ``os.replace`` keeps one.

Threads: training runs with the caller's ``threads`` torch threads (1 by
default) and restores the caller's setting after;
see :mod:`privgate.training.threads` for why.

The MLP kernel runs the products at close to the machine's matrix-multiply
speed; what is left is the optimiser's pass over the K models' parameters,
bound by memory (``benchmarks/ensemble_speed.py`` measures both kernels against
the sequential loop).
"""

from __future__ import annotations

import copy
import hashlib
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch
from torch import nn

from privgate.errors import RecipeError
from privgate.inputs import outputs
from privgate.recipe import Recipe
from privgate.training import mlp
from privgate.training.cache import ModelCache
from privgate.training.dp_step import dp_step
from privgate.training.fingerprint import data_fingerprint, model_key, recipe_fingerprint
from privgate.training.optimisers import optimise
from privgate.training.plan import epoch_schedule
from privgate.training.threads import resolve_threads, torch_threads


class _NotVectorisable(Exception):
    """The vectorised engine cannot train this recipe; the message says why."""


@dataclass
class Ensemble:
    """K trained models of one recipe.

    Attributes:
        recipe: the recipe they were trained with.
        states: one ``state_dict`` per model.
        masks: ``[K, n]`` booleans, row k = the training rows of model k.
        seeds: the seed of each model.
        trained: how many models this call trained (0 when all came from the cache).
        cached: how many models came from the cache.
        mode: ``"vectorised"``, ``"sequential"`` or ``"cache"`` (nothing trained).
        threads: torch threads used for training (0 when nothing was trained).
        kernel: how the trained models were trained: ``"mlp"`` (the closed-form
            kernel of :mod:`privgate.training.mlp`), ``"mlp-dp"`` (the same kernel
            running DP-SGD for a recipe with :attr:`~privgate.recipe.Recipe.dp_sgd`),
            ``"vmap"`` (``torch.func``),
            ``"loop"`` (``recipe.train`` per model) or ``""`` (nothing trained).
        seconds: wall time of the call.
        notes: sentences for the report (fallbacks).
        warnings: cache problems for the report: entries that failed their
            integrity check and were retrained, a cache folder that could not be used.
    """

    recipe: Recipe
    states: list[dict[str, torch.Tensor]]
    masks: np.ndarray
    seeds: list[int]
    trained: int = 0
    cached: int = 0
    mode: str = "cache"
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)
    kernel: str = ""
    threads: int = 0
    warnings: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.states)

    def logits(self, x: np.ndarray, batch: int = 4096) -> np.ndarray:
        """Logits of every model on ``x``: float64 array ``[K, n, classes]`` (eval mode, no grad)."""
        net = self.recipe.build()
        xt = torch.as_tensor(np.asarray(x), dtype=torch.float32)
        out = []
        with torch.no_grad():
            for state in self.states:
                net.load_state_dict(state)
                net.eval()
                parts = [net(xt[i : i + batch]) for i in range(0, len(xt), batch)]
                out.append(torch.cat(parts).double().numpy())
        return np.stack(out)


# --------------------------------------------------------------------------- plans


# --------------------------------------------------------------------------- training


def _check_vectorisable(recipe: Recipe, net: nn.Module) -> None:
    if not recipe.vectorisable and recipe.dp_sgd is None:
        raise _NotVectorisable(f"recipe '{recipe.name}' ({type(recipe).__name__}) trains with its own loop")
    if recipe.optimizer not in ("adam", "sgd"):
        raise RecipeError(f"recipe '{recipe.name}': unknown optimizer '{recipe.optimizer}' (use 'adam' or 'sgd').")
    buffers = [n for n, _ in net.named_buffers()]
    if buffers:
        raise _NotVectorisable(
            f"the model has buffers ({', '.join(buffers[:3])}{'…' if len(buffers) > 3 else ''}), e.g. BatchNorm "
            "running statistics, which a vectorised step cannot update per model"
        )


KERNELS = ("auto", "mlp", "vmap")


def _train_vectorised(
    recipe: Recipe, x: np.ndarray, y: np.ndarray, masks: np.ndarray, seeds: Sequence[int], kernel: str = "auto"
) -> tuple[list[dict[str, torch.Tensor]], str, list[str]]:
    """Train ``len(seeds)`` models at once (see the module docstring): ``(states, kernel used, notes)``.

    ``kernel``: ``"mlp"`` — the closed-form kernel of :mod:`privgate.training.mlp`
    (plain Linear/activation stacks only); ``"vmap"`` — ``torch.func`` on any
    model without buffers; ``"auto"`` — the MLP kernel when the model qualifies
    and reproduces the model's own forward pass, else vmap.
    """
    from torch.func import functional_call, grad, stack_module_state, vmap

    if kernel not in KERNELS:
        raise ValueError(f"kernel must be one of {KERNELS}, not {kernel!r}")
    nets = [recipe.build(seed=s) for s in seeds]
    _check_vectorisable(recipe, nets[0])
    k = len(nets)
    params, _ = stack_module_state(nets)
    names = list(params)
    p = [params[n].detach().clone() for n in names]
    xt = torch.as_tensor(np.asarray(x), dtype=torch.float32)
    yt = torch.as_tensor(np.asarray(y), dtype=torch.long)
    notes: list[str] = []

    rows = [torch.as_tensor(np.flatnonzero(m), dtype=torch.long) for m in masks]
    gens = [torch.Generator().manual_seed(int(s)) for s in seeds]
    dp = recipe.dp_sgd
    if dp is not None:  # DP-SGD: the MLP kernel only
        mlp_plan, why = mlp.plan(nets[0])
        if mlp_plan is None or kernel == "vmap":
            raise _NotVectorisable(f"DP-SGD is vectorised for MLPs only ({why or 'the vmap kernel was asked for'})")
        engine = mlp.StackedMLP(mlp_plan, names, k, 1, xt, yt)
        why = _mlp_kernel_mismatch(engine, nets[0], engine.pack(p), xt)
        if why:
            raise _NotVectorisable(f"the MLP kernel cannot train this model: {why}")
        del nets
        p = engine.pack(p)
        grad_fn, schedule = dp_step(engine, dp, rows, gens, seeds, p)
        optimise(recipe, p, grad_fn, schedule)
        p = engine.unpack(p)
        return [{n: p[j][i].clone() for j, n in enumerate(names)} for i in range(k)], "mlp-dp", notes

    def schedule() -> tuple[torch.Tensor, torch.Tensor, np.ndarray]:
        return epoch_schedule(gens, rows, int(recipe.batch_size))

    grad_fn = None
    used = "vmap"
    unpack = None
    if kernel in ("auto", "mlp"):
        mlp_plan, why = mlp.plan(nets[0])
        if mlp_plan is not None:
            engine = mlp.StackedMLP(mlp_plan, names, k, int(recipe.batch_size), xt, yt)
            why = _mlp_kernel_mismatch(engine, nets[0], engine.pack(p), xt)
            if not why:
                grad_fn, used, unpack = engine.grads, "mlp", engine.unpack
                p = engine.pack(p)
        if grad_fn is None and kernel == "mlp":
            raise _NotVectorisable(f"the MLP kernel cannot train this model: {why}")
    if grad_fn is None:
        base = copy.deepcopy(nets[0])
        base.train()
        if k > 1 and not _functional_call_matches(base, nets[-1], [t[-1] for t in p], names, xt):
            raise _NotVectorisable(
                "calling the model with another model's parameters (torch.func.functional_call) does not reproduce "
                "that model's output, e.g. because its forward is patched on the instance"
            )
        # vmap allows no data-dependent branch: every model's outputs are read as the first's (privgate.inputs.outputs)
        with torch.no_grad(), torch.random.fork_rng(devices=[]):
            kind = outputs.kind_of(base(xt[: min(64, len(xt))])) or outputs.LOGITS
        base = base.to("meta")

        def loss_of(theta: list[torch.Tensor], xb: torch.Tensor, yb: torch.Tensor, wb: torch.Tensor) -> torch.Tensor:
            out = functional_call(base, dict(zip(names, theta)), (xb,))
            return (outputs.nll(out, yb, kind, reduction="none") * wb).sum()

        step_grads = vmap(grad(loss_of), randomness="different")

        def grad_fn(theta: list[torch.Tensor], b: torch.Tensor, wb: torch.Tensor) -> list[torch.Tensor]:
            return list(step_grads(theta, xt[b], yt[b], wb))

    del nets
    optimise(recipe, p, grad_fn, schedule)
    if unpack is not None:
        p = unpack(p)
    return [{n: p[j][i].clone() for j, n in enumerate(names)} for i in range(k)], used, notes


def _mlp_kernel_mismatch(engine: Any, net: nn.Module, p: list[torch.Tensor], xt: torch.Tensor) -> str:
    """Empty when the MLP kernel's forward pass equals ``net``'s own on a few rows; else why not."""
    rows = min(4, len(xt), engine.batch)
    idx = torch.zeros((engine.k, engine.batch), dtype=torch.long)
    idx[:, :rows] = torch.arange(rows)
    try:
        with torch.no_grad():
            mine = engine.logits(p, idx)[0, :rows].clone()
            net.train()
            theirs = net(xt[:rows])
    except Exception as exc:  # noqa: BLE001 - any failure means: use the general kernel
        return f"its forward pass failed ({exc.__class__.__name__})"
    if theirs.shape != mine.shape or not torch.allclose(mine, theirs, rtol=1e-4, atol=1e-5):
        return "its forward pass differs from the model's own"
    return ""


def _functional_call_matches(
    base: nn.Module, other: nn.Module, theta: list[torch.Tensor], names: list[str], xt: torch.Tensor
) -> bool:
    """Whether ``base`` run with ``other``'s parameters gives ``other``'s output on a few rows."""
    from torch.func import functional_call

    rows = xt[: min(4, len(xt))]
    try:
        with torch.no_grad():
            other.train()
            mine = functional_call(base, dict(zip(names, theta)), (rows,))
            theirs = other(rows)
    except Exception:  # noqa: BLE001 - the vmap attempt will report the real error
        return True
    return bool(mine.shape == theirs.shape and torch.allclose(mine, theirs, rtol=1e-4, atol=1e-5))


def _train_sequential(
    recipe: Recipe, x: np.ndarray, y: np.ndarray, masks: np.ndarray, seeds: Sequence[int]
) -> list[dict[str, torch.Tensor]]:
    """One ``recipe.train`` call per model: the reference the vectorised engine replicates."""
    out = []
    for mask, s in zip(masks, seeds):
        try:
            net = recipe.train(x[mask], y[mask], seed=int(s))
        except RecipeError:
            raise
        except Exception as exc:
            raise RecipeError(f"recipe '{recipe.name}': training failed ({exc.__class__.__name__}: {exc}).") from None
        out.append({n: t.detach().clone() for n, t in net.state_dict().items()})
    return out


class Trained(NamedTuple):
    """What :func:`train_models` returns."""

    states: list[dict[str, torch.Tensor]]
    mode: str  # "vectorised" or "sequential"
    notes: list[str]
    kernel: str  # "mlp", "mlp-dp", "vmap" (vectorised) or "loop" (sequential)


def train_models(
    recipe: Recipe,
    x: np.ndarray,
    y: np.ndarray,
    masks: np.ndarray,
    seeds: Sequence[int],
    vectorise: bool = True,
    threads: int | None = None,
    kernel: str = "auto",
    strict: bool = False,
) -> Trained:
    """Train one model per mask, no cache: ``(states, mode, notes, kernel)``.

    ``vectorise=False`` forces the sequential loop (the benchmark's baseline);
    ``kernel`` picks the vectorised kernel (``"auto"``, ``"mlp"``, ``"vmap"``;
    see :func:`_train_vectorised`); ``strict`` makes a model the vectorised
    engine cannot train a :class:`RecipeError` instead of a fallback to the
    sequential loop; ``threads`` defaults to one (:mod:`privgate.training.threads`).
    """
    with torch_threads(resolve_threads(threads)):
        return _train_models(recipe, x, y, masks, seeds, vectorise, kernel, strict)


def _train_models(
    recipe: Recipe,
    x: np.ndarray,
    y: np.ndarray,
    masks: np.ndarray,
    seeds: Sequence[int],
    vectorise: bool,
    kernel: str = "auto",
    strict: bool = False,
) -> Trained:
    notes: list[str] = []
    if vectorise:
        try:
            states, used, notes = _train_vectorised(recipe, x, y, masks, seeds, kernel)
            return Trained(states, "vectorised", notes, used)
        except _NotVectorisable as exc:
            why = str(exc)
        except RecipeError:
            raise
        except Exception as exc:  # an op vmap cannot map: the sequential loop is always correct
            why = (
                f"the vectorised engine failed on this model ({exc.__class__.__name__}: "
                f"{str(exc).splitlines()[0][:160]})"
            )
        if strict:
            raise RecipeError(
                f"recipe '{recipe.name}': engine 'vectorised' cannot train this model: {why} (use engine "
                f"'auto' or 'sequential')."
            )
        notes.append(f"trained {len(seeds)} reference model(s) one after another with recipe.train: {why}")
    return Trained(_train_sequential(recipe, x, y, masks, seeds), "sequential", notes, "loop")


def train_ensemble(
    recipe: Recipe,
    x: np.ndarray,
    y: np.ndarray,
    masks: np.ndarray,
    seeds: Sequence[int],
    *,
    cache_dir: str | Path | None = None,
    vectorise: bool = True,
    threads: int | None = None,
    engine: str = "auto",
) -> Ensemble:
    """Train (or load from the cache) model k on ``x[masks[k]]`` with seed ``seeds[k]``.

    Args:
        recipe: how to train each model.
        x: all candidate training rows (float32-compatible).
        y: their integer labels.
        masks: ``[K, len(x)]`` booleans, one training subset per model.
        seeds: one seed per model (initialisation and batch order).
        cache_dir: cache folder, or None for no cache.
        vectorise: train the missing models at once when the recipe allows it.
        threads: torch threads while training (default one, :mod:`privgate.training.threads`).
        engine: ``auto`` (vectorised when possible, else one model after
            another), ``vectorised`` (a model the engine cannot stack is a
            RecipeError) or ``sequential`` (``recipe.train`` per model), as
            :attr:`privgate.options.RunOptions.engine`.

    Returns:
        An :class:`Ensemble` with the states in mask order and what it cost.

    Raises:
        RecipeError: the recipe cannot build or train a model on this data.
    """
    start = time.perf_counter()
    masks = np.asarray(masks, dtype=bool)
    x = np.ascontiguousarray(x, dtype=np.float32)
    y = np.ascontiguousarray(y, dtype=np.int64)
    if masks.ndim != 2 or masks.shape[1] != len(x) or len(seeds) != len(masks):
        raise ValueError(f"masks must be [K, {len(x)}] with one seed per row; got {masks.shape} and {len(seeds)} seeds")
    if not masks.any(axis=1).all():
        raise ValueError("every model needs at least one training row")
    probe = recipe.build(seed=0)
    like = probe.state_dict()
    try:
        with torch.no_grad():
            probe.eval()(torch.as_tensor(x[:2]))
    except Exception as exc:
        msg = str(exc).strip().splitlines()[-1][:200] if str(exc).strip() else exc.__class__.__name__
        raise RecipeError(
            f"recipe '{recipe.name}': its model cannot run on the audit data (rows of shape {x.shape[1:]}): {msg}."
        ) from None

    k = len(seeds)
    states: list[dict[str, torch.Tensor] | None] = [None] * k
    cache = ModelCache(cache_dir) if cache_dir is not None else None
    keys: list[str] = []
    if cache is not None:
        rfp, dfp = recipe_fingerprint(recipe), data_fingerprint(x, y)
        keys = [model_key(rfp, dfp, m, s) for m, s in zip(masks, seeds)]
        states = [cache.load(key, like) for key in keys]
    notes: list[str] = []
    mode, kernel = "cache", ""
    trained = 0
    if any(s is None for s in states):
        lock_name = hashlib.sha256("".join(keys).encode()).hexdigest()[:24] if keys else ""
        with cache.lock(lock_name) if cache is not None else _nolock():
            if cache is not None:  # another run may have trained them while we waited
                states = [s if s is not None else cache.load(key, like) for s, key in zip(states, keys)]
            todo = [i for i, s in enumerate(states) if s is None]
            if todo:
                new, mode, notes, kernel = train_models(
                    recipe,
                    x,
                    y,
                    masks[todo],
                    [seeds[i] for i in todo],
                    vectorise and engine != "sequential",
                    threads,
                    strict=engine == "vectorised",
                )
                trained = len(todo)
                for i, st in zip(todo, new):
                    states[i] = st
                    if cache is not None:
                        cache.store(keys[i], st)
    return Ensemble(
        recipe=recipe,
        states=[s for s in states if s is not None],
        masks=masks,
        seeds=[int(s) for s in seeds],
        trained=trained,
        cached=k - trained if cache is not None else 0,
        mode=mode,
        kernel=kernel,
        threads=resolve_threads(threads) if trained else 0,
        seconds=time.perf_counter() - start,
        notes=notes,
        warnings=list(cache.warnings) if cache is not None else [],
    )


@contextmanager
def _nolock() -> Iterator[None]:
    yield


__all__ = ["KERNELS", "Ensemble", "Trained", "train_ensemble", "train_models"]
