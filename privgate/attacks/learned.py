"""Learned membership classifiers over per-example signals, cross-fitted on the calibration split.

Shokri, Stronati, Song & Shmatikov 2017 (arXiv 1610.05820), over the signals of Yeom et al. 2018 (arXiv 1709.01604),
Salem et al. 2019 (arXiv 1806.01246), Song & Mittal 2021 (arXiv 2003.10595) and, with ``learned_reference``, LiRA's
and RMIA's statistics (Carlini et al. 2022, arXiv 2112.03570; Zarifzadeh et al. 2024, arXiv 2312.03262). It learns
from the calibration split, cross-fitted (:mod:`privgate.attacks.crossfit`): the evaluation split's membership is
never used. ``signals`` (``loss``, ``outputs``) restricts what it sees; the classifier is histogram gradient
boosting by default (``logistic``, ``mlp``), the score its log-odds of "member". Signals:
``docs/internals-attacks-lm.md``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from privgate.attacks.base import Attack, AttackContext, AttackResult
from privgate.attacks.crossfit import CalibrationLabels, cross_fit
from privgate.errors import shown

if TYPE_CHECKING:
    from privgate.attacks.budget import CostFacts

CLASSIFIERS = ("gbdt", "logistic", "mlp")
SIGNALS = ("all", "loss", "outputs")
#: Most sorted log-probabilities used as signals.
TOP_K = 10
#: Signals that are also standardised per class (by each training fold's non-members of the class).
PER_CLASS = ("loss", "phi", "phi_target", "lira_online_fixed", "lira_offline_fixed")
_FLOOR = np.log(1e-30)


# --------------------------------------------------------------------------- signals


def _true(values: np.ndarray, y: np.ndarray) -> np.ndarray:
    return values[np.arange(len(y)), y]


def output_signals(log_proba: np.ndarray, y: np.ndarray, signals: str = "all") -> tuple[np.ndarray, list[str]]:
    """``[n, d]`` label-free signals of one model's log-probabilities on labelled examples, and their names.

    The per-class one-hot columns are not included (see :func:`class_columns`).
    """
    lp = np.maximum(np.asarray(log_proba, dtype=np.float64), _FLOOR)
    log_py = _true(lp, y)
    if signals == "loss":
        return log_py[:, None], ["loss"]
    top = -np.sort(-lp, axis=1)[:, :TOP_K]
    top_names = [f"log_p_top{i + 1}" for i in range(top.shape[1])]
    if signals == "outputs":
        return np.column_stack([lp, top]), [f"log_p{k}" for k in range(lp.shape[1])] + top_names
    others = lp.copy()
    others[np.arange(len(y)), y] = -np.inf
    m = others.max(axis=1)
    rest = m + np.log(np.exp(others - m[:, None]).sum(axis=1))
    p = np.exp(lp)
    entropy = (p * lp).sum(axis=1)
    log1m = np.log(np.maximum(-np.expm1(lp), 1e-300))
    mentr_others = (p * log1m).sum(axis=1) - _true(p * log1m, y)
    mentr = np.expm1(log_py) * log_py - mentr_others  # −(1 − p_y) log p_y − Σ_{k≠y} p_k log(1 − p_k)
    correct = (lp.argmax(axis=1) == y).astype(np.float64)
    cols = [log_py, log_py - m, log_py - rest, lp.max(axis=1), entropy, -mentr, correct]
    names = ["loss", "margin", "phi", "confidence", "entropy", "modified_entropy", "correct"]
    return np.column_stack(cols + [top]), names + top_names


def class_columns(y: np.ndarray, n_classes: int) -> np.ndarray:
    """``[n, n_classes]`` one-hot class indicators (per-class terms)."""
    out = np.zeros((len(y), n_classes))
    out[np.arange(len(y)), y] = 1.0
    return out


def reference_signals(
    log_proba: np.ndarray, ref_log_proba: np.ndarray, inside: np.ndarray, y: np.ndarray
) -> tuple[np.ndarray, list[str]]:
    """``[n, d]`` signals comparing the target with reference models trained with (IN) and without (OUT) each row."""
    return reference_signals_of(reference_stats(log_proba, y), reference_stats(ref_log_proba, y), inside)


def reference_stats(log_proba: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``[…, n, 2]``: LiRA's φ and RMIA's p_y at temperature 2 of ``[…, n, classes]`` log-probabilities, row by row."""
    from privgate.attacks.reference import logit_confidence
    from privgate.attacks.rmia import tempered_true_class

    return np.stack([logit_confidence(log_proba, y), tempered_true_class(log_proba, y, 2.0)], axis=-1)


