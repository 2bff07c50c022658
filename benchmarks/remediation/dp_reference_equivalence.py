"""DP-SGD reference models: the engine's MLP kernel against Opacus, distribution against distribution.

    python benchmarks/remediation/dp_reference_equivalence.py              # K = 32 models, seeds 11 and 12
    python benchmarks/remediation/dp_reference_equivalence.py -k 16 --seeds 7 8 9

``privgate harden`` audits every candidate with reference models trained like
the DP-SGD target. For an MLP recipe the engine trains them on its MLP kernel
(Poisson sampling, ghost-norm clipping, Gaussian noise, drawn per model) instead
of one Opacus run per model. The two cannot give equal models (different random
draws), so this script checks that they give models distributed alike — what
LiRA and RMIA depend on. The target is the digits example's recipe hardened at
ε = 50 (σ from Opacus' calibration, C = 1, 30 epochs, expected batch 256); both
implementations train K models on the same paired masks over the audit pool,
and the script prints, per implementation:

* the mean logit-scaled confidence φ = log p_y − log(1 − p_y) of training (IN)
  and held-out (OUT) rows, the statistic LiRA models;
* the mean per-example IN − OUT gap of φ (the membership signal; ± its SE);
* the spread of φ over the OUT models (LiRA's Gaussian width), averaged over rows;
* the mean held-out accuracy.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples" / "digits"))
sys.path.insert(0, str(ROOT))

import data as digits  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from recipe import RECIPE  # noqa: E402

from privgate.dp.recipe import DPRecipe  # noqa: E402
from privgate.dpsgd.records import DPSettings  # noqa: E402
from privgate.dpsgd.train import train_dp  # noqa: E402
from privgate.inputs.target import log_softmax  # noqa: E402
from privgate.training.engine import TrainedReferences, train_models  # noqa: E402
from privgate.training.ensemble import TorchReader  # noqa: E402
from privgate.training.plan import model_seeds, paired_masks  # noqa: E402


def logit_confidence(ens: TrainedReferences, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """φ of every model on every row, ``[K, n]``."""
    lp = log_softmax(ens.logits(x))
    ly = lp[:, np.arange(len(y)), y]
    return ly - np.log(np.clip(-np.expm1(ly), 1e-300, None))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", "-k", type=int, default=32)
    ap.add_argument("--seeds", type=int, nargs="+", default=[11, 12])
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    xm, ym = digits.members()
    xn, yn = digits.nonmembers()
    settings = DPSettings(epochs=30, batch_size=256, max_grad_norm=1.0, delta=1.1e-4, accountant="rdp")
    _, record = train_dp(RECIPE, xm, ym, 0, settings=settings, target_epsilon=50.0)
    dp = DPRecipe.from_training(dataclasses.replace(RECIPE), record, settings)
    x, y = np.concatenate([xm, xn]), np.concatenate([ym, yn])
    print(
        f"target recipe: {dp.name}; q = {record.sample_rate:g}, {record.steps} steps; K = {args.models} "
        f"models per implementation"
    )
    for seed in args.seeds:
        masks, seeds = paired_masks(len(x), args.models, seed), model_seeds(seed, args.models)
        for vectorise in (True, False):
            t0 = time.perf_counter()
            out = train_models(dp, x, y, masks, seeds, vectorise=vectorise)
            seconds = time.perf_counter() - t0
            ens = TrainedReferences(recipe=dp, models=out.states, masks=masks, seeds=seeds, reader=TorchReader(dp))
            phi = logit_confidence(ens, x, y)
            gap = np.array([phi[masks[:, i], i].mean() - phi[~masks[:, i], i].mean() for i in range(len(y))])
            spread = float(np.mean([phi[~masks[:, i], i].std() for i in range(len(y))]))
            held_out = float(np.mean([(ens.logits(x[~m])[j].argmax(1) == y[~m]).mean() for j, m in enumerate(masks)]))
            who = "MLP kernel" if out.kernel == "mlp-dp" else "Opacus    "
            print(
                f"seed {seed} {who} ({seconds:5.1f} s): φ IN {phi[masks].mean():.3f}, OUT {phi[~masks].mean():.3f}; "
                f"IN−OUT gap {gap.mean():.4f} ± {gap.std() / np.sqrt(len(gap)):.4f}; spread over OUT models "
                f"{spread:.3f}; "
                f"held-out accuracy {held_out:.4f}",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
