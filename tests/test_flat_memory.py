"""Flat memory: scoring streams the audit rows, so memory per row stays small and the numbers stay the same.

* The streamed statistics (the target's and the reference models', a batch of
  rows at a time) are bit-for-bit those of the whole ``[n, classes]`` matrices
  the attacks used to hold.
* The scoring path's peak of traced (numpy) memory grows by a few hundred
  bytes per audit row, not by the K x classes float64 matrices of before
  (reference log-probabilities ``[K, n, classes]``: 4 x 10 x 8 = 320 bytes per
  row for each copy, and there were several).
"""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
import torch
from torch import nn

from privgate import AuditData, Dataset, Recipe, RunOptions, Target, gate, outputs, train_model
from privgate.attacks import AttackContext
from privgate.attacks.reference import build_references, logit_confidence
from privgate.attacks.rmia import tempered_true_class
from privgate.attacks.threshold import EntropyAttack, ModifiedEntropyAttack
from privgate.policy import parse_policy

FEATURES, CLASSES = 20, 10


def _model() -> nn.Module:
    return nn.Sequential(nn.Linear(FEATURES, 16), nn.ReLU(), nn.Linear(16, CLASSES))


RECIPE = Recipe(model_factory=_model, epochs=1, batch_size=512, lr=3e-3, name="flat-mlp")


def _data(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, FEATURES)).astype(np.float32)
    y = (x[:, :CLASSES] + rng.gumbel(size=(n, CLASSES))).argmax(axis=1).astype(np.int64)
    return x, y


def _target(x: np.ndarray, y: np.ndarray) -> Target:
    t = Target(train_model(RECIPE, x, y, seed=0), source="<flat>")
    t.detect_outputs(x[:256])
    return t


def test_streamed_statistics_equal_the_whole_matrices() -> None:
    x, y = _data(3000)  # three target batches of 1024 rows, one reference batch of 4096
    target = _target(x[:1500], y[:1500])
    ctx = AttackContext(target=target, x=x, y=y, recipe=RECIPE, run=RunOptions(cache_dir="off"))
    whole = target.log_proba(x)
    assert np.array_equal(ctx.per_row(lambda lp, yy: lp), whole)
    for attack in (EntropyAttack, ModifiedEntropyAttack):
        assert np.array_equal(ctx.per_row(attack.signal), attack.signal(whole, y))
    assert np.array_equal(ctx.per_row(logit_confidence), logit_confidence(whole, y))
    assert np.array_equal(target.predict(x), target.predict_proba(x).argmax(axis=1))

    refs = build_references(ctx, 4, attack="test")
    raw = refs.ensemble.logits(x)  # [K, n, classes]: what the attacks held before
    ref_whole = np.stack([outputs.log_proba(r, outputs.LOGITS) for r in raw])
    assert refs.per_row(logit_confidence).shape == (4, len(y))
    assert np.array_equal(refs.per_row(logit_confidence), logit_confidence(ref_whole, y))
    p = refs.per_row(lambda lp, yy: tempered_true_class(lp, yy, 2.0))
    assert np.array_equal(p, tempered_true_class(ref_whole, y, 2.0))
    assert np.array_equal(refs.log_proba, ref_whole)


def _scoring_peak(n: int) -> int:
    """Peak traced bytes of the gate's scoring path (pool, attacks, statistics) on ``n`` audit rows."""
    x, y = _data(n + 400, seed=1)
    half = n // 2
    target = _target(x[:half], y[:half])
    data = AuditData(Dataset(x[:half], y[:half]), Dataset(x[half:n], y[half:n]), Dataset(x[n:], y[n:]))
    policy = parse_policy(
        """
        name: flat
        sensitivity: internal
        release: api
        confidence: 0.95
        attacks:
          loss: {}
          entropy: {}
          modified_entropy: {class_dependent: true}
          correctness: {}
          lira: {models: 4}
          rmia: {models: 4, z_samples: 200}
        checks:
          - {id: auc, attack: best, metric: auc, max: 0.9}
        """
    )
    run = RunOptions(cache_dir="off", device="cpu")
    torch.set_num_threads(1)
    tracemalloc.start()
    try:
        _, missing, summaries = gate.run_attacks(target, data, policy, recipe=RECIPE, run=run)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert not missing and all(s.status == "ran" for s in summaries)
    return peak


@pytest.mark.slow
def test_scoring_memory_per_row_stays_small() -> None:
    _scoring_peak(2_000)  # warm-up: imports and first calls are not per-row memory
    small, large = 10_000, 40_000
    per_row = (_scoring_peak(large) - _scoring_peak(small)) / (large - small)
    # x (80 bytes), a few float64 score vectors and the [K, n] statistics: a few hundred bytes a row;
    # holding [K, n, classes] float64 reference outputs alone took 320 bytes a row per copy
    assert per_row < 600, f"scoring keeps {per_row:.0f} bytes per audit row"
