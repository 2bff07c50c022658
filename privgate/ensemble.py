"""Train K models of one recipe at once, each on its own subset with its own seed, and cache them.

Reference-model attacks (shadow models, Shokri et al. 2017, arXiv 1610.05820;
LiRA, Carlini et al. 2022, arXiv 2112.03570; RMIA, Zarifzadeh et al. 2024,
arXiv 2312.03262) need many models "like the target". Training them one after
another pays every step's fixed costs K times; this engine trains all K at once:

* the K freshly built models are stacked (``torch.func.stack_module_state``);
* one training step computes every model's gradient on its own mini-batch with
  one of two kernels:

  - the **MLP kernel** (:mod:`privgate.stacked`), for an ``nn.Sequential`` of
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

Cache (:mod:`privgate.cache`): every trained model is stored under ``cache_dir``
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
default, :func:`default_threads`) and restores the caller's setting after;
see :mod:`privgate.threads` for why.

Speed (``benchmarks/ensemble_speed.py``, K = 16 digits models, 2 cores): the
MLP kernel is about 5× faster than 16 ``recipe.train`` calls, the vmap kernel
about 3×. The digits MLP's step is dominated by its 256×256 products, which
the MLP kernel runs at close to the machine's fp32 matrix-multiply speed; what
is left is Adam's pass over the K models' parameters, bound by memory.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import math
import re
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, NamedTuple, Sequence

import numpy as np
import torch
from torch import nn

from privgate import outputs
from privgate.cache import DEFAULT_CACHE_DIR, ModelCache, resolve_cache_dir  # noqa: F401  (re-exported)
from privgate.errors import RecipeError
from privgate.recipe import Recipe

#: Bumped when a change to the engine or the cache format changes what a cached model would be
#: (4: entries carry their key and a content hash, older entries are never read; one-logit and
#: probability outputs train on their own likelihood, privgate.outputs).
ENGINE_VERSION = 4

_ADDR = re.compile(r" at 0x[0-9a-fA-F]+")

_THREADS_LOCK = threading.Lock()
_THREADS_DEPTH = 0
_THREADS_SAVED = 0


def default_threads() -> int:
    """Torch threads used while training when the caller gives none: :data:`privgate.threads.DEFAULT_THREADS` (1).

    Training small models is a long chain of small parallel regions; on a
    machine whose cores are shared (CI runners, pytest-xdist workers, other
    jobs) every region waits for a descheduled thread, and measured here two
    threads were 5-15× *slower* than one. One thread per process is the robust
    default; pass ``threads`` (the CLI's ``--threads``) on a dedicated machine.
    """
    from privgate.threads import DEFAULT_THREADS

    return DEFAULT_THREADS


@contextmanager
def torch_threads(n: int | None) -> Iterator[None]:
    """Run the block with ``torch.set_num_threads(n)`` and restore the caller's setting after."""
    global _THREADS_DEPTH, _THREADS_SAVED
    if not n:
        yield
        return
    with _THREADS_LOCK:
        if _THREADS_DEPTH == 0:
            _THREADS_SAVED = torch.get_num_threads()
            torch.set_num_threads(int(n))
        _THREADS_DEPTH += 1
    try:
        yield
    finally:
        with _THREADS_LOCK:
            _THREADS_DEPTH -= 1
            if _THREADS_DEPTH == 0:
                torch.set_num_threads(_THREADS_SAVED)


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
            kernel of :mod:`privgate.stacked`), ``"mlp-dp"`` (the same kernel
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
        net = build_model(self.recipe)
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


def model_seeds(seed: int, k: int) -> list[int]:
    """Seed of reference model ``i`` for ``i < k``; model i's seed does not depend on k."""
    return [int(np.random.SeedSequence([int(seed), 0x5EED, i]).generate_state(1)[0]) for i in range(k)]


def paired_masks(n: int, k: int, seed: int) -> np.ndarray:
    """``[k, n]`` training masks: models 2p and 2p+1 train on complementary random halves.

    Every row is then IN for exactly half of an even number of models (the
    balanced design of Carlini et al. 2022, arXiv 2112.03570, §IV), and the
    masks for ``k`` models are the first rows of those for any larger ``k`` —
    so an attack asking for 4 models reuses, from the cache, 4 of the 16 another
    attack trained.
    """
    masks = np.zeros((k, n), dtype=bool)
    for p in range((k + 1) // 2):
        perm = np.random.default_rng(np.random.SeedSequence([int(seed), 0x3A5C, p])).permutation(n)
        half = np.zeros(n, dtype=bool)
        half[perm[: n // 2]] = True
        masks[2 * p] = half
        if 2 * p + 1 < k:
            masks[2 * p + 1] = ~half
    return masks


# --------------------------------------------------------------------------- fingerprints


def _stable(v: Any) -> str:
    """A repr that is the same across processes (no memory addresses)."""
    if callable(v) and hasattr(v, "__qualname__"):
        return f"{getattr(v, '__module__', '?')}.{v.__qualname__}"
    if isinstance(v, dict):
        return "{" + ",".join(f"{_stable(k)}:{_stable(val)}" for k, val in sorted(v.items(), key=lambda kv: repr(kv[0]))) + "}"
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(_stable(i) for i in v) + "]"
    return _ADDR.sub("", repr(v))


_BUILD_LOCK = threading.RLock()


def build_model(recipe: Recipe, seed: int | None = None) -> nn.Module:
    """``recipe.build()`` under ``torch.manual_seed(seed)``; any failure is a RecipeError.

    Seeding and building use torch's global generator; the lock keeps two
    threads (one run's fingerprint, another's training) from interleaving there.
    """
    try:
        with _BUILD_LOCK, torch.random.fork_rng(devices=[]):
            if seed is not None:
                torch.manual_seed(int(seed))
            return recipe.build()
    except RecipeError:
        raise
    except Exception as exc:
        raise RecipeError(f"recipe '{recipe.name}': building the model failed ({exc.__class__.__name__}: {exc}).") from None


def recipe_fingerprint(recipe: Recipe) -> str:
    """SHA-256 of what makes a recipe train different models.

    Covers the recipe's class, every dataclass field (callables by qualified
    name), the bytes of a public ``pretrained`` start, the architecture
    (``str(model)``) and every tensor of a fresh build under seed 0.
    """
    h = hashlib.sha256()
    h.update(f"engine{ENGINE_VERSION}|{type(recipe).__module__}.{type(recipe).__qualname__}|".encode())
    for f in dataclasses.fields(recipe):
        h.update(f"{f.name}={_stable(getattr(recipe, f.name))}|".encode())
    if recipe.pretrained and Path(recipe.pretrained).is_file():
        h.update(Path(recipe.pretrained).read_bytes())
    net = build_model(recipe, 0)
    h.update(str(net).encode())
    for name, t in net.state_dict().items():
        h.update(name.encode())
        h.update(str(tuple(t.shape)).encode() + str(t.dtype).encode())
        h.update(t.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def data_fingerprint(x: np.ndarray, y: np.ndarray) -> str:
    """SHA-256 of the training data as the engine sees it (float32 inputs, int64 labels)."""
    h = hashlib.sha256()
    xa = np.ascontiguousarray(x, dtype=np.float32)
    ya = np.ascontiguousarray(y, dtype=np.int64)
    h.update(str(xa.shape).encode())
    h.update(xa.tobytes())
    h.update(ya.tobytes())
    return h.hexdigest()


def model_key(recipe_fp: str, data_fp: str, mask: np.ndarray, seed: int) -> str:
    """The cache key of one model: recipe, data, its membership mask and its seed."""
    h = hashlib.sha256()
    h.update(f"{recipe_fp}|{data_fp}|{int(seed)}|{len(mask)}|".encode())
    h.update(np.packbits(np.asarray(mask, dtype=bool)).tobytes())
    return h.hexdigest()


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


def _epoch_schedule(
    gens: list[torch.Generator], rows: list[torch.Tensor], batch: int
) -> tuple[torch.Tensor, torch.Tensor, np.ndarray]:
    """One epoch of every model: row indices ``[S, K, B]``, loss weights ``[S, K, B]``, active ``[S, K]``.

    Model k draws ``randperm(n_k, generator=gens[k])`` exactly as ``Recipe.train``
    does; a short last batch is padded with weight-0 rows and weighted 1/len so
    the weighted sum equals the batch mean; models with fewer batches than
    others are inactive (``active`` is a numpy array: it steers Python control
    flow, one lookup per step) for the remaining steps.
    """
    k = len(rows)
    sizes = [len(r) for r in rows]
    steps = [math.ceil(n / batch) for n in sizes]
    s_max = max(steps)
    idx = torch.zeros((k, s_max * batch), dtype=torch.long)
    w = torch.zeros((k, s_max * batch), dtype=torch.float32)
    active = np.zeros((s_max, k), dtype=bool)
    for m, (gen, r, n) in enumerate(zip(gens, rows, sizes)):
        idx[m, :n] = r[torch.randperm(n, generator=gen)]
        full = (n // batch) * batch
        w[m, :full] = 1.0 / batch
        if n > full:
            w[m, full:n] = 1.0 / (n - full)
        active[: steps[m], m] = True
    return (idx.view(k, s_max, batch).transpose(0, 1).contiguous(),
            w.view(k, s_max, batch).transpose(0, 1).contiguous(), active)


def _poisson_schedule(
    gens: list[torch.Generator], rows: list[torch.Tensor], dp: Any, capacity: int
) -> tuple[torch.Tensor, torch.Tensor, np.ndarray]:
    """One DP-SGD epoch of every model, as :func:`_epoch_schedule` but with Poisson sampling.

    Model k takes ``dp.steps(n_k)`` steps; at each, every one of its rows is
    drawn independently with probability q = 1/steps (Opacus'
    ``UniformWithReplacementSampler``). Batches vary in size: they are padded
    with weight-0 rows to ``capacity`` or to the largest batch of the epoch,
    whichever is larger. Weights are 1 for drawn rows (DP-SGD sums clipped
    gradients and divides by the expected batch size, not the drawn one).
    """
    k = len(rows)
    steps = [dp.steps(len(r)) for r in rows]
    draws = [
        [r[torch.rand(len(r), generator=gen) < 1.0 / st] for _ in range(st)]
        for gen, r, st in zip(gens, rows, steps)
    ]
    width = max([capacity] + [len(d) for ds in draws for d in ds])
    s_max = max(steps)
    idx = torch.zeros((s_max, k, width), dtype=torch.long)
    w = torch.zeros((s_max, k, width), dtype=torch.float32)
    active = np.zeros((s_max, k), dtype=bool)
    for m, ds in enumerate(draws):
        for s, d in enumerate(ds):
            idx[s, m, : len(d)] = d
            w[s, m, : len(d)] = 1.0
        active[: steps[m], m] = True
    return idx, w, active


def _adam_update(
    p: list[torch.Tensor], g: list[torch.Tensor], m1: list[torch.Tensor], m2: list[torch.Tensor],
    tmp: list[torch.Tensor], steps: np.ndarray, lr: float, b1: float, b2: float, eps: float,
) -> None:
    """``torch.optim.Adam``'s update on stacked tensors, in place (Kingma & Ba 2014, arXiv 1412.6980).

    m ← m + (1−β1)(g − m); v ← β2·v + (1−β2)·g²;
    p ← p − lr/(1−β1^t) · m / (√v / √(1−β2^t) + eps), with t each model's step
    count and any L2 penalty already added to ``g``. Nothing is allocated, which
    matters on CPU: fresh multi-megabyte tensors every step cost page faults.
    """
    same = bool((steps == steps[0]).all())
    if same and hasattr(torch, "_fused_adam_"):
        # one pass over memory; the same arithmetic as torch.optim.Adam(fused=True)
        t = [torch.tensor(float(steps[0]))] * len(p)
        torch._fused_adam_(p, g, m1, m2, [], t, lr=lr, beta1=b1, beta2=b2, weight_decay=0.0, eps=eps, amsgrad=False, maximize=False)
        return
    torch._foreach_lerp_(m1, g, 1 - b1)
    torch._foreach_mul_(m2, b2)
    torch._foreach_addcmul_(m2, g, g, value=1 - b2)
    for v, o in zip(m2, tmp):
        torch.sqrt(v, out=o)
    if same:
        t = float(steps[0])
        torch._foreach_div_(tmp, math.sqrt(1 - b2**t))
        torch._foreach_add_(tmp, eps)
        torch._foreach_addcdiv_(p, m1, tmp, value=-lr / (1 - b1**t))
        return
    tt = torch.as_tensor(steps, dtype=torch.float64).clamp(min=1.0)
    bc2 = (1 - b2**tt).sqrt().float()
    size = (-lr / (1 - b1**tt)).float()
    for pi, mi, o in zip(p, m1, tmp):
        shape = (len(tt),) + (1,) * (pi.dim() - 1)
        o.div_(bc2.view(shape)).add_(eps)
        torch.div(mi, o, out=o)
        pi.addcmul_(o, size.view(shape))


KERNELS = ("auto", "mlp", "vmap")


def _train_vectorised(
    recipe: Recipe, x: np.ndarray, y: np.ndarray, masks: np.ndarray, seeds: Sequence[int], kernel: str = "auto"
) -> tuple[list[dict[str, torch.Tensor]], str, list[str]]:
    """Train ``len(seeds)`` models at once (see the module docstring): ``(states, kernel used, notes)``.

    ``kernel``: ``"mlp"`` — the closed-form kernel of :mod:`privgate.stacked`
    (plain Linear/activation stacks only); ``"vmap"`` — ``torch.func`` on any
    model without buffers; ``"auto"`` — the MLP kernel when the model qualifies
    and reproduces the model's own forward pass, else vmap.
    """
    from torch.func import functional_call, grad, stack_module_state, vmap

    from privgate import stacked

    if kernel not in KERNELS:
        raise ValueError(f"kernel must be one of {KERNELS}, not {kernel!r}")
    nets = [build_model(recipe, s) for s in seeds]
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
        mlp_plan, why = stacked.plan(nets[0])
        if mlp_plan is None or kernel == "vmap":
            raise _NotVectorisable(f"DP-SGD is vectorised for MLPs only ({why or 'the vmap kernel was asked for'})")
        engine = stacked.StackedMLP(mlp_plan, names, k, 1, xt, yt)
        why = _mlp_kernel_mismatch(engine, nets[0], engine.pack(p), xt)
        if why:
            raise _NotVectorisable(f"the MLP kernel cannot train this model: {why}")
        del nets
        p = engine.pack(p)
        grad_fn, schedule = _dp_step(engine, dp, rows, gens, seeds, p)
        _optimise(recipe, p, grad_fn, schedule)
        p = engine.unpack(p)
        return [{n: p[j][i].clone() for j, n in enumerate(names)} for i in range(k)], "mlp-dp", notes

    def schedule() -> tuple[torch.Tensor, torch.Tensor, np.ndarray]:
        return _epoch_schedule(gens, rows, int(recipe.batch_size))

    grad_fn = None
    used = "vmap"
    unpack = None
    if kernel in ("auto", "mlp"):
        mlp_plan, why = stacked.plan(nets[0])
        if mlp_plan is not None:
            engine = stacked.StackedMLP(mlp_plan, names, k, int(recipe.batch_size), xt, yt)
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
        # vmap allows no data-dependent branch: every model's outputs are read as the first's (privgate.outputs)
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
    _optimise(recipe, p, grad_fn, schedule)
    if unpack is not None:
        p = unpack(p)
    return [{n: p[j][i].clone() for j, n in enumerate(names)} for i in range(k)], used, notes


def _dp_step(
    engine: Any, dp: Any, rows: list[torch.Tensor], gens: list[torch.Generator], seeds: Sequence[int], p: list[torch.Tensor]
) -> tuple[Any, Any]:
    """(grad_fn, schedule) of DP-SGD on the MLP kernel: Poisson batches, clipped sums, Gaussian noise.

    Per model k, like Opacus' ``DPOptimizer`` with ``loss_reduction="mean"``:
    gradient = (Σ clipped per-row gradients + N(0, (σC)²)) / int(n_k · q_k).
    Model k draws its batches from a generator seeded with its seed and its
    noise from one seeded with seed + 0x5EED, so its result depends on its own
    seed only; the draws are not Opacus' own, so a model is distributed like the
    one ``DPRecipe.train`` returns for that seed, not equal to it.
    """
    k = len(rows)
    noise_gens = [torch.Generator().manual_seed(int(s) + 0x5EED) for s in seeds]
    scale = torch.tensor([1.0 / max(1, dp.expected_batch(len(r))) for r in rows])
    sigma_c = float(dp.noise_multiplier) * float(dp.max_grad_norm)
    noise = [torch.empty_like(t) for t in p] if sigma_c > 0 else []
    capacity = [1]

    def schedule() -> tuple[torch.Tensor, torch.Tensor, np.ndarray]:
        idx, wts, active = _poisson_schedule(gens, rows, dp, capacity[0])
        capacity[0] = idx.shape[2]
        engine.resize(capacity[0])
        return idx, wts, active

    def grad_fn(theta: list[torch.Tensor], b: torch.Tensor, wb: torch.Tensor) -> list[torch.Tensor]:
        g = engine.clipped_grads(theta, b, wb, float(dp.max_grad_norm), scale)
        for t, z in zip(g, noise):
            for m in range(k):
                torch.randn(z.shape[1:], generator=noise_gens[m], out=z[m])
            z.mul_((scale * sigma_c).view((k,) + (1,) * (z.dim() - 1)))
            t.add_(z)
        return g

    return grad_fn, schedule


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


def _functional_call_matches(base: nn.Module, other: nn.Module, theta: list[torch.Tensor], names: list[str], xt: torch.Tensor) -> bool:
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


def _optimise(recipe: Recipe, p: list[torch.Tensor], grad_fn: Any, schedule: Any) -> None:
    """``recipe.epochs`` epochs of the recipe's optimiser on the stacked parameters ``p``, in place.

    ``schedule()`` gives one epoch of row indices ``[S, K, B]``, row weights
    ``[S, K, B]`` and which models step ``[S, K]``; ``grad_fn(p, idx [K, B],
    weights [K, B])`` returns one gradient per tensor of ``p``. Models without
    a batch at a step (smaller subsets) stay exactly as they were, optimiser
    state included.
    """
    k = len(p[0])
    adam = recipe.optimizer == "adam"
    lr, wd, mom = float(recipe.lr), float(recipe.weight_decay), float(recipe.momentum)
    b1, b2, eps = 0.9, 0.999, 1e-8
    m1 = [torch.zeros_like(t) for t in p] if (adam or mom) else []
    m2 = [torch.zeros_like(t) for t in p] if adam else []
    steps = np.zeros(k)  # per-model optimiser step count
    tmp = [torch.empty_like(t) for t in p] if adam else []

    for _ in range(int(recipe.epochs)):
        idx, wts, active = schedule()
        for s in range(idx.shape[0]):
            act = active[s]
            g = grad_fn(p, idx[s], wts[s])
            with torch.no_grad():
                saved = None
                if not act.all():
                    idle = torch.as_tensor(np.flatnonzero(~act))
                    saved = [[t[idle].clone() for t in group] for group in (p, m1, m2)]
                steps += act
                if wd:
                    torch._foreach_add_(g, p, alpha=wd)
                if adam:
                    _adam_update(p, g, m1, m2, tmp, steps, lr, b1, b2, eps)
                else:
                    if mom:
                        torch._foreach_mul_(m1, mom)
                        torch._foreach_add_(m1, g)
                    torch._foreach_add_(p, m1 if mom else g, alpha=-lr)
                if saved is not None:  # models without a batch at this step stay exactly as they were
                    for group, old in zip((p, m1, m2), saved):
                        for t, o in zip(group, old):
                            t[idle] = o


def _train_sequential(recipe: Recipe, x: np.ndarray, y: np.ndarray, masks: np.ndarray, seeds: Sequence[int]) -> list[dict[str, torch.Tensor]]:
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
) -> Trained:
    """Train one model per mask, no cache: ``(states, mode, notes, kernel)``.

    ``vectorise=False`` forces the sequential loop (the benchmark's baseline);
    ``kernel`` picks the vectorised kernel (``"auto"``, ``"mlp"``, ``"vmap"``;
    see :func:`_train_vectorised`); ``threads`` defaults to :func:`default_threads`.
    """
    with torch_threads(threads or default_threads()):
        return _train_models(recipe, x, y, masks, seeds, vectorise, kernel)


def _train_models(
    recipe: Recipe, x: np.ndarray, y: np.ndarray, masks: np.ndarray, seeds: Sequence[int], vectorise: bool, kernel: str = "auto"
) -> Trained:
    notes: list[str] = []
    if vectorise:
        try:
            states, used, notes = _train_vectorised(recipe, x, y, masks, seeds, kernel)
            return Trained(states, "vectorised", notes, used)
        except _NotVectorisable as why:
            notes.append(f"trained {len(seeds)} reference model(s) one after another with recipe.train: {why}")
        except RecipeError:
            raise
        except Exception as exc:  # an op vmap cannot map: the sequential loop is always correct
            notes.append(
                f"trained {len(seeds)} reference model(s) one after another with recipe.train: the vectorised "
                f"engine failed on this model ({exc.__class__.__name__}: {str(exc).splitlines()[0][:160]})"
            )
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
        threads: torch threads while training (default :func:`default_threads`).

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
    probe = build_model(recipe, 0)
    like = probe.state_dict()
    try:
        with torch.no_grad():
            probe.eval()(torch.as_tensor(x[:2]))
    except Exception as exc:
        msg = str(exc).strip().splitlines()[-1][:200] if str(exc).strip() else exc.__class__.__name__
        raise RecipeError(f"recipe '{recipe.name}': its model cannot run on the audit data (rows of shape {x.shape[1:]}): {msg}.") from None

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
        with (cache.lock(lock_name) if cache is not None else _nolock()):
            if cache is not None:  # another run may have trained them while we waited
                states = [s if s is not None else cache.load(key, like) for s, key in zip(states, keys)]
            todo = [i for i, s in enumerate(states) if s is None]
            if todo:
                new, mode, notes, kernel = train_models(recipe, x, y, masks[todo], [seeds[i] for i in todo], vectorise, threads)
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
        threads=(threads or default_threads()) if trained else 0,
        seconds=time.perf_counter() - start,
        notes=notes,
        warnings=list(cache.warnings) if cache is not None else [],
    )


@contextmanager
def _nolock() -> Iterator[None]:
    yield


__all__ = [
    "DEFAULT_CACHE_DIR",
    "default_threads",
    "Ensemble",
    "KERNELS",
    "ModelCache",
    "Trained",
    "build_model",
    "data_fingerprint",
    "model_key",
    "model_seeds",
    "paired_masks",
    "recipe_fingerprint",
    "resolve_cache_dir",
    "train_ensemble",
    "torch_threads",
    "train_models",
]
