"""scikit-learn classifiers as targets: ``.skops`` files of trusted types, pickles only with ``--trust-checkpoint``.

The rest (design, limits, derivations): docs/internals-inputs.md.
"""

from __future__ import annotations

import importlib.abc
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from privgate import outputs as _outputs
from privgate.errors import TargetError, clip, shown
from privgate.inputs.targets.blackbox import BlackBox
from privgate.inputs.targets.skops_schema import MAX_DECODED
from privgate.inputs.targets.skops_trust import NEVER, check_imported, trusted_names, untrusted_types, vet

#: Largest gap between predict_proba and the softmax of the margins for the margins to be read as logits.
MARGIN_TOL = 1e-6


def load_skops(path: Path, trust_types: Sequence[str] = (), most: int = MAX_DECODED) -> SklearnModel:
    """A fitted classifier from a ``.skops`` file whose every name is trusted; one sentence otherwise.

    ``most``: the bytes the file's arrays may decode to (:data:`~privgate.inputs.targets.skops_schema.MAX_DECODED`).
    """
    vetted = vet(path, trust_types, most)  # before skops (and scikit-learn) is imported
    sio = _skops(path)
    with _project_path(path if vetted.mine else None):  # the user's trusted types live in their project
        check_imported(vetted.mine)  # their modules imported, each name a class (or their function) before any call
        try:
            model = sio.load(path, trusted=vetted.trusted)
        except Exception as exc:  # noqa: BLE001 - skops and the types it builds raise their own errors
            raise TargetError(f"{path}: the skops file cannot be loaded ({_first(exc)}).") from None
    inert(model, str(path))
    wrapped = wrap_estimator(model, str(path))
    if wrapped is None:
        raise TargetError(f"{path}: the skops file holds a {type(model).__name__}, not a fitted classifier.")
    return wrapped


def inert(model: Any, source: str) -> None:
    """Refuse a model whose parameters make scikit-learn read or load files: a ``memory`` (joblib caches fitted
    steps there as pickles, and loads them back when privgate refits the model) or a text vectorizer's ``input``
    of ``'filename'``/``'file'`` (it opens whatever its data names)."""
    get_params = getattr(model, "get_params", None)
    try:
        params = get_params(deep=True) if callable(get_params) else {}
    except Exception:  # noqa: BLE001 - a foreign estimator's parameters: nothing of scikit-learn's to read
        return
    for key, value in params.items():
        last = key.rpartition("__")[2]
        if last == "memory" and value is not None:
            raise TargetError(
                f"{source}: the model's {shown(key, 60)} is {shown(value, 80)}: joblib would cache fitted steps there "
                "as pickles and load them back when privgate refits it; save the model with memory=None."
            )
        if last == "input" and isinstance(value, str) and value in ("filename", "file"):
            raise TargetError(
                f"{source}: the model's {shown(key, 60)} is {value!r}: its vectorizer would open the files its data "
                "names; save the model with input='content'."
            )


#: The package scikit-learn's ``all_estimators`` imports as it walks scikit-learn's packages, which skops calls when
#: imported (its default trusted types): it imports torch and holds no estimator (the walk skips ``externals``).
TORCH_SHIM = "sklearn.externals.array_api_compat.torch"


class _WithoutTorchShim(importlib.abc.MetaPathFinder):
    """Refuses :data:`TORCH_SHIM` while skops is imported: the walk passes over a package it cannot import."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> None:
        if name == TORCH_SHIM or name.startswith(TORCH_SHIM + "."):
            raise ModuleNotFoundError(f"{name} is not imported while skops lists the estimators", name=name)


def import_skops() -> Any:
    """``skops.io``, imported without torch (seconds a run); its list of scikit-learn's estimators is the same."""
    if "skops.io" not in sys.modules and "torch" not in sys.modules:
        finder = _WithoutTorchShim()
        sys.meta_path.insert(0, finder)
        try:
            import skops.io
        finally:
            sys.meta_path.remove(finder)
    import skops.io

    return skops.io


def _skops(path: Path) -> Any:
    try:
        sio = import_skops()
    except ImportError:
        raise TargetError(
            f"{path}: is a skops file; reading it needs skops (pip install 'privgate[sklearn]')."
        ) from None
    return sio


