"""Target: a loaded model with explicit capabilities (docs/model-formats.md).

``predict_proba`` (black-box), ``predict`` (label-only) and ``module`` (white-box, a ``torch.nn.Module``; ``None``
for scikit-learn estimators), batched under ``torch.no_grad()`` in eval mode; raw outputs are read by
:mod:`privgate.outputs`, fixed by :meth:`Target.detect_outputs` from a probe before any attack runs.
Formats: ``torch.export`` programs (``.pt2``), TorchScript, a ``state_dict`` (``weights_only=True``) or
safetensors plus the recipe's factory (:mod:`~privgate.inputs.targets.torchfiles`, the only loader that imports
torch), and pickles — refused unless ``trust_checkpoint=True`` (they run code).
"""

from __future__ import annotations

import copy
import dataclasses
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from privgate import outputs as _outputs
from privgate.device import device_of, module_device
from privgate.errors import TargetError
from privgate.inputs.surface import QueryLog, Surface
from privgate.inputs.targets.blackbox import BlackBox
from privgate.io.digest import file_sha256

if TYPE_CHECKING:  # torch is imported by the torch formats' loaders: a scikit-learn audit never imports it
    from torch import nn

    from privgate.recipe import Recipe

BATCH = 1024
#: Rows a scikit-learn target scores at a time (a torch target's chunks are its BATCH-row forward batches).
CHUNK = 65536


