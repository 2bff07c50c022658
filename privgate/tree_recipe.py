"""TreeRecipe: how a gradient-boosted tree model was trained, so privgate can train reference models like it.

The counterpart of :class:`privgate.recipe.Recipe` for XGBoost and LightGBM targets
(:mod:`privgate.inputs.targets.boosted`): reference-model attacks — LiRA (Carlini et al. 2022, arXiv
2112.03570), RMIA (Zarifzadeh et al. 2024, arXiv 2312.03262), shadow models (Shokri et al. 2017, arXiv
1610.05820) — need the same library, objective, tree parameters and rounds, given in a recipe file as
``RECIPE = TreeRecipe("xgboost", {...}, rounds=100)``. Each reference model gets its own ``seed`` and the
run's threads (:mod:`privgate.training.trees`). A tree recipe cannot harden a model (DP-SGD is torch only).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from privgate.errors import RecipeError

LIBRARIES = ("xgboost", "lightgbm")


@dataclass
class TreeRecipe:
    """The library, its parameters and the number of boosting rounds of a boosted-tree model.

    Args:
        library: ``"xgboost"`` or ``"lightgbm"``.
        params: the library's training parameters (``xgboost.train`` / ``lightgbm.train``); must name the
            ``objective`` (and ``num_class`` for a multi-class one), as the target was trained.
        rounds: boosting rounds (``num_boost_round``).
        name: shown in reports.
        extra: free-form facts for the report.
    """

    library: str
    params: dict[str, Any] = field(default_factory=dict)
    rounds: int = 100
    name: str = "tree recipe"
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.library not in LIBRARIES:
            raise RecipeError(
                f"tree recipe '{self.name}': library must be one of {', '.join(LIBRARIES)}, got {self.library!r}."
            )
        if not isinstance(self.params, dict) or not self.params.get("objective"):
            raise RecipeError(
                f"tree recipe '{self.name}': params must name the objective the target was trained with "
                "(e.g. {'objective': 'binary:logistic'})."
            )
        if isinstance(self.rounds, bool) or not isinstance(self.rounds, int) or self.rounds < 1:
            raise RecipeError(f"tree recipe '{self.name}': rounds must be a positive integer, got {self.rounds!r}.")

    @property
    def objective(self) -> str:
        return str(self.params["objective"])

    def train(self, x: np.ndarray, y: np.ndarray, seed: int = 0, threads: int = 1) -> Any:
        """A booster trained on ``(x, y)`` with this recipe and ``seed``; deterministic for a seed and thread count."""
        try:
            if self.library == "xgboost":
                import xgboost as xgb

                params = {**self.params, "seed": int(seed) % 2**31, "nthread": int(threads)}
                data = xgb.DMatrix(np.asarray(x, dtype=np.float32), label=np.asarray(y), nthread=int(threads))
                return xgb.train(params, data, num_boost_round=self.rounds)
            import lightgbm as lgb

            params = {
                **self.params,
                "seed": int(seed) % 2**31,
                "num_threads": int(threads),
                "deterministic": True,
                "verbose": -1,
            }
            return lgb.train(
                params, lgb.Dataset(np.asarray(x, dtype=np.float64), label=np.asarray(y)), num_boost_round=self.rounds
            )
        except ImportError:
            raise RecipeError(
                f"tree recipe '{self.name}': training needs privgate[boosted] ({self.library})."
            ) from None
        except Exception as exc:  # the libraries' own errors on bad parameters
            first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else exc.__class__.__name__
            raise RecipeError(f"tree recipe '{self.name}': {self.library} cannot train with it ({first}).") from None


__all__ = ["LIBRARIES", "TreeRecipe"]
