"""IBM ART's membership-inference attacks on one target, run by ``benchmarks/peers/sklearn_peers.py`` in another venv.

Never imported by privgate (``adversarial-robustness-toolbox`` is only in the ``bench`` extra). Usage::

    python _art_run.py IN.npz MODEL.pkl OUT_PREFIX [--models 16] [--seed 0]

``IN.npz``: the pipeline's encoded rows (``members_x``/``_y``, ``nonmembers_x``/``_y``, ``population_x``/``_y``,
labels as indices into ``classes``), since ART's scikit-learn wrappers take arrays; ``MODEL.pkl``: the fitted
last step of the pipeline. The attacks, as ART documents them:

* ``ShadowModels`` (Shokri et al. 2017, arXiv 1610.05820): 16 clones of the model
  (``clone_for_refitting``), each fitted on a random half of the shadow data and read on both halves — the
  shadow data being the **population** (known non-members of the target, as ART documents it) or the
  **audit rows** (members and non-members pooled, membership unknown: the data privgate's and SACRO-ML's
  reference models train on); then ``MembershipInferenceBlackBox`` (``input_type="prediction"``) with a
  random-forest and a gradient-boosting attack model, fitted on the shadow models' predictions and applied
  to the target's predictions on every audit row;
* ``MembershipInferenceBlackBoxRuleBased``: member when the target predicts the row's label.

Writes ``OUT_PREFIX.npz`` (each attack's score of every member, then every non-member) and
``OUT_PREFIX.json`` (each attack's wall and CPU seconds: the shared shadow models plus its own fit and
inference).
"""

from __future__ import annotations

import argparse
import json
import pickle
import time

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("data")
    ap.add_argument("model")
    ap.add_argument("out")
    ap.add_argument("--models", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    from art.attacks.inference.membership_inference import (
        MembershipInferenceBlackBox,
        MembershipInferenceBlackBoxRuleBased,
        ShadowModels,
    )
    from art.estimators.classification.scikitlearn import SklearnClassifier
    from art.utils import to_categorical

    d = np.load(args.data, allow_pickle=False)
    k = len(d["classes"])
    with open(args.model, "rb") as f:
        model = pickle.load(f)  # written by sklearn_peers.py in this run: trusted
    target = SklearnClassifier(model=model)
    x = np.vstack((d["members_x"], d["nonmembers_x"]))
    y = to_categorical(np.hstack((d["members_y"], d["nonmembers_y"])), k)
    scores, seconds, cpu = {}, {}, {}

    # the shadow data: the population (known non-members, as ART's documentation has it), or the audit rows
    # themselves (members and non-members, membership unknown: what privgate's and SACRO-ML's reference models
    # train on, each shadow model on as many rows as the target)
    for where, (sx, sy) in {
        "population": (d["population_x"], d["population_y"]),
        "audit rows": (x, np.hstack((d["members_y"], d["nonmembers_y"]))),
    }.items():
        t0, c0 = time.perf_counter(), time.process_time()
        np.random.seed(args.seed)  # ART's attack models draw from numpy's global generator
        shadow = ShadowModels(target, num_shadow_models=args.models, random_state=args.seed)  # clone_for_refitting
        (mx, my, mp), (nx, ny, npred) = shadow.generate_shadow_dataset(sx, to_categorical(sy, k))
        shadows, shadows_cpu = time.perf_counter() - t0, time.process_time() - c0
        for kind in ("rf", "gb"):
            name = f"ART shadow models on the {where} + black-box ({kind})"
            t1, c1 = time.perf_counter(), time.process_time()
            attack = MembershipInferenceBlackBox(target, input_type="prediction", attack_model_type=kind)
            attack.fit(mx, my, nx, ny, mp, npred)
            p = np.asarray(attack.infer(x, y, probabilities=True), dtype=np.float64)
            scores[name] = p.reshape(len(x), -1)[:, -1]
            seconds[name] = shadows + time.perf_counter() - t1
            cpu[name] = shadows_cpu + time.process_time() - c1
    name = "ART rule-based"
    t1, c1 = time.perf_counter(), time.process_time()
    # its decisions (member when the prediction is right): ART 1.20's probabilities=True for two classes writes the
    # same value into both columns of every row (prob[:, predicted_class] = …), a constant score
    scores[name] = np.asarray(MembershipInferenceBlackBoxRuleBased(target).infer(x, y), dtype=np.float64).reshape(-1)
    seconds[name], cpu[name] = time.perf_counter() - t1, time.process_time() - c1
    np.savez(args.out + ".npz", **scores)
    with open(args.out + ".json", "w") as f:
        json.dump({"seconds": seconds, "cpu": cpu}, f)


if __name__ == "__main__":
    main()
