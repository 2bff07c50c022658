"""scikit-learn classifiers as targets: ``.skops`` files of trusted types, pickles only with ``--trust-checkpoint``.

**Loading.** A ``.skops`` file (skops.io, a zip of JSON and ``.npy`` arrays) is
data until it names a type: loading it imports and instantiates every type it
names. privgate loads one only when every type skops lists as untrusted
(:func:`skops.io.get_untrusted_types`) is trusted here:

* scikit-learn's, numpy's and scipy's own types and functions (by module:
  ``sklearn.``, ``numpy.``, ``scipy.``; skops 0.16 still lists
  ``sklearn.tree._tree.Tree``, in every random forest, and a histogram
  gradient-boosting model's ``TreePredictor`` as untrusted), ``functools.partial``
  (which binds arguments to a function that must itself be trusted) and
  ``collections.OrderedDict`` (a dict);
* the names the user gives (``--trust-type NAME``, repeatable; ``trust_types``
  in ``privgate.toml``): their own transformer classes, a function of a
  ``FunctionTransformer``, a library's estimator (``xgboost.sklearn.XGBClassifier``).
  Trusting a name means privgate imports its module, as naming a recipe does (found on
  the interpreter's path, else in the model's folder or the working directory);
  names that reach the interpreter itself (``builtins.eval``, ``os``,
  ``subprocess``, ``importlib``, ``pickle`` …, :data:`NEVER`) are never trusted.

Any other type is refused before anything is imported, in one sentence naming
it (exit 2). The zip's entries are size-checked first
(:func:`privgate.inputs.npzlimits.check_npz`). ``.joblib``, ``.pkl`` and
``.pickle`` files are pickles: loading them runs code from the file, so they
need ``--trust-checkpoint`` (:meth:`privgate.inputs.target.Target.load`).

**Reading.** :class:`SklearnModel` is the black box the
:class:`~privgate.inputs.target.Target` wraps: any fitted classifier with
``predict_proba`` or ``decision_function`` — a ``Pipeline``, a
``ColumnTransformer`` in front of a forest, gradient boosting, a logistic
regression, an SVC, k-NN, an MLP, XGBoost's and LightGBM's scikit-learn
wrappers. Rows reach it as the frame it was fitted on
(:meth:`SklearnModel.bind`, :mod:`privgate.inputs.tables`). Its outputs are read
without saturation where the model allows: when the softmax (or sigmoid) of
its margins — ``decision_function``, or XGBoost's ``output_margin`` and
LightGBM's ``raw_score`` — reproduces ``predict_proba`` on the probed rows
(logistic regression, gradient boosting), the margins are read as logits, so a
member predicted with probability 1 − 10⁻²⁰ keeps its score; otherwise (a
forest's vote shares, an SVC's Platt scaling) the probabilities are read.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from privgate.errors import DataError, TargetError, clip, shown
from privgate.inputs import outputs as _outputs
from privgate.inputs.targets.blackbox import BlackBox

#: Modules whose types and functions a skops file may name without being trusted by the user.
TRUSTED_MODULES = ("sklearn", "numpy", "scipy")
#: Single names trusted besides those modules (see the module docstring).
TRUSTED_NAMES = frozenset({"functools.partial", "collections.OrderedDict"})
#: Modules (and built-ins) never trusted, whoever names them: they reach the interpreter, the shell or pickle.
NEVER = frozenset(
    {"builtins", "os", "posix", "nt", "sys", "subprocess", "shutil", "importlib", "runpy", "pickle", "marshal",
     "ctypes", "code", "codeop", "pty", "socket", "operator", "types", "io", "pathlib", "tempfile", "joblib",
     "dill", "cloudpickle", "shelve", "webbrowser", "multiprocessing", "threading", "signal", "gc", "inspect"}
)  # fmt: skip
#: Largest gap between predict_proba and the softmax of the margins for the margins to be read as logits.
MARGIN_TOL = 1e-6
_NAME = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)+$")


def trusted_names(names: Sequence[str], where: str = "--trust-type") -> tuple[str, ...]:
    """The user's trusted type names, checked: dotted ``module.Name`` and none of :data:`NEVER`."""
    out = []
    for name in names:
        if not isinstance(name, str) or not _NAME.match(name.strip()):
            raise TargetError(
                f"{where} {shown(name, 80)}: expected a dotted type name such as 'mymodule.MyTransformer'."
            )
        name = name.strip()
        if name.split(".")[0] in NEVER:
            raise TargetError(
                f"{where} {shown(name, 80)}: privgate never trusts '{name.split('.')[0]}', which can run any code; "
                "a model should not need it."
            )
        out.append(name)
    return tuple(dict.fromkeys(out))


def trusted_by_default(name: str) -> bool:
    """Whether privgate trusts a type a skops file names without being told to (the module docstring)."""
    return name in TRUSTED_NAMES or name.split(".")[0] in TRUSTED_MODULES


def load_skops(path: Path, trust_types: Sequence[str] = ()) -> SklearnModel:
    """A fitted classifier from a ``.skops`` file whose every type is trusted; one sentence otherwise."""
    sio = _skops(path)
    listed = untrusted_types(path, trust_types)
    try:
        with _project_path(path if trust_types else None):  # the user's trusted types live in their project
            model = sio.load(path, trusted=list(listed))
    except Exception as exc:  # noqa: BLE001 - skops and the types it builds raise their own errors
        raise TargetError(f"{path}: the skops file cannot be loaded ({_first(exc)}).") from None
    wrapped = wrap_estimator(model, str(path))
    if wrapped is None:
        raise TargetError(f"{path}: the skops file holds a {type(model).__name__}, not a fitted classifier.")
    return wrapped


def _skops(path: Path) -> Any:
    try:
        import skops.io as sio
    except ImportError:
        raise TargetError(
            f"{path}: is a skops file; reading it needs skops (pip install 'privgate[sklearn]')."
        ) from None
    return sio


def untrusted_types(path: Path, trust_types: Sequence[str] = ()) -> list[str]:
    """The types skops lists as untrusted in ``path``, once every one is trusted here; one sentence otherwise.

    Reads the zip's entry sizes and its schema, never an object: nothing is imported.
    """
    sio = _skops(path)
    from privgate.inputs.npzlimits import check_npz

    try:
        check_npz(path)  # a zip of .npy arrays: entry sizes and declared shapes before anything inflates
    except DataError as exc:
        raise TargetError(str(exc)) from None
    mine = set(trusted_names(trust_types))
    try:
        listed = sio.get_untrusted_types(file=path)
    except Exception as exc:  # noqa: BLE001 - a damaged zip, foreign JSON, nesting too deep
        raise TargetError(f"{path}: not a readable skops file ({_first(exc)}); the file may be truncated.") from None
    refused = [t for t in listed if not trusted_by_default(t) and t not in mine]
    if refused:
        more = (
            f" (and {len(refused) - 1} more: {', '.join(shown(t, 60) for t in refused[1:4])})"
            if len(refused) > 1
            else ""
        )
        raise TargetError(
            f"{path}: the skops file names the type {shown(refused[0], 100)}{more}, which privgate does not trust: "
            f"loading it would import and run its module's code; if it is yours, trust it with --trust-type "
            f"{clip(refused[0], 100)} (or trust_types in privgate.toml)."
        )
    return list(listed)


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
    "TRUSTED_MODULES",
    "TRUSTED_NAMES",
    "Layout",
    "SklearnModel",
    "describe_estimator",
    "is_estimator",
    "load_skops",
    "margins",
    "trusted_by_default",
    "trusted_names",
    "untrusted_types",
    "wrap_estimator",
]
