"""The scikit-learn kind: a fitted scikit-learn classifier, often a Pipeline over a table with text columns.

It is audited as a classifier on rows (:class:`~privgate.attacks.contexts.tabular.TabularAudit`:
the same pooled rows, served surface, sanity probe, blind baseline and report),
with what a scikit-learn model changes:

* **its own recipe.** With no recipe, the reference models of LiRA (Carlini et
  al. 2022, arXiv 2112.03570), RMIA (Zarifzadeh et al. 2024, arXiv
  2312.03262), shadow models and the learned attack are clones of the target
  (``sklearn.base.clone``, :func:`privgate.training.sklearn_models.own_recipe`),
  fitted on the shared plan; a recipe given (another estimator) overrides it;
* **white-box is the fitted structure.** A released model's trees are read
  by the attacks that read structure (the structural attack, Preen & Smith
  2025, arXiv 2502.09396: ``reads_structure``); the attacks that need a torch
  module's weights (gradients, inversion) are skipped as for any non-torch model;
* **tables with text columns** (:mod:`privgate.inputs.tables`): the attacks
  that add noise to the rows or learn from their numbers (``numeric_rows``:
  the label-only robustness attacks, attribute inference) are skipped naming
  the text columns; every other attack reads the model's outputs on the rows as
  the model was fitted on them.

A target is of this kind when its model is a
:class:`~privgate.inputs.targets.sklearn.SklearnModel` (a ``.skops`` file, a
trusted pickle or a fitted estimator in memory: :attr:`privgate.inputs.target.Target.kind`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from privgate.attacks.contexts.tabular import TabularAudit
from privgate.inputs.data import AuditData
from privgate.inputs.tables import not_numeric
from privgate.inputs.target import Target
from privgate.options import RunOptions
from privgate.training.sklearn_models import own_recipe

if TYPE_CHECKING:
    from privgate.policy import Policy
    from privgate.recipe import Recipe


class SklearnAudit(TabularAudit):
    """An audit of a scikit-learn target (module docstring); arguments as :class:`TabularAudit`'s."""

    def __init__(self, target: Target, data: AuditData, policy: Policy, recipe: Recipe | None, run: RunOptions):
        # no recipe: the target is its own (its clones); None when the estimator cannot be cloned
        super().__init__(target, data, policy, recipe if recipe is not None else own_recipe(target), run)

    def unavailable(self, name: str) -> tuple[str, str] | None:
        cls = self.registry.get(name)
        if cls is not None and cls.reads_structure and self._served(name):
            return None  # white-box on the fitted trees, which a released scikit-learn model carries
        why = super().unavailable(name)
        if why is None and cls is not None and cls.numeric_rows:
            text = not_numeric(self.rows.x, self.target, name)
            if text:
                return "skipped", text
        return why


__all__ = ["SklearnAudit"]
