"""The benchmark's re-implementation of Privacy Meter's RMIA (benchmarks/_common/privacy_meter_rmia.py) vs known truths.

The peer number of ``benchmarks/peers/attack_peers_tables.py`` comes from it, so it is
checked like privgate's own statistics: no signal gives AUC ≈ 0.5, a planted
signal is found, and its scores are Privacy Meter's fraction of z-samples.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from privgate import stats

_PATH = Path(__file__).resolve().parent.parent / "benchmarks" / "_common" / "privacy_meter_rmia.py"


@pytest.fixture(scope="module")
def pm():  # noqa: ANN201
    spec = importlib.util.spec_from_file_location("_privacy_meter_rmia", _PATH)
    mod = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(mod)
    return mod


def _world(seed: int, effect: float) -> tuple:
    """16 paired reference models, 4,000 audit rows (half members of the target), 2,000 population rows.

    Every model's true-label probability of a row is sigmoid(difficulty + noise), plus ``effect`` on the
    logit scale when the model trained on the row.
    """
    rng = np.random.default_rng(seed)
    k, n, m = 16, 4000, 2000
    half = rng.random((k // 2, n)) < 0.5
    inside = np.empty((k, n), dtype=bool)
    inside[0::2], inside[1::2] = half, ~half
    member = rng.random(n) < 0.5
    hard_x, hard_z = rng.normal(0, 1.5, n), rng.normal(0, 1.5, m)

    def prob(hard: np.ndarray, trained: np.ndarray) -> np.ndarray:
        return 1 / (1 + np.exp(-(hard + rng.normal(0, 0.5, hard.shape) + effect * trained)))

    px_ref = prob(hard_x, inside)
    pz_ref = prob(np.broadcast_to(hard_z, (k, m)), np.zeros((k, m)))
    return prob(hard_x, member), px_ref, inside, prob(hard_z, np.zeros(m)), pz_ref, member


def _auc(scores: np.ndarray, member: np.ndarray) -> stats.Estimate:
    return stats.auc(scores[member], scores[~member])


def test_no_membership_signal_gives_chance(pm) -> None:  # noqa: ANN001
    *args, member = _world(1, effect=0.0)
    scores, _ = pm.privacy_meter_rmia(*args)
    auc = _auc(scores, member)
    assert auc.lo < 0.5 < auc.hi


def test_planted_signal_is_found_and_scores_are_z_fractions(pm) -> None:  # noqa: ANN001
    *args, member = _world(2, effect=1.5)
    scores, a = pm.privacy_meter_rmia(*args)
    assert _auc(scores, member).lo > 0.75
    assert a in {round(v, 1) for v in np.arange(0, 1.1, 0.1)}
    assert ((scores >= 0) & (scores <= 1)).all()
    assert np.allclose(scores * 2000, np.round(scores * 2000))  # a fraction of the 2,000 z-samples
