"""Reference models for scikit-learn targets: fresh clones fitted on the plan's halves, in parallel, cached.

The plan is the one every reference-model attack shares (:mod:`privgate.attacks.reference`; Carlini et al. 2022,
arXiv 2112.03570); model k is a clone of the :class:`~privgate.sklearn_recipe.SklearnRecipe` (by default the
target's own, :func:`own_recipe`) with ``random_state`` from seed k, fitted on the target's frame and label values.
Models train as Ray tasks or N at a time on joblib threads, each fit on one thread; every executor and thread count
gives the same models. Cached in :mod:`privgate.training.sklearn_cache`; outputs read as the target's, in its class
order. Details: ``docs/internals-training-stats.md``.
"""

from __future__ import annotations

import hashlib
import re
import time
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from privgate.inputs.targets.sklearn import SklearnModel, describe_estimator, margins
from privgate.io.sources import code_of, key_or_warning, project_sources
from privgate.outputs import TINY
from privgate.sklearn_recipe import SklearnRecipe
from privgate.training import trained
from privgate.training.trained import TrainedReferences, TrainSettings

#: Bumped when a change here would fit a different model from the same key's inputs.
CLONE_VERSION = 1
_ADDR = re.compile(r" at 0x[0-9a-fA-F]+")


def own_recipe(target: Any) -> SklearnRecipe | None:
    """The target's own recipe when it is a scikit-learn model (its unfitted clone); ``None`` for any other target."""
    model = getattr(target, "model", None)
    if not isinstance(model, SklearnModel):
        return None
    try:
        return SklearnRecipe(model.estimator, f"clone of the target ({describe_estimator(model.estimator)})", own=True)
    except Exception:  # noqa: BLE001 - an estimator clone cannot copy: the reference attacks say they need a recipe
        return None


def check_target(target: Any, recipe: SklearnRecipe) -> None:
    """A scikit-learn recipe trains like a scikit-learn target only: one sentence for any other target."""
    if not isinstance(getattr(target, "model", None), SklearnModel):
        from privgate.errors import RecipeError

        raise RecipeError(
            f"recipe '{recipe.name}': fits scikit-learn estimators but the target is {target.fmt}; reference models "
            "must be trained like the target."
        )


@dataclass
class CloneReader:
    """How scikit-learn clones are read: as the target is, over its classes in its order (:func:`read_like_target`)."""

    target: SklearnModel
    #: raw outputs kept by :meth:`output_batches`, per array read: ``(x, batch, models, outputs)``
    _outputs: dict[int, tuple[np.ndarray, int, int, list[tuple[int, int, np.ndarray]]]] = field(
        default_factory=dict, repr=False, compare=False
    )

    def output_batches(
        self, models: list[Any], x: np.ndarray, batch: int = 4096, transform: Any = None
    ) -> Iterator[tuple[int, int, np.ndarray]]:
        """``(model k, first row, raw outputs)`` of every model on ``x``, ``batch`` rows at a time.

        Reading a pipeline rebuilds the frame and runs every step (a forest: every tree), and the attacks of one
        run read the same models on the same rows several times (the output kind, LiRA, RMIA, the learned
        attack). So, as :meth:`privgate.training.ensemble.TorchReader.output_batches` does, all K models' outputs
        on an array are kept for the next call on that same array while the outputs kept stay within
        :data:`~privgate.training.trained.OUTPUT_MEMO_BYTES` (the audit rows and the population's z-samples:
        two arrays); beyond it they are streamed, one batch of one model at a time.
        """
        if transform is not None:
            raise ValueError("scikit-learn models are read on the audit rows as given, not on augmented views")
        memo = self._outputs.get(id(x))
        if memo is not None and memo[0] is x and memo[1] == batch and memo[2] >= len(models):
            yield from ((k, i, out.copy()) for k, i, out in memo[3] if k < len(models))
            return
        held = sum(o.nbytes for _, _, _, kept in self._outputs.values() for *_, o in kept)
        keep: list[tuple[int, int, np.ndarray]] | None = []
        size = 0
        for k, model in enumerate(models):
            for i in range(0, len(x), batch):
                out = read_like_target(model, self.target, x[i : i + batch])
                if keep is not None:
                    size += out.nbytes
                    # the whole set would be about K times the first model's: decide early
                    whole = size * (len(models) if k == 0 else 1)
                    keep = keep if held + whole <= trained.OUTPUT_MEMO_BYTES else None
                    if keep is not None:
                        keep.append((k, i, out))
                yield k, i, out.copy() if keep is not None else out
        if keep is not None:
            self._outputs[id(x)] = (x, batch, len(models), keep)

    def passes(self, models: list[Any], x: np.ndarray) -> int | None:
        return None  # not counted


