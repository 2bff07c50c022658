"""SklearnRecipe: a scikit-learn estimator as the recipe of reference models — by default the target's own clone.

Reference-model attacks — LiRA (Carlini et al. 2022, arXiv 2112.03570), RMIA (Zarifzadeh et al. 2024,
arXiv 2312.03262), shadow models (Shokri et al. 2017, arXiv 1610.05820) — train models the same way as the
target. For scikit-learn, ``sklearn.base.clone(model)`` is that recipe, so a target with no ``--recipe`` is
its own (:func:`privgate.training.sklearn_models.own_recipe`); a recipe file may name another estimator.
Each reference model is a clone with every nested ``random_state`` set from its seed and every ``n_jobs``
set to 1 (:mod:`privgate.training.sklearn_models` parallelises). Example: docs/sklearn.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from privgate.errors import RecipeError, clip


@dataclass
class SklearnRecipe:
    """An unfitted scikit-learn estimator whose clones are the reference models.

    Args:
        estimator: the estimator (fitted or not: only its parameters are used, through ``clone``).
        name: shown in reports.
        own: whether it is the target's own clone (no ``--recipe`` given).
        extra: free-form facts for the report.
    """

    estimator: Any
    name: str = "scikit-learn estimator"
    own: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    #: Recipe fields other parts of privgate read on any recipe (a scikit-learn recipe has none of them).
    model_factory = None
    augment = None

    def __post_init__(self) -> None:
        if not (
            callable(getattr(self.estimator, "fit", None)) and callable(getattr(self.estimator, "get_params", None))
        ):
            raise RecipeError(
                f"recipe '{self.name}': a {type(self.estimator).__name__} is not a scikit-learn estimator (it needs "
                "fit and get_params)."
            )
        try:
            from sklearn.base import clone

            self.estimator = clone(self.estimator)
        except Exception as exc:  # noqa: BLE001 - a foreign estimator whose parameters clone cannot copy
            raise RecipeError(f"recipe '{self.name}': sklearn.base.clone cannot copy it ({_first(exc)}).") from None

    def fresh(self, seed: int) -> Any:
        """An unfitted clone whose every ``random_state`` comes from ``seed`` and every ``n_jobs`` is 1."""
        from sklearn.base import clone

        est = clone(self.estimator)
        params = est.get_params(deep=True)
        states = sorted(k for k in params if k == "random_state" or k.endswith("__random_state"))
        jobs = [k for k in params if (k == "n_jobs" or k.endswith("__n_jobs")) and params[k] not in (None, 1)]
        update: dict[str, Any] = {k: 1 for k in jobs}
        for i, k in enumerate(states):
            update[k] = int(np.random.SeedSequence([int(seed), 0x5C1, i]).generate_state(1)[0] % (2**31 - 1))
        return est.set_params(**update) if update else est

    def train(self, rows: Any, y: np.ndarray, seed: int) -> Any:
        """A fresh clone (:meth:`fresh`) fitted on ``rows`` (a DataFrame or an array) and the label values ``y``."""
        est = self.fresh(seed)
        try:
            return est.fit(rows, y)
        except Exception as exc:  # noqa: BLE001 - the estimator's own errors on these rows
            raise RecipeError(f"recipe '{self.name}': fitting a reference model failed ({_first(exc)}).") from None


def _first(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else exc.__class__.__name__
    return clip(text.split(". ")[0].rstrip("."), 200)


__all__ = ["SklearnRecipe"]
