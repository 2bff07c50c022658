"""Blind baseline: membership "inference" that never queries the model (Das, Zhang & Tramèr 2024, arXiv 2406.16201).

The rest (design, limits, derivations): docs/internals-inputs.md.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from privgate.attacks.base import Attack, AttackContext, AttackResult
from privgate.errors import shown
from privgate.threads import native_threads

CLASSIFIERS = ("gbdt", "logistic")


def _classifier(kind: str, seed: int, categorical: np.ndarray | None = None) -> Any:
    """The audit-vs-population classifier; ``categorical``: which columns are category codes (tables)."""
    cats = None if categorical is None or not categorical.any() else categorical
    if kind == "logistic":
        from sklearn.impute import SimpleImputer
        from sklearn.linear_model import LogisticRegression
        from sklearn.pipeline import make_pipeline
        from sklearn.preprocessing import OneHotEncoder, StandardScaler

        lr = LogisticRegression(max_iter=2000, class_weight="balanced")
        if cats is None:
            return make_pipeline(SimpleImputer(strategy="median"), StandardScaler(), lr)
        from sklearn.compose import ColumnTransformer

        nums = make_pipeline(SimpleImputer(strategy="median"), StandardScaler())
        hot = OneHotEncoder(handle_unknown="ignore", max_categories=50)
        ct = ColumnTransformer([("num", nums, ~cats), ("cat", hot, cats)])
        return make_pipeline(ct, lr)
    from sklearn.ensemble import HistGradientBoostingClassifier

    # unweighted: the score is only ranked (AUC), and class weights put scikit-learn's binning on a per-quantile
    # weighted path 5-30x slower than the fit itself (docs/internals-inputs.md)
    return HistGradientBoostingClassifier(max_iter=50, max_leaf_nodes=15, random_state=seed, categorical_features=cats)


def encode(audit: np.ndarray, pop: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Audit and population rows of a table as numbers, and which columns hold category codes.

    A column whose every value reads as a number stays a number (missing: NaN);
    any other column becomes codes of its values over both sets together
    (missing: NaN), a category when it has at most 255 values.
    """
    both = np.concatenate([audit, pop])
    out = np.empty(both.shape, dtype=np.float64)
    categorical = np.zeros(both.shape[1], dtype=bool)
    for j in range(both.shape[1]):
        col = both[:, j]
        try:
            out[:, j] = np.asarray(col, dtype=np.float64)
            continue
        except (TypeError, ValueError):
            pass
        text = np.asarray([None if _missing(v) else str(v) for v in col], dtype=object)
        present = text != None  # noqa: E711 - elementwise
        values, codes = np.unique(text[present].astype(str), return_inverse=True)
        out[:, j] = np.nan
        out[present, j] = codes
        categorical[j] = len(values) <= 255
    return out[: len(audit)], out[len(audit) :], categorical


def _missing(v: Any) -> bool:
    try:
        return bool(v is None or v != v)  # None, NaN, pandas' NA
    except (TypeError, ValueError):
        return True