def is_torch_module(obj: Any) -> bool:
    """Whether ``obj`` is a ``torch.nn.Module``, without importing torch: nothing is one before torch is imported."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(obj, torch.nn.Module)


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """Log-softmax over the last axis, in float64 (no saturation at confident outputs)."""
    z = np.asarray(logits, dtype=np.float64)
    m = z.max(axis=-1, keepdims=True)
    return z - (m + np.log(np.exp(z - m).sum(axis=-1, keepdims=True)))


@dataclass
class Target:
    """A model under audit.

    Args:
        model: an ``nn.Module`` returning logits, or a fitted scikit-learn classifier.
        source: where it came from (path), for the report.
        fmt: the checkpoint format.
        sha256: hash of the checkpoint file.
        architecture_notes: changes made to the architecture (e.g. by DP fixes).
        outputs: how a torch model's raw outputs are read (:mod:`privgate.outputs`);
            ``None`` until :meth:`detect_outputs` fixes it, meanwhile decided per call.
        surface: what an API release returns (:mod:`privgate.inputs.surface`): every output read
            (:meth:`log_proba`, :meth:`log_proba_chunks`, :meth:`map_rows`, :meth:`predict_proba`,
            :meth:`predict`) is the served answer, each row counted in ``queries``; ``None``: the model
            itself (the raw :meth:`logits` and :attr:`module` stay the white-box view).
    """

    model: Any
    source: str = "<in memory>"
    fmt: str = "module"
    sha256: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    outputs: _outputs.Kind | None = None
    surface: Surface | None = None
    queries: QueryLog = field(default_factory=QueryLog, repr=False, compare=False)

    def __post_init__(self) -> None:
        if is_torch_module(self.model):  # a TorchScript module is one too
            self.model.eval()
        elif not hasattr(self.model, "predict_proba"):
            raise TargetError(
                f"{self.source}: the checkpoint holds a {type(self.model).__name__}, not a model (no forward "
                f"pass or predict_proba)."
            )

    # ------------------------------------------------------------------ capabilities

    @property
    def kind(self) -> str:
        """What kind of model this is, decided when it was loaded: ``tabular`` (a classifier on rows of features);
        ``sklearn`` (a fitted scikit-learn classifier, :class:`~privgate.inputs.targets.sklearn.SklearnModel`:
        its own recipe, its trees, tables with text columns); a Hugging Face folder is a ``causal_lm`` or a
        ``sequence_classifier`` (:class:`~privgate.inputs.targets.hf_target.HFTarget`). The gate audits a target
        by its kind (:mod:`privgate.attacks.contexts`)."""
        return self.model.target_kind if isinstance(self.model, BlackBox) else "tabular"

    @property
    def module(self) -> nn.Module | None:
        """The torch module (white-box access), or ``None`` for non-torch estimators."""
        return self.model if is_torch_module(self.model) else None

    @property
    def white_box(self) -> bool:
        return self.module is not None

    @property
    def device(self) -> str:
        """Where a torch model's parameters live (``"cpu"``, ``"cuda"``); ``"cpu"`` for other models."""
        return module_device(self.model) if is_torch_module(self.model) else "cpu"

    def to_device(self, device: str) -> Target:
        """This target with its torch model on ``device`` (``"cpu"`` or ``"cuda"``): itself when it is there already.

        The model is moved as a copy, so a module the caller handed in stays
        where it was; scikit-learn models always run on the CPU. A TorchScript
        module is copied by saving and loading it onto ``device``: ``copy.deepcopy``
        of one gives parameters that are not leaves (clones with autograd
        history pointing at the original's), so a white-box gradient would be
        read off copies and flow back to the CPU originals.
        """
        if not is_torch_module(self.model):
            return self
        import torch

        if self.device == torch.device(device).type:
            return self
        try:
            if isinstance(self.model, torch.jit.ScriptModule):
                from privgate.inputs.targets.torchfiles import script_copy

                moved = script_copy(self.model, device)
            else:
                moved = copy.deepcopy(self.model).to(device)
        except Exception as exc:  # noqa: BLE001 - e.g. a TorchScript module that cannot be copied
            raise TargetError(
                f"{self.source}: the model cannot be moved to {device} ({exc.__class__.__name__}: {exc})."
            ) from None
        return dataclasses.replace(self, model=moved)

    def serving(self, surface: Surface | None) -> Target:
        """This target as seen through ``surface`` (itself when it already is), with a fresh query count."""
        if surface == self.surface:
            return self
        return dataclasses.replace(self, surface=surface, queries=QueryLog())

    def _served(self, log_proba: np.ndarray) -> np.ndarray:
        """The surface's answer to these rows (one query each); the model's own outputs without a surface."""
        if self.surface is None:
            return log_proba
        self.queries.add(len(log_proba))
        return self.surface.log_proba(log_proba)

    @property
    def n_parameters(self) -> int | None:
        return sum(p.numel() for p in self.module.parameters()) if self.module is not None else None

    def logits(self, x: np.ndarray) -> np.ndarray:
        """Raw outputs of a torch model, batched, in eval mode without gradients, on the model's device."""
        outs = list(self._raw_batches(x))
        return np.concatenate(outs) if outs else np.zeros((0, 0))

    def _raw_batches(self, x: np.ndarray) -> Iterator[np.ndarray]:
        """The raw outputs of :meth:`logits`, one float64 array per batch of :data:`BATCH` rows."""
        if self.module is None:
            raise TargetError(f"{self.source}: logits need a torch model; this target is {type(self.model).__name__}.")
        import torch

        device = device_of(self.module)  # the rows go where the model is
        with torch.no_grad():
            for start in range(0, len(x), BATCH):
                xb = torch.as_tensor(np.asarray(x[start : start + BATCH]), dtype=torch.float32).to(device)
                out = self.module(xb)
                if isinstance(out, (tuple, list)):
                    out = out[0]
                if out.dim() == 0:  # a squeezed single logit of a one-row batch
                    out = out.reshape(1)
                yield out.detach().cpu().numpy().astype(np.float64)

    def log_proba_chunks(self, x: np.ndarray) -> Iterator[tuple[int, np.ndarray]]:
        """``(start, log_proba)`` of consecutive row chunks of ``x``: :meth:`log_proba`, a chunk at a time.

        A torch model's chunks are its forward batches (:data:`BATCH` rows, the
        batches :meth:`logits` runs), a scikit-learn model's :data:`CHUNK` rows;
        every step after the forward pass works row by row, so the chunks
        concatenated are :meth:`log_proba` of all of ``x``, while memory holds one
        chunk's ``[rows, classes]`` matrix at a time. Before :meth:`detect_outputs`
        has fixed how a torch model's outputs are read, the reading is decided on
        all of ``x`` at once, as :meth:`log_proba` does (one chunk).
        """
        for start, lp in self._model_chunks(x):
            yield start, self._served(lp)

    def _model_chunks(self, x: np.ndarray) -> Iterator[tuple[int, np.ndarray]]:
        """:meth:`log_proba_chunks` of the model itself, before any surface."""
        if self.module is not None and self.outputs is not None:
            start = 0
            for raw in self._raw_batches(x):
                yield start, _outputs.log_proba(raw, self._kind(raw))
                start += len(raw)
            return
        step = CHUNK if self.module is None else max(len(x), 1)
        for start in range(0, len(x), step):
            yield start, self._model_log_proba(x[start : start + step])

    def map_rows(self, x: np.ndarray, y: np.ndarray, fn: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> np.ndarray:
        """``fn(log_proba, y)`` of every row, computed chunk by chunk (:meth:`log_proba_chunks`) and concatenated.

        ``fn`` maps a chunk's ``[rows, classes]`` log-probabilities and labels to
        one value (or one vector) per row, using nothing but each row itself; peak
        memory is one chunk's matrix plus the result, whatever the number of rows.
        """
        parts = [np.asarray(fn(lp, y[start : start + len(lp)])) for start, lp in self.log_proba_chunks(x)]
        return np.concatenate(parts) if parts else np.asarray(fn(np.zeros((0, 1)), y[:0]))

    def _kind(self, raw: np.ndarray) -> _outputs.Kind:
        """How to read ``raw``: the detected kind, else this call's own (:func:`privgate.outputs.kind_of`)."""
        kind = _outputs.kind_of(raw)
        if kind is None:
            raise TargetError(
                f"{self.source}: the model returned shape {tuple(raw.shape)}, expected [batch, classes] "
                f"logits or probabilities, "
                "or one logit per row ([batch] or [batch, 1])."
            )
        if self.outputs is None:
            return kind
        if (self.outputs == _outputs.BINARY) != (kind == _outputs.BINARY):
            raise TargetError(
                f"{self.source}: the model returned shape {tuple(raw.shape)}, unlike its earlier "
                f"{self.outputs} outputs."
            )
        return self.outputs

    def detect_outputs(self, x: np.ndarray) -> tuple[str | None, str | None]:
        """Fix how the raw outputs are read from a probe ``x`` (a few hundred audit rows).

        Every probed row must be non-negative and sum to 1 for the outputs to be
        read as probabilities (:func:`privgate.outputs.kind_of`). Non-torch
        targets give probabilities by contract (``predict_proba``).

        Returns:
            (a note for the report when the outputs are not plain logits, a
            warning when a single output looks like a sigmoid's probability).
        """
        if isinstance(self.model, BlackBox):  # ONNX, boosted trees, endpoints: read like a torch model's outputs
            found = self.model.detect_outputs(x)
            self.outputs = _outputs.PROBABILITIES  # what predict_proba/predict_log_proba hand over
            return found
        if self.module is None:
            self.outputs = _outputs.PROBABILITIES
            return None, None
        self.outputs = None
        raw = self.logits(x)
        self.outputs = self._kind(raw)
        return _outputs.note(self.outputs, len(raw)), _outputs.sigmoid_hint(raw, self.outputs)

    def predict_proba(self, x: np.ndarray) -> np.ndarray:
        """Class probabilities, shape ``[n, classes]`` (the raw outputs read by :mod:`privgate.outputs`)."""
        if self.surface is not None and not self.surface.full:
            return np.exp(self.log_proba(x))
        if self.surface is not None:  # every class at full precision: the model's own numbers, one query a row
            self.queries.add(len(x))
        return self._model_proba(x)

    def log_proba(self, x: np.ndarray) -> np.ndarray:
        """Log class probabilities without saturation: log-softmax of the logits for torch models.

        Softmax probabilities round to exactly 1.0 once a logit margin passes ~37,
        which ties every confident example and blinds loss-style attacks. One
        logit z is read as the logits [0, z]; probabilities as log p. Through the :attr:`surface`, when set.
        """
        return self._served(self._model_log_proba(x))

    def _model_log_proba(self, x: np.ndarray) -> np.ndarray:
        """:meth:`log_proba` of the model itself, before any surface."""
        if self.module is not None:
            raw = self.logits(x)
            return _outputs.log_proba(raw, self._kind(raw))
        if hasattr(self.model, "predict_log_proba"):
            with np.errstate(divide="ignore"):
                out = np.asarray(self.model.predict_log_proba(np.asarray(x)), dtype=np.float64)
            return np.maximum(out, np.log(1e-300))
        return np.log(np.clip(np.asarray(self.model.predict_proba(np.asarray(x)), dtype=np.float64), 1e-300, 1.0))

    def predict(self, x: np.ndarray) -> np.ndarray:
        """Predicted labels (label-only access): the argmax of the model's outputs, a chunk of rows at a time.

        The label is the model's own argmax whatever the surface (an API that serves
        the label serves that one); each row is one query.
        """
        if self.module is not None and self.outputs is not None:
            parts = [np.exp(lp).argmax(axis=1) for _, lp in self._model_chunks(x)]
        else:
            step = CHUNK if self.module is None else max(len(x), 1)
            parts = [self._model_proba(x[i : i + step]).argmax(axis=1) for i in range(0, len(x), step)]
        if self.surface is not None:
            self.queries.add(len(x))
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)

    def _model_proba(self, x: np.ndarray) -> np.ndarray:
        if self.module is not None:
            raw = self.logits(x)
            return np.exp(_outputs.log_proba(raw, self._kind(raw)))
        return np.asarray(self.model.predict_proba(np.asarray(x)), dtype=np.float64)

    def loss(self, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        """Per-example cross-entropy loss."""
        return -self.log_proba(x)[np.arange(len(y)), y]

    @property
    def classes(self) -> int | None:
        """Number of classes when the model says so (scikit-learn), else ``None``."""
        c = getattr(self.model, "classes_", None)
        return len(c) if c is not None else None

    @property
    def class_names(self) -> list[str] | None:
        """The labels as the model knows them (scikit-learn's ``classes_``: label ``k`` is ``classes_[k]``), or None."""
        c = getattr(self.model, "classes_", None)
        return None if c is None else [str(v) for v in np.asarray(c).ravel()]

    def describe(self) -> dict[str, Any]:
        served = {} if self.surface is None else {"served": {**self.surface.describe(), "queries": self.queries.rows}}
        return {
            "path": self.source,
            "format": self.fmt,
            "sha256": self.sha256,
            "white_box": self.white_box,
            "parameters": self.n_parameters,
            **served,
            **(self.model.describe() if isinstance(self.model, BlackBox) else {}),
            **self.extra,
        }

    # ------------------------------------------------------------------ loading

    @classmethod
    def load(
        cls,
        path: str | Path,
        recipe: Recipe | None = None,
        trust_checkpoint: bool = False,
        access: Any = None,
        trust_types: tuple[str, ...] = (),
    ) -> Target:
        """Load a checkpoint; the file is only read, never modified.

        ONNX graphs, XGBoost/LightGBM files and ``http(s)://…/v2/models/NAME``
        endpoints load as black boxes (:func:`privgate.inputs.targets.load_served`);
        ``access`` (:class:`privgate.inputs.targets.endpoint.Access`) says how an endpoint is queried.
        A ``.skops`` file loads when every type it names is trusted (``trust_types``: the user's own,
        :mod:`privgate.inputs.targets.sklearn`).
        """
        from privgate.inputs.targets import check_model_path, load_served

        served = load_served(path, access)
        if served is not None:
            return cls(served, served.source, served.fmt, getattr(served, "sha256", None))
        p = Path(path)
        check_model_path(p)
        digest = file_sha256(p)
        suffix = p.suffix.lower()
        if suffix in (".pkl", ".pickle", ".joblib"):
            return cls._from_pickle(p, trust_checkpoint, digest)
        if suffix == ".skops":  # scikit-learn without pickle (privgate.inputs.targets.sklearn)
            from privgate.inputs.targets.sklearn import load_skops

            return cls(load_skops(p, trust_types), str(p), "skops", digest)
        from privgate.inputs.targets.torchfiles import load_torch  # torch: only a torch checkpoint imports it

        model, fmt = load_torch(p, recipe, trust_checkpoint)
        return cls(model, str(p), fmt, digest)

    @classmethod
    def _from_pickle(cls, p: Path, trust: bool, digest: str) -> Target:
        if not trust:
            raise TargetError(
                f"{p}: is a pickle, and loading it would run code from the file; pass --trust-checkpoint if "
                f"you trust its origin."
            )
        try:
            import joblib

            obj = joblib.load(p)
        except Exception as exc:
            raise TargetError(f"{p}: cannot unpickle the file ({exc.__class__.__name__}: {exc}).") from None
        from privgate.inputs.targets.sklearn import wrap_estimator

        estimator = None if is_torch_module(obj) else wrap_estimator(obj, str(p))
        if estimator is not None:  # a scikit-learn classifier: read as the frame it was fitted on
            return cls(estimator, str(p), "sklearn", digest)
        if is_torch_module(obj) or hasattr(obj, "predict_proba"):
            return cls(obj, str(p), "pickle" if is_torch_module(obj) else "sklearn", digest)
        raise TargetError(f"{p}: the pickle holds a {type(obj).__name__}, not a model with predict_proba.")
