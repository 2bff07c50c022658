"""Inputs as a user hands them — a path, a ``module:attr`` spec or an object in memory — as privgate's types.

:func:`as_dataset`, :func:`as_recipe`, :func:`as_lm_recipe` and
:func:`as_target` accept what the CLI, the config file, the pytest plugin
and library users give and return the one type the rest of privgate reads; bad
input is one :class:`~privgate.errors.PrivgateError` sentence naming the file or
field. Nothing heavy is imported before it is needed: a data file is refused
without importing torch. A policy is loaded a layer above, by
:func:`privgate.policy.as_policy` (the inputs know no policy).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from privgate.errors import DataError, RecipeError
from privgate.inputs.data import Dataset, load_dataset
from privgate.inputs.entrypoints import load_recipe

if TYPE_CHECKING:  # torch comes with these: a run refused on its policy or data never imports it
    from privgate.inputs.lm_recipe import LMRecipe
    from privgate.inputs.target import Target
    from privgate.recipe import Recipe


def as_dataset(value: Any, role: str, label_column: str = "label", base: Path | None = None) -> Dataset:
    """A :class:`Dataset` from a Dataset, an ``(x, y)`` pair, a file path or a ``module:function``."""
    if isinstance(value, Dataset):
        return value
    if isinstance(value, (str, Path)):
        return load_dataset(value, role, label_column, base)
    if isinstance(value, (tuple, list)) and len(value) == 2:
        from privgate.inputs.data import _as_dataset

        return _as_dataset(value[0], value[1], f"<{role}>", role)
    raise DataError(f"{role}: expected (x, y), a Dataset, a file path or module:function, got {type(value).__name__}.")


def as_recipe(recipe: Recipe | str | None, search_dirs: list[Path] | None = None) -> Recipe | None:
    """A :class:`~privgate.recipe.Recipe` (or tree recipe, or scikit-learn estimator) from one, or from its
    ``module:attr`` spec; an unfitted scikit-learn estimator is a :class:`~privgate.sklearn_recipe.SklearnRecipe`."""
    from privgate.inputs.targets.sklearn import is_estimator
    from privgate.recipe import Recipe
    from privgate.sklearn_recipe import SklearnRecipe
    from privgate.tree_recipe import TreeRecipe

    if recipe is None or isinstance(recipe, (Recipe, TreeRecipe, SklearnRecipe)):
        return recipe
    if is_estimator(recipe) and not isinstance(recipe, type):  # an unfitted scikit-learn estimator in memory
        return SklearnRecipe(recipe, name=type(recipe).__name__)  # type: ignore[return-value]
    return load_recipe(recipe, search_dirs)


#: Why hardening a language model needs its recipe.
LM_RECIPE_NEEDED = (
    "hardening a language model fine-tunes its public base model with DP-SGD and needs a language-model "
    "recipe file (--recipe lm_recipe.yaml naming 'base')."
)


def as_lm_recipe(spec: Any, dirs: tuple[Path, ...], *, required: bool = False) -> LMRecipe | None:
    """A language model's recipe from an :class:`~privgate.inputs.lm_recipe.LMRecipe` or its YAML file.

    A relative path is looked up as given, then in ``dirs`` (first: the base). ``required``: hardening needs
    one (:data:`LM_RECIPE_NEEDED`); else ``None`` is none, and a Python recipe is bad input.
    """
    from privgate.inputs.lm_recipe import LMRecipe, is_lm_recipe, load_lm_recipe

    if isinstance(spec, LMRecipe):
        return spec
    if required and (spec is None or not is_lm_recipe(spec)):
        raise RecipeError(LM_RECIPE_NEEDED)
    if spec is None:
        return None
    if not is_lm_recipe(spec):
        raise RecipeError(
            f"{spec}: a language model's recipe is a YAML file (base model and fine-tuning settings, "
            "privgate.inputs.lm_recipe), not a Python recipe."
        )
    p = Path(str(spec))
    if required:
        if not p.is_absolute() and not p.exists():
            p = next((d / p for d in dirs if (d / p).exists()), p)
        return load_lm_recipe(p)
    return load_lm_recipe(resolved(str(spec), dirs[0]))


def recipe_source(spec: str | None) -> tuple[Path | None, str | None]:
    """Where a recipe given as a string is read from: ``(file, None)`` for a language model's YAML recipe,
    ``(None, spec)`` for a ``module:attr`` to import (``(None, None)`` for none): what the outputs must not
    overwrite, and what is imported before they are checked."""
    from privgate.inputs.lm_recipe import is_lm_recipe

    if spec is None:
        return None, None
    return (Path(spec), None) if is_lm_recipe(spec) else (None, spec)


def resolved(path: str | None, base: Path) -> str | None:
    """A path as given when it exists (relative to the working directory), else relative to ``base``."""
    if path is None:
        return None
    p = Path(path)
    return str(p if p.is_absolute() or p.exists() else base / p)


def as_target(
    model: Any,
    recipe: Recipe | None = None,
    trust_checkpoint: bool = False,
    access: Any = None,
    trust_types: tuple[str, ...] = (),
) -> Target:
    """A :class:`Target` from a Target, a path or endpoint URL, an ``nn.Module``, a Booster or a fitted classifier.

    A Hugging Face model folder loads as a target of its kind
    (:func:`privgate.inputs.targets.hf_target.load_hf_target`, default reading options), a fitted scikit-learn
    classifier as one of kind ``sklearn`` (:class:`~privgate.inputs.targets.sklearn.SklearnModel`).
    ``access`` (:class:`privgate.inputs.targets.endpoint.Access`) says how an endpoint URL is queried;
    ``trust_types``, which types a ``.skops`` file may name besides scikit-learn's, numpy's and scipy's.
    """
    from privgate.inputs.target import Target, is_torch_module
    from privgate.inputs.targets import is_huggingface

    if isinstance(model, Target):
        return model
    if isinstance(model, (str, Path)) and is_huggingface(model):
        from privgate.inputs.targets.hf_target import load_hf_target

        return load_hf_target(model, trust_checkpoint=trust_checkpoint)
    if isinstance(model, (str, Path)):
        return Target.load(model, recipe, trust_checkpoint, access, trust_types)
    if is_torch_module(model):  # a TorchScript module is one too
        return Target(model, source=f"<{type(model).__name__}>", fmt="module")
    from privgate.inputs.targets import wrap_booster

    booster = wrap_booster(model)  # an xgboost/lightgbm Booster in memory
    if booster is not None:
        return Target(booster, booster.source, booster.fmt)
    from privgate.inputs.targets.sklearn import wrap_estimator  # a fitted scikit-learn classifier

    estimator = wrap_estimator(model, f"<{type(model).__name__}>")
    return Target(model if estimator is None else estimator, source=f"<{type(model).__name__}>", fmt="sklearn")


__all__ = [
    "LM_RECIPE_NEEDED",
    "as_dataset",
    "as_lm_recipe",
    "as_recipe",
    "as_target",
    "recipe_source",
    "resolved",
]
