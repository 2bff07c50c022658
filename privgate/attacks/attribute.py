"""Attribute inference: recover a declared sensitive column of the training records from the model.

Fredrikson et al. 2014 ("Privacy in Pharmacogenetics", USENIX Security), Yeom et al. 2018 (arXiv 1709.01604),
Mehnaz et al. 2022 (arXiv 2201.09370): ŝ = argmax_v p_target(y | x₋ₛ, s = v) · π(v | x₋ₛ), π the attacker's prior
fitted on the population. The metric ``attribute_advantage`` is its accuracy on the members minus that of the best
model-free guess (which sees the label too), with an exact paired interval; the membership score is
log q(s | ·) − log b(s | ·). Black-box (``predict_proba`` only). Derivation: ``docs/whitebox.md``.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import numpy as np

from privgate.attacks.base import Attack, AttackContext, AttackResult, AttackSkipped
from privgate.errors import shown
from privgate.threads import SKLEARN_JOBS, native_threads

if TYPE_CHECKING:
    from privgate.inputs.data import Dataset

#: Fewest population rows to fit the prior and the baseline.
MIN_POPULATION = 30
_TINY = 1e-12


#: Widest feature set for the gradient-boosted imputation candidate (its cost grows with width).
MAX_BOOSTED_FEATURES = 64


def _candidates(d: int, seed: int) -> dict[str, Any]:
    """Imputation models tried for the prior and the baseline (the prior itself is always tried)."""
    from sklearn.ensemble import HistGradientBoostingClassifier
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    out: dict[str, Any] = {"logistic": make_pipeline(StandardScaler(), LogisticRegression(C=0.1, max_iter=500))}
    if d <= MAX_BOOSTED_FEATURES:
        out["boosted"] = HistGradientBoostingClassifier(
            max_iter=100, learning_rate=0.1, max_leaf_nodes=15, l2_regularization=1.0, random_state=seed
        )
    return out


def _proba_over(model: Any, feats: np.ndarray, domain: np.ndarray) -> np.ndarray:
    """Probabilities of every value in ``domain`` (0 for values the model never saw)."""
    p = model.predict_proba(feats)
    out = np.zeros((len(feats), len(domain)))
    index = {v: i for i, v in enumerate(domain)}
    for j, v in enumerate(model.classes_):
        out[:, index[v]] = p[:, j]
    return out


class _Prior:
    """The marginal distribution of s, as a tiny classifier-like object."""

    def __init__(self, codes: np.ndarray, k: int) -> None:
        counts = np.bincount(codes, minlength=k) + 0.5  # Jeffreys smoothing: no value is impossible
        self.p = counts / counts.sum()
        self.classes_ = np.arange(k)

    def predict_proba(self, feats: np.ndarray) -> np.ndarray:
        return np.repeat(self.p[None], len(feats), axis=0)


def _best_model(feats: np.ndarray, codes: np.ndarray, k: int, seed: int) -> tuple[Any, str, float]:
    """The most accurate of the marginal prior and the imputation candidates, by 3-fold CV on the population."""
    from sklearn.base import clone
    from sklearn.model_selection import StratifiedKFold, cross_val_score

    prior = _Prior(codes, k)
    best: tuple[Any, str, float] = (prior, "prior", float(np.mean(codes == int(np.argmax(prior.p)))))
    counts = np.bincount(codes, minlength=k)
    folds = int(min(3, counts[counts > 0].min())) if (counts > 0).sum() > 1 else 0
    if folds < 2:
        return best
    cv = StratifiedKFold(n_splits=folds, shuffle=True, random_state=seed)
    for name, model in _candidates(feats.shape[1], seed).items():
        acc = float(np.mean(cross_val_score(clone(model), feats, codes, cv=cv, n_jobs=SKLEARN_JOBS)))
        if acc > best[2]:
            best = (model, name, acc)
    if best[1] != "prior":
        best = (clone(best[0]).fit(feats, codes), best[1], best[2])
    return best


def _log_likelihoods(ctx: AttackContext, X: np.ndarray, col: int, domain: np.ndarray) -> np.ndarray:
    """``[n, k]``: log p(y | x with the sensitive column set to each candidate value), from the target.

    The target is queried once per candidate value; log-probabilities, since a confident model's probabilities
    round to 1.0 and would tie every candidate.
    """
    n = len(X)
    log_lik = np.empty((n, len(domain)))
    rows = np.arange(n)
    for i, v in enumerate(domain):
        Xv = X.copy()
        Xv[:, col] = v
        log_lik[:, i] = ctx.target.log_proba(Xv.reshape(ctx.x.shape))[rows, ctx.y]
    return log_lik


class AttributeAttack(Attack):
    """Attribute inference of a declared sensitive column.

    Fredrikson et al. 2014; Yeom et al. 2018, arXiv 1709.01604; Mehnaz et al. 2022, arXiv 2201.09370.

    Options:
        sensitive_column: index of the sensitive feature in an audit row (flattened); required.
        max_values: largest number of distinct values the column may take (it must be categorical).
    """

    name = "attribute"
    threat_model = "black-box"
    numeric_rows = True  # its prior and baseline learn from the rows' numbers

    def __init__(self, sensitive_column: int | None = None, max_values: int = 32, **options: Any) -> None:
        super().__init__(**options)
        if sensitive_column is not None and (
            not isinstance(sensitive_column, int) or isinstance(sensitive_column, bool)
        ):
            raise ValueError(
                f"option sensitive_column must be a column index (an integer), got {shown(sensitive_column)}"
            )
        if not isinstance(max_values, int) or isinstance(max_values, bool) or not 2 <= max_values <= 1000:
            raise ValueError(f"option max_values must be an integer between 2 and 1000, got {shown(max_values)}")
        self.options = {"sensitive_column": sensitive_column, "max_values": max_values}

    def _sensitive_column(self, X: np.ndarray, pop: Dataset | None) -> tuple[int, np.ndarray]:
        """The sensitive column's index (from 0) and its values in the audit and population rows; skips the attack
        when the option is missing, the population too small, or the column out of range or not categorical."""
        col = self.options["sensitive_column"]
        if col is None:
            raise AttackSkipped(
                "attack 'attribute' needs the option sensitive_column (the index of the sensitive feature) in "
                "the policy's attacks mapping"
            )
        if pop is None or len(pop) < MIN_POPULATION:
            raise AttackSkipped(
                f"attack 'attribute' fits its prior and the model-free baseline on population data and needs "
                f"at least {MIN_POPULATION} population rows (--population)"
            )
        P = pop.x.reshape(len(pop), -1)
        d = X.shape[1]
        if not -d <= col < d:
            raise AttackSkipped(f"sensitive_column {col} is out of range: audit rows have {d} features")
        col %= d
        domain = np.unique(np.r_[P[:, col], X[:, col]])
        if len(domain) > self.options["max_values"]:
            raise AttackSkipped(
                f"sensitive column {col} takes {len(domain)} distinct values (more than max_values "
                f"{self.options['max_values']}); "
                "attribute inference here needs a categorical column"
            )
        if len(domain) < 2:
            raise AttackSkipped(f"sensitive column {col} takes a single value; there is nothing to infer")
        return col, domain

    def run(self, ctx: AttackContext) -> AttackResult:
        from privgate.stats.leakage import PairedGuesses

        t0 = time.perf_counter()
        pop = ctx.population
        n = len(ctx.x)
        X = ctx.x.reshape(n, -1)
        col, domain = self._sensitive_column(X, pop)
        assert pop is not None
        P = pop.x.reshape(len(pop), -1)
        k = len(domain)
        s_pop = np.searchsorted(domain, P[:, col])
        s_true = np.searchsorted(domain, X[:, col])
        n_labels = int(max(ctx.y.max(), pop.y.max())) + 1

        def with_label(rows: np.ndarray, y: np.ndarray) -> np.ndarray:
            return np.column_stack([np.delete(rows, col, axis=1), np.eye(n_labels)[y]])

        # the attacker's prior π(s | x₋ₛ) and the model-free baseline b(s | x₋ₛ, y), both from the population;
        # these fits are small: the context's threads (1 by default; a shared CI runner makes many threads slower)
        import sklearn.ensemble  # noqa: F401  (loads scikit-learn's OpenMP runtime, so the limit below reaches it)

        with native_threads(ctx.threads):
            prior, prior_kind, prior_cv = _best_model(np.delete(P, col, axis=1), s_pop, k, ctx.seed)
            base, base_kind, base_cv = _best_model(with_label(P, pop.y), s_pop, k, ctx.seed)
            pi = np.clip(_proba_over(prior, np.delete(X, col, axis=1), np.arange(k)), _TINY, 1.0)
            b = np.clip(_proba_over(base, with_label(X, ctx.y), np.arange(k)), _TINY, 1.0)

        rows = np.arange(n)
        log_post = _log_likelihoods(ctx, X, col, domain) + np.log(pi)
        log_post -= np.logaddexp.reduce(log_post, axis=1, keepdims=True)
        guess, base_guess = log_post.argmax(axis=1), b.argmax(axis=1)
        b_norm = b / b.sum(axis=1, keepdims=True)
        scores = log_post[rows, s_true] - np.log(b_norm[rows, s_true])
        measure = PairedGuesses(
            attack_correct=guess == s_true, baseline_correct=base_guess == s_true, baseline=base_kind
        )
        extras = {
            "estimates": {"attribute_advantage": measure},
            "sensitive_column": col,
            "values": [float(v) for v in domain],
            "attacker_prior": prior_kind,
            "attacker_prior_cv_accuracy": round(prior_cv, 4),
            "baseline": base_kind,
            "baseline_cv_accuracy": round(base_cv, 4),
            "attack_accuracy": round(float(np.mean(guess == s_true)), 4),
            "baseline_accuracy": round(float(np.mean(base_guess == s_true)), 4),
        }
        return AttackResult(
            attack=self.name,
            threat_model=self.threat_model,
            scores=np.asarray(scores, dtype=float),
            seconds=time.perf_counter() - t0,
            options=dict(self.options),
            extras=extras,
        )