class BlindAttack(Attack):
    """Data-only baseline (Das et al. 2024, arXiv 2406.16201): audit-vs-population classifier, cross-fitted.

    Options:
        folds: cross-fitting folds over the audit rows (≥ 2).
        classifier: ``gbdt`` (histogram gradient boosting) or ``logistic``.
        min_population: fewest population rows to learn from the population; with fewer, it learns from the
            calibration split (module docstring).
    """

    name = "blind"
    threat_model = "black-box"
    #: Diagnostic attacks measure the audit data, not the model: never the deciding attack of ``best``.
    diagnostic = True

    def __init__(self, folds: int = 3, classifier: str = "gbdt", min_population: int = 50, **options: Any) -> None:
        super().__init__(**options)
        if isinstance(folds, bool) or not isinstance(folds, int) or not 2 <= folds <= 50:
            raise ValueError(f"option folds must be an integer between 2 and 50, got {shown(folds)}")
        if classifier not in CLASSIFIERS:
            raise ValueError(f"option classifier must be one of {', '.join(CLASSIFIERS)}, got {shown(classifier)}")
        if isinstance(min_population, bool) or not isinstance(min_population, int) or min_population < 10:
            raise ValueError(f"option min_population must be an integer ≥ 10, got {shown(min_population)}")
        self.options = {"folds": folds, "classifier": classifier, "min_population": min_population}

    def run(self, ctx: AttackContext) -> AttackResult:
        start = time.perf_counter()
        o = self.options
        have = 0 if ctx.population is None else len(ctx.population)
        if have < o["min_population"]:
            return self._split(ctx, start, have)
        assert ctx.population is not None
        rng = np.random.default_rng(np.random.SeedSequence([ctx.seed, 0xB11D]))
        keep = np.sort(rng.permutation(have)[: max(len(ctx.x), o["min_population"])])  # no more than the audit: cost
        categorical = None
        if np.asarray(ctx.x).dtype == object:  # a table with text columns: categories (module docstring)
            audit, pop, categorical = encode(ctx.x.reshape(len(ctx.x), -1), ctx.population.x[keep])
        else:
            audit = np.asarray(ctx.x, dtype=np.float64).reshape(len(ctx.x), -1)
            pop = np.asarray(ctx.population.x, dtype=np.float64)[keep].reshape(len(keep), -1)
        have = len(pop)
        fold_of = rng.permutation(len(audit)) % o["folds"]
        pop_fold = rng.permutation(have) % o["folds"]
        scores = np.zeros(len(audit))
        for f in range(o["folds"]):
            held = fold_of == f
            xs = np.concatenate([audit[~held], pop[pop_fold != f]])
            ys = np.r_[np.ones(int((~held).sum())), np.zeros(int((pop_fold != f).sum()))]
            clf = _classifier(o["classifier"], ctx.seed, categorical)
            with native_threads(ctx.threads):  # entered after sklearn is loaded: it limits the pools it finds
                scores[held] = clf.fit(xs, ys).decision_function(audit[held])
        return AttackResult(
            attack=self.name,
            threat_model=self.threat_model,
            scores=scores,
            seconds=time.perf_counter() - start,
            options=dict(o),
            notes=[
                f"never queried the model: {o['classifier']} audit-vs-population classifier, "
                f"{o['folds']}-fold cross-fitted on "
                f"{len(audit)} audit and {have} population rows; an AUC away from 0.5 means the audit data, "
                f"not the model, separates members"
            ],
            extras={"diagnostic": True},
        )

    def _split(self, ctx: AttackContext, start: float, have: int) -> AttackResult:
        """Without a population: members against non-members, learned on the calibration split (docstring)."""
        from privgate.attacks.crossfit import CalibrationLabels, cross_fit

        o = self.options
        rows, categorical = np.asarray(ctx.x).reshape(len(ctx.x), -1), None
        if rows.dtype == object:  # a table with text columns: categories (module docstring)
            x, _, categorical = encode(rows, rows[:0])
        else:
            x = rows.astype(np.float64)
        x = np.column_stack([x, ctx.y])  # the label too: a side with another mix of classes is a shift as well
        categorical = np.r_[np.zeros(x.shape[1] - 1, bool) if categorical is None else categorical, True]

        def fit_score(train: np.ndarray, members: np.ndarray, score: np.ndarray) -> np.ndarray:
            clf = _classifier(o["classifier"], ctx.seed, categorical)
            with native_threads(ctx.threads):
                return clf.fit(x[train], members.astype(int)).decision_function(x[score])

        def scorer(labels: CalibrationLabels) -> np.ndarray:
            return cross_fit(labels, fit_score, o["folds"], ctx.seed)

        why = f"{have} population rows, fewer than {o['min_population']}" if have else "no population"
        return AttackResult(
            attack=self.name,
            threat_model=self.threat_model,
            scores=np.zeros(len(x)),  # label-free placeholder: the gate calls `fitted` with the calibration split
            seconds=time.perf_counter() - start,
            options=dict(o),
            notes=[
                f"never queried the model: {why}, so a {o['classifier']} classifier of members against non-members "
                f"over the features and the label, {o['folds']}-fold cross-fitted on the calibration split, scores "
                "the evaluation split; an AUC away from 0.5 means the audit data, not the model, separates members"
            ],
            extras={"diagnostic": True},
            fitted=scorer,
        )


def _folded(auc: float, lo: float, hi: float) -> tuple[float, float, float]:
    """An AUC interval read as separation in either direction: (max(a, 1 − a), lo, hi)."""
    return (auc, lo, hi) if auc >= 0.5 else (1.0 - auc, 1.0 - hi, 1.0 - lo)


def soundness_warnings(summaries: Sequence[Any], diagnostic: Sequence[str] = ("blind",)) -> list[str]:
    """Report warnings from the blind baseline's AUC (Das et al. 2024, arXiv 2406.16201).

    Args:
        summaries: the report's attack summaries (``name``, ``status``, ``auc``, ``auc_ci``).
        diagnostic: names of data-only attacks.

    Rule: when the blind AUC interval excludes 0.5 (in either direction), the
    data alone separates members from non-members. If its upper bound also
    reaches the best real attack's AUC, the real attacks are no better than a
    model-free guess and the audit data is unsound; otherwise part of their
    success may be the shift.
    """
    ran = [s for s in summaries if s.status == "ran" and s.auc is not None and s.auc_ci and None not in s.auc_ci]
    blind = [s for s in ran if s.name in diagnostic]
    real = [s for s in ran if s.name not in diagnostic]
    out = []
    for b in blind:
        auc, lo, hi = _folded(b.auc, b.auc_ci[0], b.auc_ci[1])
        if lo <= 0.5:
            continue
        what = (
            f"the blind baseline '{b.name}', which never queries the model, separates members from "
            f"non-members (AUC {b.auc:.3f} [{b.auc_ci[0]:.3f}, {b.auc_ci[1]:.3f}])"
        )
        best = max(real, key=lambda s: s.auc, default=None)
        if best is None or hi >= best.auc:
            vs = f" as well as the strongest attack ('{best.name}', AUC {best.auc:.3f})" if best is not None else ""
            out.append(
                f"audit data unsound: {what}{vs}; members and non-members differ in distribution, so the attack "
                "numbers measure that difference rather than what the model memorised (Das et al. 2024) — draw "
                "members and non-members from one distribution, e.g. by a random split"
            )
        else:
            out.append(
                f"{what}, though less well than '{best.name}' (AUC {best.auc:.3f}): members and non-members differ "
                "in distribution, so part of the measured leakage may come from that difference (Das et al. 2024)"
            )
    return out
