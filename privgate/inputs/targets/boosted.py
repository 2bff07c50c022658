"""Gradient-boosted trees in their native, non-pickle formats: XGBoost JSON/UBJSON and LightGBM text models.

The rest (design, limits, derivations): docs/internals-inputs.md.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

import numpy as np

from privgate import outputs as _outputs
from privgate.errors import TargetError
from privgate.inputs.targets.blackbox import BlackBox
from privgate.io.digest import file_sha256

Library = Literal["xgboost", "lightgbm"]

#: Objectives read as one logit per row (two classes) and as K logits, per library.
BINARY = {"xgboost": ("binary:logistic", "binary:logitraw"), "lightgbm": ("binary", "cross_entropy")}
MULTI = {"xgboost": ("multi:softprob", "multi:softmax"), "lightgbm": ("multiclass",)}
EXTRAS = {"xgboost": "privgate[boosted] (xgboost)", "lightgbm": "privgate[boosted] (lightgbm)"}


def sniff(path: Path) -> Library | None:
    """Which library saved ``path``, from its first bytes: ``"xgboost"``, ``"lightgbm"`` or ``None``."""
    try:
        with path.open("rb") as f:
            head = f.read(64)
    except OSError:
        return None
    if head.startswith(b'{"learner"'):  # XGBoost JSON
        return "xgboost"
    if head.startswith(b"{") and b"learner" in head[:24] and head[1:2] in (b"L", b"l", b"i", b"U", b"I"):
        return "xgboost"  # UBJSON: '{', a length marker, the key 'learner'
    if head.startswith(b"tree\nversion=") or head.startswith(b"tree\r\nversion="):
        return "lightgbm"
    return None


def objective_kind(library: Library, objective: str, source: str) -> _outputs.Kind:
    """How a booster's margins read for its objective; one sentence for objectives that are not classifiers."""
    name = objective.split()[0] if objective else ""
    if name in BINARY[library]:
        return _outputs.BINARY
    if name in MULTI[library]:
        return _outputs.LOGITS
    if library == "lightgbm" and name in ("multiclassova", "multiclass_ova", "ova", "ovr"):
        raise TargetError(
            f"{source}: a LightGBM one-vs-all model ({name}): its per-class sigmoids are not one distribution; "
            "privgate audits models trained with objective 'multiclass' or 'binary'."
        )
    known = ", ".join(BINARY[library] + MULTI[library])
    raise TargetError(
        f"{source}: the {library} model's objective is '{name or '?'}', not a classifier's; privgate audits "
        f"classifiers ({known})."
    )


def xgboost_objective(booster: Any) -> str:
    return str(json.loads(booster.save_config())["learner"]["objective"]["name"])


def lightgbm_objective(booster: Any) -> str:
    return str(booster.dump_model(num_iteration=0).get("objective", ""))


class BoostedModel(BlackBox):
    """A booster of either library, its margins read as logits (see the module docstring)."""

    def __init__(self, library: Library, booster: Any, source: str, sha256: str | None = None) -> None:
        self.library = library
        self.booster = booster
        self.source = source
        self.sha256 = sha256
        self.fmt = library
        if library == "xgboost":
            booster.set_param({"nthread": 1})
            self.objective = xgboost_objective(booster)
            self.n_features = int(booster.num_features())
        else:
            self.objective = lightgbm_objective(booster)
            self.n_features = int(booster.num_feature())
        self.kind = objective_kind(library, self.objective, source)

    def raw(self, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x)
        if x.ndim != 2 or x.shape[1] != self.n_features:
            raise TargetError(
                f"{self.source}: the {self.library} model takes rows of {self.n_features} features, the audit data "
                f"has rows of shape {tuple(x.shape[1:])}."
            )
        return margins(self.library, self.booster, x)

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "library": self.library, "objective": self.objective}


def margins(library: Library, booster: Any, x: np.ndarray) -> np.ndarray:
    """A booster's raw margins on ``x``, float64: ``[n]`` for a binary objective, ``[n, K]`` for a multi-class one."""
    if library == "xgboost":
        out = booster.inplace_predict(np.asarray(x, dtype=np.float32), predict_type="margin")
    else:
        out = booster.predict(np.asarray(x, dtype=np.float64), raw_score=True, num_threads=1)
    return np.asarray(out, dtype=np.float64)


def load(path: Path, library: Library) -> BoostedModel:
    """Read an XGBoost (JSON/UBJSON) or LightGBM (text) model file; one sentence when it cannot be read."""
    try:
        if library == "xgboost":
            import xgboost as xgb

            booster = xgb.Booster()
            booster.load_model(str(path))
        else:
            import lightgbm as lgb

            booster = lgb.Booster(model_file=str(path))
    except ImportError:
        raise TargetError(f"{path}: is a {library} model; reading it needs {EXTRAS[library]}.") from None
    except Exception as exc:  # both libraries raise their own error types for damaged files
        first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else exc.__class__.__name__
        raise TargetError(f"{path}: not a readable {library} model ({first}); the file may be truncated.") from None
    return BoostedModel(library, booster, str(path), file_sha256(path))


__all__ = ["BINARY", "MULTI", "BoostedModel", "Library", "load", "margins", "objective_kind", "sniff"]
