"""The scikit-learn kind: a fitted scikit-learn classifier, often a Pipeline over a table with text columns.

Audited as a classifier on rows (:class:`~privgate.attacks.contexts.tabular.TabularAudit`) for any
:class:`~privgate.inputs.targets.sklearn.SklearnModel`, except that with no recipe the reference models are clones
of the target (:func:`privgate.training.sklearn_models.own_recipe`); white-box means the fitted trees
(``reads_structure``, Preen & Smith 2025, arXiv 2502.09396), never torch weights; and with text columns
(:mod:`privgate.inputs.tables`) the ``numeric_rows`` attacks are skipped, naming them. Details:
``docs/sklearn.md``.
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