@contextmanager
def _project_path(model: Path | None) -> Iterator[None]:
    """The model's folder and the working directory on ``sys.path`` while a file naming the user's types loads."""
    added = [] if model is None else [str(d) for d in dict.fromkeys((Path(model).resolve().parent, Path.cwd()))]
    added = [d for d in added if d not in sys.path]
    sys.path.extend(added)  # after every installed package: a file beside the model never shadows one
    try:
        yield
    finally:
        for d in added:
            if d in sys.path:
                sys.path.remove(d)


def _first(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else exc.__class__.__name__
    return clip(text.split(". ")[0].rstrip("."), 200)


def is_estimator(obj: Any) -> bool:
    """Whether ``obj`` is a scikit-learn style estimator (``fit`` and ``get_params``), fitted or not."""
    return callable(getattr(obj, "fit", None)) and callable(getattr(obj, "get_params", None))


def wrap_estimator(obj: Any, source: str) -> SklearnModel | None:
    """A fitted scikit-learn style classifier as a :class:`SklearnModel`; ``None`` for anything else."""
    if isinstance(obj, SklearnModel):
        return obj
    if not is_estimator(obj) or isinstance(obj, type):
        return None
    return SklearnModel(obj, source)


def describe_estimator(est: Any) -> str:
    """``Pipeline(ColumnTransformer(OneHotEncoder, StandardScaler) → RandomForestClassifier)``."""
    steps = getattr(est, "steps", None)
    if isinstance(steps, list):
        return f"{type(est).__name__}({' → '.join(describe_estimator(s) for _, s in steps)})"
    parts = getattr(est, "transformers", None)  # as declared: fitted, a "passthrough" is a FunctionTransformer
    if isinstance(parts, list):
        rest = getattr(est, "remainder", "drop")
        inner = [t if isinstance(t, str) else describe_estimator(t) for _, t, _ in parts] + [rest]
        return f"{type(est).__name__}({', '.join(dict.fromkeys(i for i in inner if i != 'drop'))})"
    return type(est).__name__


class SklearnModel(BlackBox):
    """A fitted scikit-learn classifier, queried with the frame it was fitted on (module docstring).

    Attributes:
        estimator: the fitted estimator itself (cloned for reference models, read by the structural attack).
        classes_: its classes, in its order: label ``k`` of the audit is ``classes_[k]``.
        schema: the frame layout of the audit tables (:meth:`bind`); ``None``: rows go in as arrays, named
            by ``feature_names_in_`` when the model was fitted on a frame.
        reading: ``"margins"`` (decision function read as logits) or ``"probabilities"``.
    """

    fmt = "sklearn"
    target_kind = "sklearn"  # audited by privgate.attacks.contexts.sklearn

    def __init__(self, estimator: Any, source: str) -> None:
        self.estimator = estimator
        self.source = source
        name = type(estimator).__name__
        if getattr(estimator, "_estimator_type", None) == "regressor" or _is_regressor(estimator):
            raise TargetError(f"{source}: the model is a regressor ({name}); privgate audits classifiers.")
        if not (hasattr(estimator, "predict_proba") or hasattr(estimator, "decision_function")):
            raise TargetError(f"{source}: the {name} has neither predict_proba nor decision_function to query.")
        classes = getattr(estimator, "classes_", None)
        if classes is None:
            raise TargetError(f"{source}: the {name} is not fitted (it has no classes_); audit the fitted model.")
        self.classes_ = np.asarray(classes)
        if self.classes_.ndim != 1 or len(self.classes_) < 2:
            raise TargetError(f"{source}: the {name}'s classes_ is not a list of two or more classes.")
        names = getattr(estimator, "feature_names_in_", None)
        self.feature_names: list[Any] | None = None if names is None else list(names)
        n = getattr(estimator, "n_features_in_", None)
        self.n_features: int | None = None if n is None else int(n)
        self.schema: Any = None
        self.reading = "probabilities" if hasattr(estimator, "predict_proba") else "margins"

    # ------------------------------------------------------------------ rows in

    def bind(self, schema: Any) -> None:
        """Read rows as frames of ``schema`` (the audit tables' columns and dtypes, :mod:`privgate.inputs.tables`)."""
        self.schema = schema

    def rows(self, x: np.ndarray) -> Any:
        """``x`` as the model takes it: the bound schema's frame, a frame of ``feature_names_in_``, or the array."""
        return self.layout().rows(x)

    def layout(self) -> Layout:
        """How rows reach the model and what its classes are, without the fitted model (sent to reference tasks)."""
        return Layout(self.schema, self.feature_names, self.classes_)

    # ------------------------------------------------------------------ outputs

    def raw(self, x: np.ndarray) -> np.ndarray:
        rows = self.rows(x)
        if self.reading == "margins":
            return margins(self.estimator, rows)
        return np.asarray(self.estimator.predict_proba(rows), dtype=np.float64)

    def detect_outputs(self, x: np.ndarray) -> tuple[str | None, str | None]:
        """Read the margins as logits when they reproduce ``predict_proba`` on the probe ``x`` (module docstring)."""
        rows = self.rows(x)
        if hasattr(self.estimator, "predict_proba"):
            p = np.asarray(self.estimator.predict_proba(rows), dtype=np.float64)
            z = _try_margins(self.estimator, rows)
            self.reading = "margins" if z is not None and _reproduces(z, p) else "probabilities"
        raw = self.raw(x)
        self.kind = _outputs.kind_of(raw) if self.reading == "margins" else _outputs.PROBABILITIES
        if self.kind is None:
            raise TargetError(f"{self.source}: the model's outputs have shape {raw.shape}, not one row per input.")
        return None, None

    def describe(self) -> dict[str, Any]:
        import sklearn

        how = (
            "its margins (decision function), whose softmax is its predict_proba"
            if self.reading == "margins" and hasattr(self.estimator, "predict_proba")
            else "its margins (decision function; it has no predict_proba)"
            if self.reading == "margins"
            else "its predict_proba"
        )
        return {
            **super().describe(),
            "estimator": describe_estimator(self.estimator),
            "classes": len(self.classes_),
            "read": how,
            "sklearn_version": sklearn.__version__,
        }


@dataclass(frozen=True)
class Layout:
    """The frame a model reads rows as (a table's schema, else ``feature_names_in_``) and its classes."""

    schema: Any
    feature_names: list[Any] | None
    classes_: np.ndarray

    def rows(self, x: np.ndarray) -> Any:
        if self.schema is not None:
            return self.schema.frame(x)
        x = np.asarray(x)
        if self.feature_names is not None and x.ndim == 2 and x.shape[1] == len(self.feature_names):
            import pandas as pd

            return pd.DataFrame(x, columns=self.feature_names).infer_objects()
        return x


def _is_regressor(est: Any) -> bool:
    try:
        from sklearn.base import is_regressor

        return bool(is_regressor(est))
    except Exception:  # noqa: BLE001 - a foreign estimator without tags
        return False


def _try_margins(est: Any, rows: Any) -> np.ndarray | None:
    try:
        return margins(est, rows)
    except Exception:  # noqa: BLE001 - no margins to read: the probabilities are
        return None


def margins(est: Any, rows: Any) -> np.ndarray:
    """The model's margins on ``rows``: ``decision_function``, or a boosting library's raw scores."""
    if hasattr(est, "decision_function"):
        return np.asarray(est.decision_function(rows), dtype=np.float64)
    final = est.steps[-1][1] if isinstance(getattr(est, "steps", None), list) else est
    if hasattr(final, "get_booster"):  # XGBoost's wrapper
        return np.asarray(est.predict(rows, output_margin=True), dtype=np.float64)
    if type(final).__module__.startswith("lightgbm"):
        return np.asarray(est.predict(rows, raw_score=True), dtype=np.float64)
    raise AttributeError("no margins")


def _reproduces(z: np.ndarray, p: np.ndarray) -> bool:
    """Whether the softmax (one margin: the sigmoid) of ``z`` is ``p`` within :data:`MARGIN_TOL`."""
    kind = _outputs.kind_of(z)
    if kind is None or (kind == _outputs.BINARY) != (p.shape[1] == 2) or len(z) != len(p):
        return False
    lp = _outputs.log_proba(z, _outputs.BINARY if kind == _outputs.BINARY else _outputs.LOGITS)
    return lp.shape == p.shape and bool(np.max(np.abs(np.exp(lp) - p)) <= MARGIN_TOL)


__all__ = [
    "NEVER",
    "Layout",
    "SklearnModel",
    "describe_estimator",
    "is_estimator",
    "inert",
    "load_skops",
    "margins",
    "trusted_names",
    "untrusted_types",
    "wrap_estimator",
]