def read_like_target(model: Any, target: SklearnModel, x: np.ndarray) -> np.ndarray:
    """A reference model's raw outputs on ``x``, read as the target's are, over the target's classes in its order."""
    rows = target.rows(x)
    same = len(model.classes_) == len(target.classes_) and np.array_equal(model.classes_, target.classes_)
    if target.reading == "margins" and same:
        return margins(model, rows)
    p = np.asarray(model.predict_proba(rows), dtype=np.float64)
    if not same:  # a half without some class: probability 0 for it, columns in the target's order
        full = np.zeros((len(p), len(target.classes_)))
        where = {c: i for i, c in enumerate(target.classes_.tolist())}
        for j, c in enumerate(np.asarray(model.classes_).tolist()):
            full[:, where[c]] = p[:, j]
        p = full
    if target.reading != "margins":
        return p
    logp = np.log(np.maximum(p, TINY))  # margins whose softmax is p (the target's reading)
    return logp[:, 1] - logp[:, 0] if len(target.classes_) == 2 and target.kind == "binary-logit" else logp


def _stable(v: Any) -> str:
    """A parameter value as a key sees it: estimators by class, callables by name, arrays by bytes, no addresses."""
    if callable(getattr(v, "get_params", None)) and not isinstance(v, type):
        return f"{type(v).__module__}.{type(v).__qualname__}"
    if isinstance(v, np.ndarray):
        return f"array{v.shape}{v.dtype}:{hashlib.sha256(np.ascontiguousarray(v).tobytes()).hexdigest()}"
    if callable(v) and hasattr(v, "__qualname__"):
        return f"{getattr(v, '__module__', '?')}.{v.__qualname__}"
    if isinstance(v, dict):
        return (
            "{"
            + ",".join(f"{_stable(k)}:{_stable(val)}" for k, val in sorted(v.items(), key=lambda kv: repr(kv[0])))
            + "}"
        )
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(_stable(i) for i in v) + "]"
    return _ADDR.sub("", repr(v))


def recipe_fingerprint(recipe: SklearnRecipe) -> str:
    """SHA-256 of scikit-learn's version, the estimator's class, every parameter (deep, sorted) and their code.

    The code: the source of the estimator's class, of every class and function
    among its parameters (a ``FunctionTransformer``'s ``func``, a custom step)
    and of every project module they reach (:func:`privgate.io.sources.project_sources`).

    Raises:
        Uncovered: the sources it reaches are past the walk's bounds.
    """
    import sklearn

    est = recipe.estimator
    params = est.get_params(deep=True)
    h = hashlib.sha256(f"clone{CLONE_VERSION}|sklearn {sklearn.__version__}|{type(est).__module__}."
                       f"{type(est).__qualname__}|".encode())  # fmt: skip
    for k in sorted(params):
        h.update(f"{k}={_stable(params[k])}|".encode())
    h.update(project_sources(code_of(est)).digest.encode())
    return h.hexdigest()


def data_fingerprint(x: np.ndarray, y: np.ndarray, schema: Any) -> str:
    """SHA-256 of the training pool by value (a table's rows, columns, dtypes and labels)."""
    from privgate.inputs.data import Dataset

    return Dataset(x, np.asarray(y), schema=schema).sha256() if x.dtype == object or schema is not None else \
        Dataset(np.asarray(x), np.asarray(y)).sha256()  # fmt: skip


def model_key(recipe_fp: str, data_fp: str, mask: np.ndarray, seed: int) -> str:
    h = hashlib.sha256(f"sklearn|{recipe_fp}|{data_fp}|{int(seed)}|{len(mask)}|".encode())
    h.update(np.packbits(np.asarray(mask, dtype=bool)).tobytes())
    return h.hexdigest()


def fit_clone(recipe: SklearnRecipe, layout: Any, x: np.ndarray, y: np.ndarray, seed: int) -> tuple[Any, int]:
    """One reference model: a fresh clone fitted on the rows ``x`` and class indices ``y``; (model, warnings seen).

    ``layout``: the target's frame layout and classes (:meth:`SklearnModel.layout`), not the fitted target,
    so a Ray task does not carry the target's trees. The caller holds BLAS and OpenMP to one thread.
    """
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        model = recipe.train(layout.rows(x), layout.classes_[np.asarray(y)], seed)
    return model, sum(1 for w in seen if issubclass(w.category, UserWarning))


