"""Structural attack: what a released tree model's own structure says about its training records.

SACRO-ML's structural attack (Smith et al. 2022, arXiv 2212.01233) and Preen & Smith 2025 (arXiv 2502.09396): each
audit row is routed through every tree; ``smallest``, the fewest training rows of a leaf it lands in, feeds
``metric: isolated_fraction`` (:class:`privgate.stats.leakage.IsolatedFraction`), and its isolation
(1/T) Σ_t [c_t(y) > 0] / n_t is the membership score. White-box: runs only with ``release: model`` on a model with
trees (scikit-learn trees, forests and gradient boosting, LightGBM; not XGBoost, which stores hessian covers).
Details: ``docs/internals-attacks-lm.md``.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from privgate.attacks.base import Attack, AttackContext, AttackResult, AttackSkipped
from privgate.errors import shown


class StructuralAttack(Attack):
    """Leaf sizes and label purity of a released tree model (Preen & Smith 2025, arXiv 2502.09396).

    Options:
        k: a leaf holding fewer training rows isolates the records in it (SACRO-ML's default threshold, 10).
    """

    name = "structural"
    threat_model = "white-box"
    #: Reads a fitted model's structure, not a torch module's weights: runs on a scikit-learn target
    #: (:mod:`privgate.attacks.contexts.sklearn`).
    reads_structure = True

    def __init__(self, k: int = 10, **options: Any) -> None:
        super().__init__(**options)
        if isinstance(k, bool) or not isinstance(k, int) or not 2 <= k <= 10_000:
            raise ValueError(f"option k must be an integer between 2 and 10000, got {shown(k)}")
        self.options = {"k": k}

    def run(self, ctx: AttackContext) -> AttackResult:
        from privgate.stats.leakage import IsolatedFraction

        start = time.perf_counter()
        model = ctx.target.model
        estimator = getattr(model, "estimator", None)
        if estimator is None or not hasattr(model, "rows"):
            raise AttackSkipped(
                f"'{self.name}' reads fitted trees; the target is {ctx.target.fmt}, not a scikit-learn model"
            )
        final, rows = _final(estimator, model.rows(ctx.x))
        counts, mass = leaf_table(final, rows, ctx.y)
        trees = counts.shape[1]
        smallest = counts.min(axis=1)
        holds = np.ones_like(counts, dtype=bool) if mass is None else mass > 0
        scores = (holds / np.maximum(counts, 1)).mean(axis=1)
        k = self.options["k"]
        return AttackResult(
            attack=self.name,
            threat_model=self.threat_model,
            scores=scores,
            seconds=time.perf_counter() - start,
            options=dict(self.options),
            notes=[
                f"read {trees} tree(s) of the released {type(final).__name__}: each row's isolation (its share of the "
                "leaves it lands in"
                + (", where the leaf holds its label)" if mass is not None else ")")
                + f" and the fewest training rows of a leaf it falls into; {int((smallest < k).sum())} of "
                f"{len(smallest)} audit rows fall into a leaf of fewer than k = {k} training rows"
            ],
            extras={
                "trees": trees,
                "k": k,
                "estimates": {"isolated_fraction": IsolatedFraction(smallest, k)},
            },
        )


def _final(estimator: Any, rows: Any) -> tuple[Any, Any]:
    """The pipeline's last estimator and the rows as it receives them (every earlier step's transform)."""
    while isinstance(getattr(estimator, "steps", None), list):
        if len(estimator.steps) > 1:
            rows = estimator[:-1].transform(rows)
        estimator = estimator.steps[-1][1]
    return estimator, rows


def leaf_table(final: Any, rows: Any, y: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """``(counts, mass)``: per row and tree, the training rows of its leaf and the share of the row's label there.

    ``mass`` is ``None`` for trees that hold no classes (the regression trees of gradient boosting).

    Raises:
        AttackSkipped: a model without readable trees.
    """
    name = type(final).__name__
    if hasattr(final, "tree_") and hasattr(final, "apply"):  # one decision tree
        return _sklearn_trees([final], final.apply(rows)[:, None], y, classifier=True)
    trees = getattr(final, "estimators_", None)
    if isinstance(trees, list) and trees and hasattr(trees[0], "tree_"):  # forests, extra trees, bagged trees
        return _sklearn_trees(trees, final.apply(rows), y, classifier=hasattr(final, "classes_"))
    if isinstance(trees, np.ndarray) and trees.size and hasattr(trees.flat[0], "tree_"):  # gradient boosting
        leaves = np.asarray(final.apply(rows)).reshape(len(y), -1)
        return _sklearn_trees(list(trees.flat), leaves, y, classifier=False)
    if hasattr(final, "_predictors"):  # histogram gradient boosting
        return _histogram_counts(final, rows), None
    if hasattr(final, "booster_") and type(final).__module__.startswith("lightgbm"):
        return _lightgbm_counts(final, rows), None
    if hasattr(final, "get_booster"):
        raise AttackSkipped(f"'structural' cannot read {name}: XGBoost stores hessian covers, not training counts")
    raise AttackSkipped(f"'structural' reads fitted trees; the model's last step is a {name}, which has none")


def _sklearn_trees(
    trees: list[Any], leaves: np.ndarray, y: np.ndarray, classifier: bool
) -> tuple[np.ndarray, np.ndarray | None]:
    counts = np.empty(leaves.shape, dtype=np.int64)
    mass = np.empty(leaves.shape, dtype=np.float64) if classifier else None
    for t, tree in enumerate(trees):
        leaf = leaves[:, t]
        counts[:, t] = tree.tree_.n_node_samples[leaf]
        if mass is not None:
            value = tree.tree_.value[leaf, 0, :]  # class shares (or weighted counts) of the leaf's training rows
            mass[:, t] = value[np.arange(len(y)), y]
    return counts, mass


def _histogram_counts(final: Any, rows: Any) -> np.ndarray:
    """Leaf counts of a histogram gradient-boosting model: each predictor asked for its nodes' counts as values."""
    try:
        from sklearn.ensemble._hist_gradient_boosting.predictor import TreePredictor

        x = final._preprocess_X(rows, reset=False)
        known, f_idx = final._bin_mapper.make_known_categories_bitsets()
        out = []
        for per_iteration in final._predictors:
            for p in per_iteration:
                nodes = p.nodes.copy()
                nodes["value"] = nodes["count"]
                counted = TreePredictor(nodes, p.binned_left_cat_bitsets, p.raw_left_cat_bitsets)
                out.append(counted.predict(x, known_cat_bitsets=known, f_idx_map=f_idx, n_threads=1))
    except (AttributeError, ImportError, TypeError, ValueError) as exc:
        raise AttackSkipped(
            f"'structural' cannot read this scikit-learn version's histogram gradient-boosting trees "
            f"({exc.__class__.__name__})"
        ) from None
    return np.rint(np.stack(out, axis=1)).astype(np.int64)


def _lightgbm_counts(final: Any, rows: Any) -> np.ndarray:
    """Leaf counts of a LightGBM model from its dump (``leaf_count``) and ``pred_leaf``."""
    booster = final.booster_
    leaves = np.asarray(booster.predict(rows, pred_leaf=True)).reshape(len(rows), -1)
    tables = []
    for info in booster.dump_model()["tree_info"]:
        sizes: dict[int, int] = {}
        stack = [info["tree_structure"]]
        while stack:  # no recursion: a deep tree is a long list, not a deep call stack
            node = stack.pop()
            if "leaf_index" in node or "leaf_count" in node:
                sizes[int(node.get("leaf_index", 0))] = int(node.get("leaf_count", 0))
            else:
                stack += [node["left_child"], node["right_child"]]
        tables.append(sizes)
    counts = np.empty(leaves.shape, dtype=np.int64)
    for t, sizes in enumerate(tables):
        counts[:, t] = [sizes.get(int(v), 0) for v in leaves[:, t]]
    return counts
