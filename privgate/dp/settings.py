"""The DP-SGD settings of an ε search, fixed once before it starts: epochs, batch, δ and the clip norm.

Epochs and logical batch size come from the policy's ``remediation`` section,
else the recipe; δ is the policy's or ``auto`` = 1/(10·N) for N training rows
(below the 1/N that would allow releasing one whole record). The clipping
norm is the policy's, or — ``max_grad_norm: auto`` — chosen by the noise-free
search of Ponomareva et al. 2023 (arXiv 2303.00654, §5.4.1) on the audit's
*population*, never on the members: noise-free training on the members is
covered by no ε. Without a population the default C = 1 is used.
"""

from __future__ import annotations

import math
from typing import Any

from privgate.dp.clip import search_clip_norm
from privgate.dpsgd.train import DPSettings
from privgate.errors import PolicyError, RecipeError
from privgate.executors import executor_for
from privgate.inputs.data import AuditData
from privgate.options import RunOptions
from privgate.policy import Policy
from privgate.recipe import Recipe
from privgate.sklearn_recipe import SklearnRecipe
from privgate.threads import limit_threads


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


def choose_clip(
    policy: Policy, recipe: Recipe, data: AuditData, settings: DPSettings, run: RunOptions
) -> tuple[float, list[dict[str, Any]], str, str | None]:
    """(C, clip-search rows, where C came from, the rows the search trained on) — never the members.

    ``max_grad_norm: auto`` runs the noise-free search of
    :func:`~privgate.dp.clip.search_clip_norm` on the audit's population
    (same distribution, not trained on by the target, so no member is read
    without noise); without a population the default C = 1 is used.
    """
    if policy.remediation.max_grad_norm != "auto":
        return settings.max_grad_norm, [], "the policy (remediation.max_grad_norm)", None
    pop = data.population
    if pop is None:
        return (
            1.0,
            [],
            "the default 1.0: max_grad_norm is auto but the audit has no population to tune it on, and privgate "
            "never tunes on the members without noise",
            None,
        )
    run.say(f"choosing the clip norm (noise-free runs at C = 10^k on the {len(pop)} population rows)")
    brief = max(1, math.ceil(settings.epochs / 3))
    where = {"device": run.device, "executor": executor_for(run), "threads": run.threads}  # Ray: C's in parallel
    with limit_threads(run.threads):
        clip, rows = search_clip_norm(recipe, pop.x, pop.y, run.seed, settings, epochs=brief, **where)
    used = f"population ({len(pop)} rows, {pop.source})"
    source = (
        f"noise-free clip-norm search on the {used}, never the members (Ponomareva et al. 2023, arXiv "
        "2303.00654, §5.4.1)"
    )
    return clip, rows, source, used


__all__ = ["check_can_remediate", "choose_clip", "require_enabled", "settings_for"]
