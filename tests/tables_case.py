"""A small table with text columns and text labels, and scikit-learn pipelines fitted on it, as a user has them.

Built once per test session (``tests/conftest.py::built_once``): a seeded credit-like table (two text
columns, one integer, one float; labels ``"bad"`` / ``"fair"`` / ``"good"``), its members, non-members and
population as Parquet (and the members as CSV), and pipelines that one-hot encode the text columns and scale
the numbers — an overfitting random forest, a logistic regression and a histogram gradient-boosting model —
saved with skops (and the forest with joblib too); the policies: ``tabular.yaml`` (LiRA and RMIA on 8 clones),
``clones.yaml`` (on 4) and ``released.yaml`` (the structural attack).
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np

POLICY = textwrap.dedent(
    """
    name: tabular
    sensitivity: confidential
    release: api
    confidence: 0.95
    attacks:
      loss: {}
      lira: {models: 8}
      rmia: {models: 8, min_population: 100}
    checks:
      - {id: mia-auc, attack: best, metric: auc, max: 0.6}
    """
)

#: The same attacks on 4 clones: for the tests whose assertion does not need 8 (the cache, a recipe, Ray).
CLONES = POLICY.replace("name: tabular", "name: clones").replace("models: 8", "models: 4")

RELEASED = textwrap.dedent(
    """
    name: released
    sensitivity: confidential
    release: model
    confidence: 0.95
    attacks:
      structural: {k: 5}
    checks:
      - {id: isolated, attack: structural, metric: isolated_fraction, max: 0.5}
    """
)


def table(n: int, seed: int):
    """``n`` rows of the credit-like table (a DataFrame with its ``label`` column)."""
    import pandas as pd

    rng = np.random.default_rng(seed)
    job = rng.choice(["clerk", "engineer", "nurse", "driver", "teacher"], n)
    housing = rng.choice(["own", "rent", "free"], n, p=[0.5, 0.4, 0.1])
    age = rng.integers(19, 75, n)
    amount = np.round(rng.lognormal(8, 0.6, n), 2)
    risk = (housing == "rent") * 0.8 + (amount > 4000) * 0.7 - (age > 40) * 0.5 + rng.normal(0, 1.2, n)
    label = np.where(risk > 0.9, "bad", np.where(risk > 0.0, "fair", "good"))
    return pd.DataFrame({"job": job, "housing": housing, "age": age, "amount": amount, "label": label})


def pipeline(final):
    from sklearn.compose import ColumnTransformer
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import OneHotEncoder, StandardScaler

    encode = ColumnTransformer(
        [
            ("text", OneHotEncoder(handle_unknown="ignore"), ["job", "housing"]),
            ("num", StandardScaler(), ["age", "amount"]),
        ]
    )
    return Pipeline([("encode", encode), ("model", final)])


def build_tables(d: Path) -> Path:
    import joblib
    import skops.io as sio
    from sklearn.ensemble import HistGradientBoostingClassifier, RandomForestClassifier
    from sklearn.linear_model import LogisticRegression

    d.mkdir(parents=True, exist_ok=True)
    members, nonmembers, population = table(200, 1), table(200, 2), table(200, 3)
    members.to_parquet(d / "m.parquet")
    nonmembers.to_parquet(d / "n.parquet")
    population.to_parquet(d / "p.parquet")
    members.to_csv(d / "m.csv", index=False)
    x, y = members.drop(columns="label"), members["label"]
    rf = pipeline(RandomForestClassifier(n_estimators=25, random_state=0)).fit(x, y)
    sio.dump(rf, d / "rf.skops")
    joblib.dump(rf, d / "rf.joblib")
    sio.dump(pipeline(LogisticRegression(max_iter=500)).fit(x, y), d / "lr.skops")
    sio.dump(pipeline(HistGradientBoostingClassifier(max_iter=20, random_state=0)).fit(x, y), d / "hgb.skops")
    (d / "tabular.yaml").write_text(POLICY)
    (d / "clones.yaml").write_text(CLONES)
    (d / "released.yaml").write_text(RELEASED)
    return d
