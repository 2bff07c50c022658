"""ONNX graphs and boosted-tree files as targets, through the CLI in a subprocess.

* the ONNX export of a torch model gives the report numbers of its TorchScript (both files audited in process,
  ``tests/inproc.py``: the CLI's report, see ``test_front_door.py``; the point is that the numbers are equal);
* a memorising XGBoost model saved as JSON fails a LiRA check whose reference models are trained by a
  TreeRecipe (same library and parameters), without --trust-checkpoint; UBJSON and LightGBM text load too;
* a wrong row shape or a regression objective is one sentence and exit 2.
"""

from __future__ import annotations

import json
import textwrap
import warnings
from pathlib import Path

import inproc
import numpy as np
import pytest
from cases import run_cli

pytest.importorskip("onnxruntime")
xgb = pytest.importorskip("xgboost")

THRESHOLDS = textwrap.dedent(
    """
    name: thresholds
    sensitivity: internal
    release: api
    confidence: 0.95
    attacks:
      loss: {}
      confidence: {}
      entropy: {}
      modified_entropy: {class_dependent: true}
    checks:
      - id: mia-auc
        attack: best
        metric: auc
        max: 0.5
    """
)

LIRA = textwrap.dedent(
    """
    name: trees
    sensitivity: internal
    release: api
    confidence: 0.95
    attacks:
      loss: {}
      lira: {models: 8}
    checks:
      - id: lira-auc
        attack: lira
        metric: auc
        max: 0.65
    """
)

RECIPE = textwrap.dedent(
    """
    from privgate import TreeRecipe

    RECIPE = TreeRecipe(
        "xgboost",
        {"objective": "multi:softprob", "num_class": 10, "max_depth": 8, "eta": 0.5, "min_child_weight": 0,
         "lambda": 0},
        rounds=30,
        name="xgb-digits",
    )
    """
)


@pytest.fixture(scope="module")
def digits(tmp_path_factory) -> Path:
    """Digits split into 300 members and 300 non-members, as .npz files."""
    from sklearn.datasets import load_digits

    d = tmp_path_factory.mktemp("served-files")
    x, y = load_digits(return_X_y=True)
    x = (x / 16).astype(np.float32)
    p = np.random.default_rng(0).permutation(len(x))
    np.savez(d / "members.npz", x=x[p[:300]], y=y[p[:300]])
    np.savez(d / "nonmembers.npz", x=x[p[300:600]], y=y[p[300:600]])
    (d / "thresholds.yaml").write_text(THRESHOLDS)
    (d / "trees.yaml").write_text(LIRA)
    (d / "tree_recipe.py").write_text(RECIPE)
    return d


def _check(d: Path, model: str, policy: str, out: str, *extra: str):
    res = run_cli(
        "check", model, "--policy", policy, "--members", "members.npz", "--nonmembers", "nonmembers.npz",
        "--cache-dir", "off", "--json", out, "-q", *extra, cwd=d,
    )  # fmt: skip
    return res, (json.loads((d / out).read_text()) if (d / out).exists() else None)


def _check_in_process(d: Path, model: str, policy: str):  # noqa: ANN202
    """``_check(d, model, policy, …)`` in process (no cache, as there): the report and its JSON, parsed."""
    report = inproc.check(d / model, d / policy, d / "members.npz", d / "nonmembers.npz")
    return report, json.loads(inproc.render(report, "json")["json"])


def test_onnx_export_gives_the_numbers_of_the_torchscript(digits):
    import torch

    members = np.load(digits / "members.npz")
    xt, yt = torch.tensor(members["x"]), torch.tensor(members["y"])
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    opt = torch.optim.Adam(net.parameters(), 1e-2)
    for _ in range(150):  # memorises the 300 members
        opt.zero_grad()
        torch.nn.functional.cross_entropy(net(xt), yt).backward()
        opt.step()
    net.eval()
    torch.jit.save(torch.jit.trace(net, xt[:2]), str(digits / "net.pt"))
    with warnings.catch_warnings():  # the TorchScript-based exporter: no onnxscript needed
        warnings.simplefilter("ignore")
        torch.onnx.export(
            net, (xt[:2],), str(digits / "net.onnx"), dynamo=False, input_names=["pixels"],
            output_names=["logits"], dynamic_axes={"pixels": {0: "n"}, "logits": {0: "n"}},
        )  # fmt: skip

    ts_res, ts = _check_in_process(digits, "net.pt", "thresholds.yaml")
    ox_res, ox = _check_in_process(digits, "net.onnx", "thresholds.yaml")
    assert ts_res.exit_code == ox_res.exit_code == 1, ox_res.summary  # the memorising MLP fails AUC <= 0.5
    assert ox["target"]["format"] == "onnx" and ox["target"]["white_box"] is False
    assert ox["target"]["onnx"] == {"input": "pixels", "input_type": "tensor(float)", "output": "logits"}
    assert ox["target"]["outputs_read_as"] == "logits"
    assert ox["verdict"] == ts["verdict"] == "fail"
    assert [c["id"] for c in ox["checks"]] == [c["id"] for c in ts["checks"]]
    for a, b in zip(ox["checks"], ts["checks"]):
        assert a["value"] == pytest.approx(b["value"], abs=1e-9) and a["status"] == b["status"]
        assert a["ci"] == pytest.approx(b["ci"], abs=1e-9)
    aucs = {a["name"]: a["auc"] for a in ts["attacks"]}
    assert {a["name"]: a["auc"] for a in ox["attacks"]} == pytest.approx(aucs, abs=1e-9)
    assert max(aucs.values()) > 0.55  # what made it fail

    # a graph fed rows of the wrong width: one sentence naming the input (a TargetError: exit 2 in the CLI)
    import privgate
    from privgate.errors import TargetError

    wide = [
        (np.pad(s["x"], ((0, 0), (0, 2))), s["y"])
        for s in map(np.load, (digits / "members.npz", digits / "nonmembers.npz"))
    ]
    with pytest.raises(
        TargetError,
        match=r"input 'pixels' takes rows of shape \(64,\), the audit data has rows of "
        r"shape \(66,\)",
    ):
        privgate.check(str(digits / "net.onnx"), str(digits / "thresholds.yaml"), *wide, cache_dir="off")