def reference_signals_of(target: np.ndarray, refs: np.ndarray, inside: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """:func:`reference_signals` from :func:`reference_stats` of the target ``[n, 2]`` and the models ``[K, n, 2]``."""
    from privgate.attacks.lira import lira_scores

    phi_t, p_t = target[:, 0], target[:, 1]
    phi_r, p_r = refs[..., 0], refs[..., 1]
    cols, names = [], []
    for fixed in (True, False):
        tag = "fixed" if fixed else "per_example"
        cols += [
            lira_scores(phi_t, phi_r, inside, online=True, fixed_variance=fixed),
            lira_scores(phi_t, phi_r, inside, online=False, fixed_variance=fixed),
        ]
        names += [f"lira_online_{tag}", f"lira_offline_{tag}"]
    out = ~inside
    mu_out = np.where(out, phi_r, 0.0).sum(axis=0) / np.maximum(out.sum(axis=0), 1)
    mu_in = np.where(inside, phi_r, 0.0).sum(axis=0) / np.maximum(inside.sum(axis=0), 1)
    p_out = np.where(out, p_r, 0.0).sum(axis=0) / np.maximum(out.sum(axis=0), 1)
    cols += [
        np.clip(phi_t, -50, 50),
        mu_out,
        mu_in,
        np.log(np.maximum(p_t, 1e-300)) - np.log(np.maximum(p_out, 1e-300)),
        np.log(np.maximum(p_t, 1e-300)) - np.log(np.maximum(p_r.mean(axis=0), 1e-300)),
    ]
    names += ["phi_target", "mu_out", "mu_in", "rmia_offline_ratio", "rmia_online_ratio"]
    return np.column_stack(cols), names


# --------------------------------------------------------------------------- the classifier


def make_classifier(kind: str, seed: int) -> Any:
    """A fresh scikit-learn membership classifier."""
    if kind == "logistic":
        from sklearn.linear_model import LogisticRegression
        from sklearn.pipeline import make_pipeline
        from sklearn.preprocessing import StandardScaler

        return make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000, C=1.0))
    if kind == "mlp":
        from sklearn.neural_network import MLPClassifier
        from sklearn.pipeline import make_pipeline
        from sklearn.preprocessing import StandardScaler

        return make_pipeline(
            StandardScaler(),
            MLPClassifier(
                hidden_layer_sizes=(64, 64), alpha=1e-3, max_iter=400, early_stopping=True, random_state=seed
            ),
        )
    from sklearn.ensemble import HistGradientBoostingClassifier

    return HistGradientBoostingClassifier(
        max_iter=300,
        learning_rate=0.05,
        max_leaf_nodes=15,
        min_samples_leaf=20,
        l2_regularization=1.0,
        early_stopping=True,
        validation_fraction=0.15,
        n_iter_no_change=20,
        random_state=seed,
    )


def _log_odds(clf: Any, x: np.ndarray) -> np.ndarray:
    if hasattr(clf, "decision_function"):
        return np.asarray(clf.decision_function(x), dtype=np.float64)
    p = np.clip(clf.predict_proba(x)[:, 1], 1e-12, 1 - 1e-12)
    return np.log(p) - np.log1p(-p)


def _class_standardised(values: np.ndarray, y: np.ndarray, train: np.ndarray, train_members: np.ndarray) -> np.ndarray:
    """``values[:, j]`` standardised per class by the mean and sd of the training rows' non-members of that class."""
    out = np.empty_like(values)
    ref = train[~train_members]
    g_mu, g_sd = values[ref].mean(axis=0), values[ref].std(axis=0) + 1e-9
    for c in np.unique(y):
        rows = np.flatnonzero(y == c)
        r = ref[y[ref] == c]
        mu, sd = (values[r].mean(axis=0), values[r].std(axis=0) + 1e-9) if len(r) >= 2 else (g_mu, g_sd)
        out[rows] = (values[rows] - mu) / sd
    return out


def learned_scorer(
    features: np.ndarray,
    y: np.ndarray,
    n_classes: int,
    *,
    per_class: np.ndarray | None,
    classifier: str,
    folds: int,
    seed: int,
    threads: int | None,
) -> Callable[[CalibrationLabels], np.ndarray]:
    """The fitted scorer of a learned attack: cross-fitted log-odds of a membership classifier.

    Args:
        features: ``[n, d]`` label-free signals of every audit row.
        y: the rows' labels (for the per-class terms).
        n_classes: number of classes of the target.
        per_class: indices of the feature columns to standardise per class (fitted on each
            training fold's non-members), or None for no per-class terms at all.
        classifier: ``gbdt``, ``logistic`` or ``mlp``.
        folds: cross-fitting folds.
        seed: drives folds and the classifier.
        threads: BLAS/OpenMP threads for the classifier.
    """
    x = np.nan_to_num(np.asarray(features, dtype=np.float64), nan=0.0, posinf=1e6, neginf=-1e6)
    onehot = class_columns(y, n_classes) if per_class is not None and n_classes > 1 else np.zeros((len(y), 0))

    def fit_score(train: np.ndarray, train_members: np.ndarray, score: np.ndarray) -> np.ndarray:
        from privgate.threads import native_threads

        parts = [x, onehot]
        if per_class is not None and len(per_class):
            parts.append(_class_standardised(x[:, per_class], y, train, train_members))
        design = np.concatenate(parts, axis=1)
        clf = make_classifier(classifier, seed)
        with native_threads(threads):
            clf.fit(design[train], train_members)
            return _log_odds(clf, design[score])

    def scorer(labels: CalibrationLabels) -> np.ndarray:
        return cross_fit(labels, fit_score, folds, seed)

    return scorer


