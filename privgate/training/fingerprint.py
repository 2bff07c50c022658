"""Content fingerprints: what makes a trained reference model the one a cache entry holds.

A model is identified by its recipe (class, fields, architecture, the state of
a fresh build), the training data's bytes, its membership mask and its seed;
:data:`ENGINE_VERSION` changes whenever the engine would train a different
model from the same inputs, so old cache entries are never mixed in.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from pathlib import Path
from typing import Any

import numpy as np

from privgate.io.sources import code_of, project_sources
from privgate.recipe import Recipe

#: Bumped when a change to the engine or the cache format changes what a cached model would be
#: (4: entries carry their key and a content hash, older entries are never read; one-logit and
#: probability outputs train on their own likelihood, privgate.outputs; 5: dropout masks drawn per
#: model from its own generator, BatchNorm trained vectorised, the training stream in the key; 6: the grouped
#: kernel convolves channels-last, which rounds differently; 7: on the CPU it runs 2 models per call where
#: activations outgrow the cache, whose convolutions of fewer groups round differently).
ENGINE_VERSION = 7

_ADDR = re.compile(r" at 0x[0-9a-fA-F]+")


def _stable(v: Any) -> str:
    """A repr that is the same across processes (no memory addresses); dataclasses field by field."""
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        inner = ",".join(f"{f.name}={_stable(getattr(v, f.name))}" for f in dataclasses.fields(v))
        return f"{type(v).__qualname__}({inner})"
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


def recipe_fingerprint(recipe: Recipe) -> str:
    """SHA-256 of what makes a recipe train different models.

    Covers the recipe's class, every dataclass field (callables by qualified
    name; an :class:`~privgate.recipe.Augment` field by field, its transform by
    qualified name), the source of every function and class the recipe and a
    fresh build hold and of every project module they reach
    (:func:`privgate.io.sources.project_sources`), the bytes of a public
    ``pretrained`` start, the architecture (``str(model)``) and every tensor of
    a fresh build under seed 0. A recipe of the user's own training function
    (:attr:`~privgate.recipe.Recipe.own_loop`) is that function's name and
    sources instead (:func:`privgate.training.function.function_fingerprint`):
    its other settings only describe it. The training settings of
    :data:`~privgate.recipe.TRAINING_DEFAULTS` (and ``train_fn``) enter only
    when set: a recipe written before they existed keeps its key (and its
    cached models, which they do not change), and one with a schedule,
    augmentation or any other of them never shares a key with one without.

    Raises:
        Uncovered: the sources it reaches are past the walk's bounds (no key covers them).
    """
    from privgate.recipe import TRAINING_DEFAULTS

    if recipe.own_loop:  # the user's training function decides the model: its name and its source files
        from privgate.training.function import function_fingerprint

        return hashlib.sha256(f"engine{ENGINE_VERSION}|{function_fingerprint(recipe.train_fn)}".encode()).hexdigest()
    h = hashlib.sha256()
    h.update(f"engine{ENGINE_VERSION}|{type(recipe).__module__}.{type(recipe).__qualname__}|".encode())
    for f in dataclasses.fields(recipe):
        value = getattr(recipe, f.name)
        if (f.name in TRAINING_DEFAULTS and value == TRAINING_DEFAULTS[f.name]) or (
            f.name == "train_fn" and value is None
        ):
            continue
        h.update(f"{f.name}={_stable(value)}|".encode())
    if recipe.pretrained and Path(recipe.pretrained).is_file():
        h.update(Path(recipe.pretrained).read_bytes())
    net = recipe.build(seed=0)
    h.update(project_sources(code_of(recipe) + code_of(net)).digest.encode())
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


def model_key(recipe_fp: str, data_fp: str, mask: np.ndarray, seed: int, stream: str = "") -> str:
    """The cache key of one model: recipe, data, its membership mask, its seed and its training stream.

    ``stream`` names what else decides the model beyond float rounding (empty
    when nothing does: :func:`privgate.training.engine.training_stream`).
    """
    h = hashlib.sha256()
    h.update(f"{recipe_fp}|{data_fp}|{int(seed)}|{len(mask)}|{stream}|".encode())
    h.update(np.packbits(np.asarray(mask, dtype=bool)).tobytes())
    return h.hexdigest()


__all__ = ["ENGINE_VERSION", "data_fingerprint", "model_key", "recipe_fingerprint"]