def test_memorising_xgboost_fails_lira_with_tree_recipe(digits):
    import importlib
    import sys

    sys.path.insert(0, str(digits))
    try:
        recipe = importlib.import_module("tree_recipe").RECIPE
    finally:
        sys.path.remove(str(digits))
    members = np.load(digits / "members.npz")
    booster = recipe.train(members["x"], members["y"], seed=1)
    booster.save_model(str(digits / "model.json"))
    booster.save_model(str(digits / "model.ubj"))

    res, rep = _check(digits, "model.json", "trees.yaml", "xgb.json", "--recipe", "tree_recipe:RECIPE")
    assert res.returncode == 1, res.stderr  # no --trust-checkpoint: JSON is no pickle
    assert rep["target"]["format"] == "xgboost" and rep["target"]["objective"] == "multi:softprob"
    (check,) = rep["checks"]
    assert check["status"] == "fail" and check["ci"][0] > 0.65  # LiRA's AUC: ~0.83 on 150 + 150 evaluation rows
    lira = next(a for a in rep["attacks"] if a["name"] == "lira")
    loss = next(a for a in rep["attacks"] if a["name"] == "loss")
    assert lira["models_trained"] == 8 and lira["extras"]["kernel"] == "xgboost"
    assert lira["auc"] > loss["auc"]  # reference models trained like the target beat a global threshold
    assert not [w for w in rep["warnings"] if "recipe mismatch" in w]

    # the UBJSON file of the same booster is the same model; a recipe of the other library is refused
    from privgate import Target

    x = members["x"][:50]
    np.testing.assert_allclose(
        Target.load(digits / "model.ubj").log_proba(x), Target.load(digits / "model.json").log_proba(x)
    )
    import privgate
    from privgate import TreeRecipe
    from privgate.errors import RecipeError

    other = TreeRecipe("lightgbm", {"objective": "multiclass", "num_class": 10}, rounds=5)
    with pytest.raises(RecipeError, match="trains lightgbm models but the target is a xgboost model"):
        privgate.check(
            str(digits / "model.ubj"), str(digits / "trees.yaml"), str(digits / "members.npz"),
            str(digits / "nonmembers.npz"), recipe=other, cache_dir="off",
        )  # fmt: skip


def test_lightgbm_text_model_and_refused_objectives(digits, tmp_path):
    lgb = pytest.importorskip("lightgbm")
    from privgate import Target
    from privgate.errors import TargetError

    members = np.load(digits / "members.npz")
    x, y = members["x"], (members["y"] > 4).astype(int)
    booster = lgb.train({"objective": "binary", "verbose": -1, "num_threads": 1}, lgb.Dataset(x, y), 20)
    path = tmp_path / "model.txt"
    booster.save_model(str(path))
    t = Target.load(path)
    assert (t.fmt, t.white_box, t.describe()["outputs_read_as"]) == ("lightgbm", False, "binary-logit")
    p = t.predict_proba(x[:20])
    np.testing.assert_allclose(p[:, 1], booster.predict(x[:20]), rtol=1e-9)  # margins read as σ(z)
    from privgate.inputs.coerce import as_target

    in_memory = as_target(booster)  # the Booster object itself, as the pytest assertions take it
    assert in_memory.fmt == "lightgbm" and np.allclose(in_memory.predict_proba(x[:20]), p)

    reg = xgb.train({"objective": "reg:squarederror", "nthread": 1}, xgb.DMatrix(x, label=y), 3)
    reg.save_model(str(tmp_path / "reg.json"))
    with pytest.raises(TargetError, match="objective is 'reg:squarederror', not a classifier's"):
        Target.load(tmp_path / "reg.json")
