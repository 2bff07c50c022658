"""Shadow-model attack (Shokri, Stronati, Song & Shmatikov 2017, arXiv 1610.05820).

An attack classifier learns from the shared reference models (:mod:`privgate.attacks.reference`; each audit example
is IN for half of them) to tell a model's output on a training example from one on an unseen example, then scores
the target's outputs by its log-odds of "member". Features: log p_y, log(p_y / (1 − p_y)), the three largest log
probabilities, the entropy and correctness (Salem et al. 2019, arXiv 1806.01246). ``per_class: true`` trains one
classifier per class (the global one for classes with fewer than 20 IN or OUT rows). Details:
``docs/attacks.md``.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import numpy as np

from privgate.attacks.base import Attack, AttackContext, AttackResult
from privgate.attacks.reference import build_references, check_models, logit_confidence, reference_result, true_class
from privgate.errors import shown
from privgate.threads import native_threads

if TYPE_CHECKING:
    from privgate.attacks.budget import CostFacts

CLASSIFIERS = ("gbdt", "logistic", "mlp")
MIN_PER_CLASS = 20
_EPS = 1e-12


def output_features(log_proba: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``[n, 7]`` attack-classifier features of one model's log-probabilities on labelled examples."""
    logp = np.maximum(np.asarray(log_proba, dtype=np.float64), np.log(_EPS))
    top = -np.sort(-logp, axis=1)[:, :3]
    if top.shape[1] < 3:
        top = np.pad(top, ((0, 0), (0, 3 - top.shape[1])), constant_values=np.log(_EPS))
    entropy = -(np.exp(logp) * logp).sum(axis=1)
    correct = (logp.argmax(axis=1) == y).astype(float)
    phi = np.clip(logit_confidence(log_proba, y), -50.0, 50.0)
    return np.column_stack([true_class(logp, y), phi, top, entropy, correct])


def _make_classifier(kind: str, seed: int) -> Any:
    if kind == "logistic":
        from sklearn.linear_model import LogisticRegression
        from sklearn.pipeline import make_pipeline
        from sklearn.preprocessing import StandardScaler

        return make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000))
    if kind == "mlp":
        from sklearn.neural_network import MLPClassifier
        from sklearn.pipeline import make_pipeline
        from sklearn.preprocessing import StandardScaler

        return make_pipeline(
            StandardScaler(),
            MLPClassifier(hidden_layer_sizes=(32,), max_iter=300, early_stopping=True, random_state=seed),
        )
    from sklearn.ensemble import HistGradientBoostingClassifier

    return HistGradientBoostingClassifier(max_iter=100, learning_rate=0.1, max_leaf_nodes=15, random_state=seed)


def _log_odds(clf: Any, feats: np.ndarray) -> np.ndarray:
    if hasattr(clf, "decision_function"):
        return np.asarray(clf.decision_function(feats), dtype=float)
    p = np.clip(clf.predict_proba(feats)[:, 1], 1e-12, 1 - 1e-12)
    return np.log(p) - np.log1p(-p)


class ShadowAttack(Attack):
    """Shadow-model attack with a scikit-learn attack classifier (Shokri et al. 2017, arXiv 1610.05820).

    Options:
        models: shadow models (even, ≥ 2).
        per_class: one attack classifier per class.
        classifier: ``gbdt`` (histogram gradient boosting), ``logistic`` or ``mlp``.
    """

    name = "shadow"
    threat_model = "black-box"
    needs_recipe = True

    def __init__(self, models: int = 4, per_class: bool = False, classifier: str = "gbdt", **options: Any) -> None:
        super().__init__(**options)
        check_models(models, 2)
        if not isinstance(per_class, bool):
            raise TypeError("option per_class must be true or false")
        if classifier not in CLASSIFIERS:
            raise ValueError(f"option classifier must be one of {', '.join(CLASSIFIERS)}, got {shown(classifier)}")
        self.options = {"models": models, "per_class": per_class, "classifier": classifier}

    def estimated_seconds(self, facts: CostFacts) -> float | None:
        from privgate.attacks.budget import reference_seconds

        return reference_seconds(facts, self.options["models"])

    def run(self, ctx: AttackContext) -> AttackResult:
        start = time.perf_counter()
        o = self.options
        refs = build_references(ctx, o["models"], attack=self.name)
        k, n = refs.inside.shape
        train_x = refs.per_row(output_features).reshape(k * n, -1)  # model after model, as the flags below
        train_in = refs.inside.reshape(-1)
        train_cls = np.tile(ctx.y, k)
        test_x = ctx.per_row(output_features)
        glob = _make_classifier(o["classifier"], ctx.seed)
        per_class_fitted = 0
        with native_threads(ctx.threads):  # the attack classifier's BLAS/OpenMP pools, after sklearn loaded them
            scores = _log_odds(glob.fit(train_x, train_in), test_x)
            if o["per_class"]:
                for c in np.unique(ctx.y):
                    sel = train_cls == c
                    n_in = int(train_in[sel].sum())
                    if n_in < MIN_PER_CLASS or int(sel.sum()) - n_in < MIN_PER_CLASS:
                        continue
                    clf = _make_classifier(o["classifier"], ctx.seed).fit(train_x[sel], train_in[sel])
                    scores[ctx.y == c] = _log_odds(clf, test_x[ctx.y == c])
                    per_class_fitted += 1
        note = f"{o['classifier']} attack classifier trained on {len(train_x)} shadow outputs" + (
            f"; one per class for {per_class_fitted} classes" if o["per_class"] else ""
        )
        return reference_result(self, refs, scores, start, o, [note], reference_models=k)