# --------------------------------------------------------------------------- the attacks


def _target_signals(ctx: AttackContext, signals: str) -> tuple[np.ndarray, list[str]]:
    """:func:`output_signals` of the target on every audit row, streamed (``[n, d]`` features, their names)."""
    names = output_signals(ctx.target.log_proba(ctx.x[:1]), ctx.y[:1], signals)[1]
    return ctx.per_row(lambda lp, y: output_signals(lp, y, signals)[0]), names


class LearnedAttack(Attack):
    """Membership classifier over the target's output signals, cross-fitted on the calibration split.

    Options:
        signals: ``all`` (every output signal and per-class term), ``loss`` (the loss and
            the class) or ``outputs`` (the log-probability vector and the class).
        classifier: ``gbdt`` (histogram gradient boosting), ``logistic`` or ``mlp``.
        folds: cross-fitting folds over the calibration split (2–20).
    """

    name = "learned"
    threat_model = "black-box"

    def __init__(self, signals: str = "all", classifier: str = "gbdt", folds: int = 5, **options: Any) -> None:
        super().__init__(**options)
        if signals not in SIGNALS:
            raise ValueError(f"option signals must be one of {', '.join(SIGNALS)}, got {shown(signals)}")
        if classifier not in CLASSIFIERS:
            raise ValueError(f"option classifier must be one of {', '.join(CLASSIFIERS)}, got {shown(classifier)}")
        if isinstance(folds, bool) or not isinstance(folds, int) or not 2 <= folds <= 20:
            raise ValueError(f"option folds must be an integer from 2 to 20, got {shown(folds)}")
        self.options = {"signals": signals, "classifier": classifier, "folds": folds}

    def estimated_seconds(self, facts: CostFacts) -> float | None:
        from privgate.attacks.budget import fit_seconds

        return facts.pass_s + fit_seconds(self.options["folds"], facts.rows // 2)

    def _features(self, ctx: AttackContext) -> tuple[np.ndarray, list[str], list[str], int, int]:
        """(features, names, notes, models used, models trained)."""
        return (*_target_signals(ctx, self.options["signals"]), [], 0, 0)

    def run(self, ctx: AttackContext) -> AttackResult:
        start = time.perf_counter()
        o = self.options
        feats, names, notes, k, trained = self._features(ctx)
        n_classes = int(ctx.target.log_proba(ctx.x[:1]).shape[1])
        per_class = np.array([i for i, nm in enumerate(names) if nm in PER_CLASS], dtype=int)
        scorer = learned_scorer(
            feats,
            ctx.y,
            n_classes,
            per_class=per_class,
            classifier=o["classifier"],
            folds=o["folds"],
            seed=ctx.seed,
            threads=ctx.threads,
        )
        shown_names = ", ".join(names[:8]) + (", …" if len(names) > 8 else "")
        notes = [
            *notes,
            (
                f"{o['classifier']} membership classifier over {len(names)} signals ({shown_names}) and per-class "
                f"terms, cross-fitted over {o['folds']} folds of the calibration split; evaluation rows are scored "
                "by one fold's classifier each"
            ),
        ]
        result = AttackResult(
            attack=self.name,
            threat_model=self.threat_model,
            scores=np.zeros(len(ctx.y)),
            seconds=time.perf_counter() - start,
            models_trained=trained,
            options=dict(o),
            notes=notes,
            extras={"signals": names, **({"reference_models": k} if k else {})},
            fitted=scorer,
        )
        return result


class LearnedReferenceAttack(LearnedAttack):
    """The learned attack with reference-model signals (LiRA and RMIA statistics) added.

    Options (besides ``signals``, ``classifier`` and ``folds``):
        models: reference models trained by the recipe (even, ≥ 4; shared with LiRA/RMIA through the cache).
    """

    name = "learned_reference"
    needs_recipe = True

    def __init__(
        self, models: int = 16, signals: str = "all", classifier: str = "gbdt", folds: int = 5, **options: Any
    ) -> None:
        from privgate.attacks.reference import check_models

        super().__init__(signals=signals, classifier=classifier, folds=folds, **options)
        check_models(models, 4)
        self.options = {"models": models, **self.options}

    def estimated_seconds(self, facts: CostFacts) -> float | None:
        from privgate.attacks.budget import fit_seconds, reference_seconds

        return reference_seconds(facts, self.options["models"]) + fit_seconds(self.options["folds"], facts.rows // 2)

    def _features(self, ctx: AttackContext) -> tuple[np.ndarray, list[str], list[str], int, int]:
        from privgate.attacks.reference import build_references, cost_notes

        k = self.options["models"]
        refs = build_references(ctx, k, attack=self.name)
        feats, names = _target_signals(ctx, self.options["signals"])
        target, models = ctx.per_row(reference_stats), refs.per_row(reference_stats)  # streamed by row chunks
        ref_feats, ref_names = reference_signals_of(target, models, refs.inside)
        return np.concatenate([feats, ref_feats], axis=1), names + ref_names, cost_notes(refs), k, refs.ensemble.trained