def train_clones(
    recipe: SklearnRecipe,
    target: SklearnModel,
    x: np.ndarray,
    y: np.ndarray,
    masks: np.ndarray,
    seeds: Sequence[int],
    settings: TrainSettings | None = None,
) -> TrainedReferences:
    """Model k: a clone fitted on ``x[masks[k]]`` with seed ``seeds[k]``, from the cache when it holds it.

    ``settings``: the cache, the threads, the executor (Ray tasks) and where progress goes (default: no cache, one
    model after another).
    """
    t0 = time.perf_counter()
    settings = settings or TrainSettings()
    store = _CloneStore.open(recipe, target, x, y, masks, seeds, settings)
    models = store.load(len(seeds))
    todo = [i for i, m in enumerate(models) if m is None]
    n = max(1, int(settings.threads or 1))
    layout = target.layout()
    tasks = [(recipe, layout, x[masks[i]], y[masks[i]], int(seeds[i])) for i in todo]
    if settings.progress and todo:
        settings.progress(f"fitting {len(todo)} reference models ({recipe.name})")
    done, mode = _fit_all(tasks, n, settings.executor)
    warned = 0
    for i, (model, w) in zip(todo, done):
        models[i] = model
        warned += w
        store.store(i, model)
    return TrainedReferences(
        recipe=recipe,
        models=models,
        masks=masks,
        seeds=list(seeds),
        reader=CloneReader(target),
        trained=len(todo),
        cached=len(seeds) - len(todo),
        mode=mode,
        seconds=time.perf_counter() - t0,
        notes=_notes(recipe, warned),
        kernel="sklearn.base.clone + fit",
        threads=n if mode.startswith("in parallel") else 1,
        warnings=store.warnings(),
    )


@dataclass
class _CloneStore:
    """The clones' cache as one call sees it: each model's key (no cache: none)."""

    cache: Any = None
    keys: list[str] = field(default_factory=list)
    unkeyed: list[str] = field(default_factory=list)

    @classmethod
    def open(
        cls,
        recipe: SklearnRecipe,
        target: SklearnModel,
        x: np.ndarray,
        y: np.ndarray,
        masks: np.ndarray,
        seeds: Sequence[int],
        settings: TrainSettings,
    ) -> _CloneStore:
        """The cache of ``settings`` with every model's key (no cache when the recipe cannot be keyed)."""
        if settings.cache_dir is None:
            return cls()
        from privgate.training.sklearn_cache import SklearnCache

        cache = SklearnCache(settings.cache_dir, settings.cache_key)
        rfp, unkeyed = key_or_warning(recipe_fingerprint, recipe)
        if not rfp:
            return cls(unkeyed=unkeyed)
        dfp = data_fingerprint(x, y, target.schema)
        return cls(cache, [model_key(rfp, dfp, m, s) for m, s in zip(masks, seeds)], unkeyed)

    def load(self, k: int) -> list[Any]:
        """Each of the ``k`` models the cache holds, None for the others."""
        return [self.cache.load_model(key) for key in self.keys] if self.cache is not None else [None] * k

    def store(self, i: int, model: Any) -> None:
        if self.cache is not None:
            self.cache.store_model(self.keys[i], model)

    def warnings(self) -> list[str]:
        return (list(self.cache.warnings) if self.cache is not None else []) + self.unkeyed


def _fit_all(tasks: list[tuple[Any, ...]], threads: int, executor: Any) -> tuple[list[tuple[Any, int]], str]:
    """Every task's :func:`fit_clone`, and how they ran: as Ray tasks, on joblib threads or one after another."""
    if tasks and executor is not None and getattr(executor, "name", "local") == "ray":
        return executor.map(fit_clone, tasks, threads=1), f"as {len(tasks)} Ray tasks"
    from privgate.threads import native_threads

    with native_threads(1):
        if len(tasks) > 1 and threads > 1:  # threads: scikit-learn's fits release the GIL, and nothing is pickled
            from joblib import Parallel, delayed

            jobs = min(threads, len(tasks))
            done = Parallel(n_jobs=jobs, backend="threading")(delayed(fit_clone)(*t) for t in tasks)
            return done, f"in parallel on {jobs} threads (joblib)"
        return [fit_clone(*t) for t in tasks], "sequentially"


def _notes(recipe: SklearnRecipe, warned: int) -> list[str]:
    """What the report says of the clones: whose clones, and the warnings their fits raised."""
    whose = "the target" if recipe.own else f"recipe '{recipe.name}'"
    notes = [f"reference models are clones of {whose} (sklearn.base.clone), random_state set per model from the seed"]
    if warned:
        notes.append(f"fitting the reference models raised {warned} warning(s) (e.g. convergence), as fitting the "
                     "target may have")  # fmt: skip
    return notes


__all__ = [
    "CLONE_VERSION",
    "CloneReader",
    "check_target",
    "own_recipe",
    "read_like_target",
    "recipe_fingerprint",
    "train_clones",
]
