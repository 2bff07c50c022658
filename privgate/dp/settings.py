"""The DP-SGD settings of an ε search, fixed once before it starts (epochs, batch, δ, the clip norm), and the bad
input refused before anything is loaded (remediation not enabled, no torch recipe).

Epochs and logical batch size come from the policy's ``remediation`` section,
else the recipe; δ is the policy's or ``auto`` = 1/(10·N) for N training rows
(below the 1/N that would allow releasing one whole record). The clipping
norm is the policy's, or — ``max_grad_norm: auto`` — chosen later by
:func:`privgate.dp.clip.choose_clip`. No torch here: a scikit-learn model's
capacity search reads these checks too.
"""

from __future__ import annotations

from privgate.dpsgd.records import DPSettings
from privgate.errors import PolicyError, RecipeError
from privgate.policy import Policy
from privgate.recipe import Recipe
from privgate.sklearn_recipe import SklearnRecipe


def settings_for(policy: Policy, recipe: Recipe, n_train: int) -> DPSettings:
    """DP-SGD settings from the policy's ``remediation`` section and the recipe (clip 'auto' resolved later)."""
    rem = policy.remediation
    delta = 1.0 / (10.0 * n_train) if rem.delta == "auto" else float(rem.delta)
    clip = 1.0 if rem.max_grad_norm == "auto" else float(rem.max_grad_norm)
    return DPSettings(
        epochs=rem.epochs or recipe.epochs,
        batch_size=rem.batch_size or recipe.batch_size,
        max_grad_norm=clip,
        delta=delta,
        accountant=rem.accountant,
        max_physical_batch_size=rem.max_physical_batch_size,
    )


def require_enabled(policy: Policy) -> None:
    """Bad input, found before anything is loaded: the policy does not allow remediation."""
    if not policy.remediation.enabled:
        raise PolicyError(
            f"policy '{policy.name}': remediation is not enabled (set 'remediation: {{enabled: true}}' in a "
            f"copy of the policy to allow DP-SGD retraining)."
        )


def check_can_remediate(policy: Policy, recipe: Recipe | None) -> None:
    """Bad input, found before anything is loaded: remediation not allowed, or no recipe."""
    require_enabled(policy)
    if recipe is None:
        raise RecipeError(
            "remediation retrains the model with DP-SGD and needs its training recipe (--recipe module:attr, "
            "or 'recipe' in the config)."
        )
    if isinstance(recipe, SklearnRecipe):
        raise RecipeError(
            f"recipe '{recipe.name}': DP-SGD retrains torch models, not scikit-learn estimators; leave --recipe out "
            "to search the scikit-learn model's own capacity instead (no DP guarantee), or give a torch Recipe "
            "over the same features for DP-SGD."
        )
    if not isinstance(recipe, Recipe):
        raise RecipeError(
            f"recipe '{recipe.name}': remediation retrains torch models with DP-SGD; a {type(recipe).__name__} "
            "cannot be hardened."
        )
    if recipe.model_factory is None:  # a training function alone (privgate.training.function)
        raise RecipeError(
            f"recipe '{recipe.name}': remediation retrains with DP-SGD inside privgate's own training loop, which "
            "cannot run your training function; give a Recipe with the model's model_factory (and your settings)."
        )


__all__ = ["check_can_remediate", "require_enabled", "settings_for"]
