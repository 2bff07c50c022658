"""The distribution-shift guard: blind to same-distribution texts, alarmed by texts that differ."""

from __future__ import annotations

import numpy as np
import pytest

from privgate.lm.shift import distribution_shift

WORDS = ["the", "patient", "reported", "pain", "in", "left", "arm", "after", "visit", "and", "was", "given", "rest"]


def notes(n: int, rng: np.random.Generator, extra: str = "") -> list[str]:
    """Short clinical-sounding texts of random words (``extra`` appended: a marker of another source)."""
    return [" ".join(rng.choice(WORDS, size=12)) + extra for _ in range(n)]


def test_same_distribution_is_not_biased():
    rng = np.random.default_rng(0)
    r = distribution_shift(notes(60, rng), notes(60, rng), seed=1)
    assert r.resolvable and not r.biased
    assert r.lo < 0.5 < r.hi and abs(r.auc - 0.5) < 0.15
    assert (r.n_members, r.n_nonmembers, r.evaluation_members, r.evaluation_nonmembers) == (60, 60, 30, 30)


def test_texts_from_another_source_are_flagged():
    rng = np.random.default_rng(0)
    later = notes(60, rng, extra=" follow up scheduled via portal 2024")
    r = distribution_shift(notes(60, rng), later, seed=1)
    assert r.biased and r.auc == 1.0 and r.lo > 0.85
    assert any(g.strip() in "follow up scheduled via portal 2024" for g in r.nonmember_ngrams)


def test_case_alone_is_a_shift():
    rng = np.random.default_rng(2)
    r = distribution_shift(notes(40, rng), [t.upper() for t in notes(40, rng)], seed=0)
    assert r.biased and r.auc > 0.95


@pytest.mark.parametrize("n", [5, 19])
def test_too_few_texts_cannot_decide(n):
    rng = np.random.default_rng(0)
    r = distribution_shift(notes(n, rng), notes(40, rng))
    assert not r.resolvable and not r.biased and np.isnan(r.auc)
    assert "too few texts for the shift guard" in r.reason
