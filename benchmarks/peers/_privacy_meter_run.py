"""ML Privacy Meter's RMIA, run as a user of Privacy Meter runs it, in a process of its own (``cold_start.py``).

    python benchmarks/peers/_privacy_meter_run.py WORK SOURCE OUT.json

``WORK`` is the folder ``cold_start.py`` prepared (``recipe.py``, ``members.npz``,
``nonmembers.npz``, ``population.npz``, ``model.pt``). ``SOURCE`` is Privacy
Meter's ``attacks.py`` (privacytrustlab/ml_privacy_meter, unchanged; ``cold_start.py``
copies it out of a checkout or a git mirror), or ``-`` for privgate's
re-implementation of it (:mod:`_common.privacy_meter_rmia`) where no copy is at hand.

What Privacy Meter's ``run_mia.py`` does, with the target given instead of
trained (Zarifzadeh, Liu, Nasr & Shokri 2024, arXiv 2312.03262):

* models in pairs on complementary halves of the audit pool (its
  ``split_dataset_for_training``): the target (trained on the members) with
  its pair (trained on the non-members, the other half), then 16 pairs of
  reference models on random halves — 33 models trained, one after another by
  the same recipe as the target (``train_model``: Privacy Meter trains each
  model in its own loop), with torch's default threads;
* signals: the softmax probability of the true label at temperature 1 (its
  ``get_softmax``) of every model on the audit rows and the population rows;
* ``attacks.tune_offline_a`` on the paired model, then ``attacks.run_rmia``
  against the target with 4 and with 16 reference models, every population row a z.

Prints nothing but what it was asked; writes the AUCs, ``a`` and the phases' seconds to ``OUT.json``.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import sys
import time
from pathlib import Path

T0 = time.perf_counter()

import numpy as np  # noqa: E402
import torch  # noqa: E402

from privgate.training.loop import train_model  # noqa: E402

#: Reference models of the two runs (Privacy Meter's ``num_ref_models``).
RUNS = (4, 16)
#: Privacy Meter's signal batch (its configs' ``audit.batch_size``).
SIGNAL_BATCH = 5000


def _softmax_true(model: torch.nn.Module, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Privacy Meter's ``get_softmax`` at temperature 1 for a classifier: the true label's softmax, ``[n, 1]``."""
    model.eval()
    out = []
    with torch.no_grad():
        for xb, yb in zip(torch.split(torch.as_tensor(x), SIGNAL_BATCH), torch.split(torch.as_tensor(y), SIGNAL_BATCH)):
            logits = model(xb)
            logits = logits - logits.max(dim=1).values.reshape(-1, 1)
            e = torch.exp(logits)
            out.append((e.gather(1, yb.reshape(-1, 1)) / e.sum(dim=1).reshape(-1, 1)).numpy())
    return np.concatenate(out)


def _pairs(n: int, pairs: int, rng: np.random.Generator) -> np.ndarray:
    """``[2 * pairs, n]`` memberships: complementary random halves (Privacy Meter's ``split_dataset_for_training``)."""
    keep = np.ones((2 * pairs, n), dtype=bool)
    idx = np.arange(n)
    for i in range(pairs):
        rng.shuffle(idx)
        keep[2 * i, idx[n // 2 :]] = False
        keep[2 * i + 1, idx[: n // 2]] = False
    return keep


def _load_attacks(source: str):
    """Privacy Meter's ``attacks.py`` as a module (unchanged), or None for the re-implementation."""
    if source == "-":
        return None
    spec = importlib.util.spec_from_file_location("privacy_meter_attacks", source)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main(work: Path, source: str, out: Path) -> None:
    from sklearn.metrics import roc_auc_score

    sys.path.insert(0, str(work))
    from recipe import RECIPE as recipe

    parts = {name: np.load(work / f"{name}.npz") for name in ("members", "nonmembers", "population")}
    xm, ym = parts["members"]["x"].astype(np.float32), parts["members"]["y"].astype(np.int64)
    xn, yn = parts["nonmembers"]["x"].astype(np.float32), parts["nonmembers"]["y"].astype(np.int64)
    xp, yp = parts["population"]["x"].astype(np.float32), parts["population"]["y"].astype(np.int64)
    x, y = np.concatenate([xm, xn]), np.concatenate([ym, yn])
    target_in = np.r_[np.ones(len(xm), bool), np.zeros(len(xn), bool)]
    refs = _pairs(len(x), max(RUNS), np.random.default_rng(1234))
    memberships = np.vstack([target_in, ~target_in, refs])  # [models, n]: target, its pair, 16 reference pairs
    attacks = _load_attacks(source)
    imported = time.perf_counter()

    target = recipe.build(seed=0)
    target.load_state_dict(torch.load(work / "model.pt", weights_only=True))
    models = [target]
    for i, keep in enumerate(memberships[1:], 1):  # one model after another, as Privacy Meter trains them
        models.append(train_model(recipe, x[keep], y[keep], seed=i))
    trained = time.perf_counter()

    signals = np.hstack([_softmax_true(m, x, y) for m in models])  # [n, models], Privacy Meter's layout
    population = np.hstack([_softmax_true(m, xp, yp) for m in models])
    scored = time.perf_counter()

    result: dict = {"source": source, "models_trained": len(models) - 1, "runs": {}}
    if attacks is not None:
        logger = logging.getLogger("privacy_meter")
        a, _, _ = attacks.tune_offline_a(0, signals, population, memberships.T, logger)
        for k in RUNS:
            scores = attacks.run_rmia(0, signals, population, memberships.T, k, a)
            result["runs"][k] = float(roc_auc_score(target_in, scores.ravel()))
        result["offline_a"] = float(a)
    else:
        from _common.privacy_meter_rmia import privacy_meter_rmia

        for k in RUNS:
            ref = slice(2, 2 + 2 * k)
            scores, a = privacy_meter_rmia(
                signals[:, 0], signals[:, ref].T, memberships[ref], population[:, 0], population[:, ref].T
            )
            result["runs"][k] = float(roc_auc_score(target_in, scores))
            result["offline_a"] = float(a)
    done = time.perf_counter()
    result["seconds"] = {
        "imports": imported - T0,
        "training": trained - imported,
        "signals": scored - trained,
        "attack": done - scored,
    }
    out.write_text(json.dumps(result))


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3]))
