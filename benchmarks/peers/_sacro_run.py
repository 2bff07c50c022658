"""SACRO-ML's LiRA on one target, run by ``benchmarks/peers/sklearn_peers.py`` in a venv that has SACRO-ML.

Never imported by privgate, and SACRO-ML is no dependency of privgate: the benchmark runs this file with the
interpreter given by ``--peer-python``. Usage::

    python _sacro_run.py IN.npz MODEL.pkl OUT_PREFIX [--models 16]

``IN.npz`` holds the rows as SACRO-ML takes them — the pipeline's encoded features (SACRO-ML's LiRA stacks
``X_train`` and ``X_test`` with numpy and fits each shadow model with ``set_params(random_state=i)``, which a
``Pipeline`` over a ``DataFrame`` does not take) — ``members_x``, ``members_y``, ``nonmembers_x``,
``nonmembers_y`` (labels as indices into ``classes``). ``MODEL.pkl`` is the fitted last step of the pipeline,
whose ``predict_proba`` on the encoded rows is the pipeline's. SACRO-ML trains its 16 shadow models once
(``utils.train_shadow_models``, exactly as ``LIRAAttack._run`` calls it: clones of the model, each fitted on
as many rows as the target's training set drawn from members and non-members together) and scores every
audit row with each of its LiRA variants on those shadow models (Carlini et al. 2022, arXiv 2112.03570):
``offline`` and ``online-carlini``, with per-record and with global variance. Writes ``OUT_PREFIX.npz``
(each variant's score of every member, then every non-member; higher = member) and ``OUT_PREFIX.json``
(each variant's wall and CPU seconds: the shared shadow training plus its own scoring).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import pickle
import tempfile
import time

import numpy as np

#: (mode, fix_variance) of every LiRA variant SACRO-ML 2.0 offers.
VARIANTS = (("offline", False), ("offline", True), ("online-carlini", False), ("online-carlini", True))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("data")
    ap.add_argument("model")
    ap.add_argument("out")
    ap.add_argument("--models", type=int, default=16)
    args = ap.parse_args()
    logging.disable(logging.INFO)  # SACRO-ML logs every step at INFO
    from sacroml.attacks import utils
    from sacroml.attacks.likelihood_attack import LIRAAttack
    from sacroml.attacks.target import Target

    d = np.load(args.data, allow_pickle=False)
    classes = d["classes"]
    with open(args.model, "rb") as f:
        model = pickle.load(f)  # written by sklearn_peers.py in this run: trusted

    def target() -> Target:  # a fresh one per attack: SACRO-ML re-indexes its labels in place
        return Target(
            model=model,
            X_train=d["members_x"],
            y_train=classes[d["members_y"]],
            X_test=d["nonmembers_x"],
            y_test=classes[d["nonmembers_y"]],
        )

    n = len(d["members_y"]) + len(d["nonmembers_y"])
    scores, seconds, cpu = {}, {}, {}
    with tempfile.TemporaryDirectory(prefix="sacro-") as work:
        t0, c0 = time.perf_counter(), time.process_time()
        os.makedirs(f"{work}/shadow_models")
        prepared = utils.check_and_update_dataset(target())
        assert len(prepared.y_test) == len(d["nonmembers_y"]), "SACRO-ML dropped non-members of unseen classes"
        utils.train_shadow_models(
            shadow_clf=prepared.model.clone(),
            combined_x_train=np.vstack((prepared.X_train, prepared.X_test)),
            combined_y_train=np.hstack((prepared.y_train, prepared.y_test)),
            n_train_rows=len(prepared.X_train),
            n_shadow_models=args.models,
            shadow_path=f"{work}/shadow_models",
        )
        shadows, shadows_cpu = time.perf_counter() - t0, time.process_time() - c0
        for mode, fixed in VARIANTS:
            name = f"SACRO-ML LiRA {mode}{', global variance' if fixed else ''}"
            attack = LIRAAttack(
                output_dir=work, write_report=False, n_shadow_models=args.models, mode=mode, fix_variance=fixed,
                report_individual=True,
            )  # fmt: skip
            t1, c1 = time.perf_counter(), time.process_time()
            attack.attack(target())  # finds the shadow models trained above, as a second run of SACRO-ML would
            s = np.asarray(attack.result["member_prob"], dtype=np.float64)
            assert s.shape == (n,), (name, s.shape)
            scores[name] = s
            seconds[name] = shadows + time.perf_counter() - t1
            cpu[name] = shadows_cpu + time.process_time() - c1
    np.savez(args.out + ".npz", **scores)
    with open(args.out + ".json", "w") as f:
        json.dump({"seconds": seconds, "cpu": cpu}, f)


if __name__ == "__main__":
    main()
