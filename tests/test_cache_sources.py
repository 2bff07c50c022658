"""The reference-model cache key covers the code training runs, not only names (issue 41, item 7).

A project is written to disk as a user has it and audited twice on one cache: the second run must
load every model, and after an edit to a module the training reaches only indirectly — ``layers.py``
behind ``nets.py`` behind an import inside the training function, a relative import in a package,
an ``Augment``'s transform, a ``FunctionTransformer``'s function, a custom pipeline step — the
next run must train again. The CLI runs once per behaviour in a subprocess; the variants in process.
"""

from __future__ import annotations

import json
import os
import sys
import textwrap
from pathlib import Path
from typing import Any

import joblib
import numpy as np
import pytest
import torch
from cases import run_cli, synthetic

from privgate.io.sources import Uncovered, code_of, key_or_warning, project_sources

LAYERS = textwrap.dedent(
    """
    import torch
    from torch import nn


    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(20, 4)

        def forward(self, x):
            return self.fc(torch.relu(x))
    """
)
TRAIN = textwrap.dedent(
    """
    import torch
    from torch import nn


    def train(x, y, seed, device):
        import {nets}  # imported when the function runs: not among the module's globals

        torch.manual_seed(seed)
        net = {nets}.make_net()
        opt = torch.optim.Adam(net.parameters(), lr=1e-2)
        xt, yt = torch.as_tensor(x), torch.as_tensor(y)
        for _ in range(5):
            opt.zero_grad()
            nn.functional.cross_entropy(net(xt), yt).backward()
            opt.step()
        return net
    """
)
POLICY = textwrap.dedent(
    """
    name: cache-key
    sensitivity: internal
    release: model
    attacks:
      lira: {models: 4}
    checks:
      - {id: lira-auc, attack: lira, metric: auc, max: 0.999}
    """
)


def _project(d: Path, nets: str = "nets", layers: str = "layers") -> Path:
    """``train.py`` → (inside the function) ``nets.py`` → ``layers.py``, a TorchScript target and the audit data."""
    d.mkdir(parents=True, exist_ok=True)
    (d / f"{layers}.py").write_text(LAYERS)
    (d / f"{nets}.py").write_text(f"import {layers}\n\n\ndef make_net():\n    return {layers}.Block()\n")
    (d / "train.py").write_text(TRAIN.format(nets=nets))
    (d / "policy.yaml").write_text(POLICY)
    xm, ym = synthetic(60, seed=1, label_noise=0.5)
    xn, yn = synthetic(60, seed=2, label_noise=0.5)
    np.savez(d / "m.npz", x=xm, y=ym)
    np.savez(d / "n.npz", x=xn, y=yn)
    sys.path.insert(0, str(d))
    try:
        block = __import__(layers).Block()
    finally:
        sys.path.remove(str(d))
        sys.modules.pop(layers, None)
    torch.jit.save(torch.jit.script(block.eval()), str(d / "model.pt"))
    return d


def _edit(path: Path, old: str, new: str) -> None:
    """``old`` replaced by ``new`` in ``path``, dated two seconds after the file's last write, as a person's edit is.

    Python's bytecode cache knows a source by its size and its mtime in whole seconds: a same-size edit within
    the second of the first import (these tests take about a second) would import the old bytecode.
    """
    text = path.read_text()
    assert old in text
    before = path.stat().st_mtime
    path.write_text(text.replace(old, new))
    os.utime(path, (before + 2, before + 2))


def _lira(report: Any) -> dict[str, Any]:
    rows = report["attacks"] if isinstance(report, dict) else [a.model_dump() for a in report.attacks]
    return next(a for a in rows if a["name"] == "lira")


def test_the_cli_retrains_when_a_module_the_training_function_reaches_changes(tmp_path: Path) -> None:
    d = _project(tmp_path / "proj")

    def check() -> dict[str, Any]:
        r = run_cli(
            "check", "model.pt", "--policy", "policy.yaml", "--members", "m.npz", "--nonmembers", "n.npz",
            "--recipe", "train:train", "--cache-dir", str(tmp_path / "cache"), "--json", "r.json", "--quiet",
            cwd=d,
        )  # fmt: skip
        assert r.returncode in (0, 1, 3), r.stderr
        return _lira(json.loads((d / "r.json").read_text()))

    first, again = check(), check()
    assert (first["models_trained"], again["models_trained"], again["extras"]["models_from_cache"]) == (4, 0, 4)
    assert again["auc"] == first["auc"]
    _edit(d / "layers.py", "torch.relu(x)", "torch.tanh(x)")  # two imports away, one of them inside a function
    edited = check()
    assert (edited["models_trained"], edited["extras"]["models_from_cache"]) == (4, 0)
    assert edited["auc"] != first["auc"]  # other reference models, other numbers


def _fresh(*modules: str) -> None:
    """Forget the project's modules, as a new process would."""
    for m in modules:
        sys.modules.pop(m, None)


def _in_process(d: Path, recipe: str, cache: Path, modules: tuple[str, ...], model: str = "model.pt", **kw: Any) -> Any:
    from privgate import api

    _fresh(*modules)
    files = [str(d / f) for f in (model, "policy.yaml", "m.npz", "n.npz")]
    try:
        return _lira(api.check(*files, recipe=recipe, search_dirs=[d], cache_dir=str(cache), **kw))
    finally:
        _fresh(*modules)


def test_a_relative_import_in_a_package_is_followed(tmp_path: Path) -> None:
    """``pkg.trainer`` → ``from . import model`` (in the function) → ``from .layers import Block``: an edit to
    ``layers`` retrains (the engine's cache, in process: the audit around it is the CLI test's)."""
    from privgate.inputs.entrypoints import load_recipe
    from privgate.training.engine import train_ensemble
    from privgate.training.plan import model_seeds, paired_masks
    from privgate.training.trained import TrainSettings

    d = tmp_path / "proj"
    pkg = d / "ck_rel_pkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "layers.py").write_text(LAYERS)
    (pkg / "model.py").write_text("from .layers import Block\n\n\ndef make_net():\n    return Block()\n")
    (pkg / "trainer.py").write_text(TRAIN.replace("import {nets}  #", "from . import model  #").format(nets="model"))
    modules = ("ck_rel_pkg", "ck_rel_pkg.trainer", "ck_rel_pkg.model", "ck_rel_pkg.layers")
    x, y = synthetic(40, seed=3, label_noise=0.0)
    masks, seeds = paired_masks(40, 2, seed=0), model_seeds(0, 2)
    target = torch.nn.Module()  # the target's architecture the cached states load into (a Block's parameters)
    target.fc = torch.nn.Linear(20, 4)

    def trained() -> int:
        _fresh(*modules)
        try:
            recipe = load_recipe("ck_rel_pkg.trainer:train", [d])
            return train_ensemble(
                recipe, x, y, masks, seeds, TrainSettings(cache_dir=tmp_path / "cache"), architecture=target
            ).trained
        finally:
            _fresh(*modules)

    runs = [trained(), trained()]
    _edit(pkg / "layers.py", "torch.relu(x)", "torch.tanh(x)")
    assert [*runs, trained()] == [2, 0, 2]


def test_an_augment_transform_is_keyed_by_its_source(tmp_path: Path) -> None:
    """A recipe whose ``Augment(transform=jitter)`` lives in ``ck_aug.py``: editing the function's body retrains."""
    d = _project(tmp_path / "proj", nets="ck_aug_nets", layers="ck_aug_layers")
    (d / "ck_aug.py").write_text(
        "import torch\n\n\ndef jitter(batch, generator):\n"
        "    return batch + 0.05 * torch.randn(batch.shape, generator=generator).to(batch.device)\n"
    )
    (d / "ck_aug_recipe.py").write_text(
        "import ck_aug\nimport ck_aug_nets\nfrom privgate.recipe import Augment, Recipe\n\n"
        "RECIPE = Recipe(model_factory=ck_aug_nets.make_net, epochs=3, batch_size=32, lr=1e-2,\n"
        "                augment=Augment(transform=ck_aug.jitter), name='jitter')\n"
    )
    modules = ("ck_aug", "ck_aug_recipe", "ck_aug_nets", "ck_aug_layers")
    runs = [_in_process(d, "ck_aug_recipe:RECIPE", tmp_path / "cache", modules) for _ in range(2)]
    _edit(d / "ck_aug.py", "0.05 *", "0.5 *")  # the recipe's fields (names) are the same; the function is not
    runs.append(_in_process(d, "ck_aug_recipe:RECIPE", tmp_path / "cache", modules))
    assert [r["models_trained"] for r in runs] == [4, 0, 4]


STEPS = textwrap.dedent(
    """
    import numpy as np
    from sklearn.base import BaseEstimator, TransformerMixin


    class Clip(BaseEstimator, TransformerMixin):
        def __init__(self, bound=3.0):
            self.bound = bound

        def fit(self, X, y=None):
            return self

        def transform(self, X):
            return np.clip(X, -self.bound, self.bound)
    """
)


def test_a_pipelines_function_and_custom_step_are_keyed_by_their_source(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pickled pipeline (its own recipe: clones) with ``FunctionTransformer(func=ck_feats.scale)`` and the custom
    step ``ck_steps.Clip``: editing either module refits the clones; an unchanged project loads them."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import FunctionTransformer

    d = _project(tmp_path / "proj", nets="ck_sk_nets", layers="ck_sk_layers")
    (d / "ck_feats.py").write_text("def scale(x):\n    return x * 2.0\n")
    (d / "ck_steps.py").write_text(STEPS)
    modules = ("ck_feats", "ck_steps")
    monkeypatch.syspath_prepend(str(d))  # the project's modules the pickle names, importable as in the user's shell
    import ck_feats  # type: ignore[import-not-found]
    import ck_steps  # type: ignore[import-not-found]

    m = np.load(d / "m.npz")
    pipe = make_pipeline(FunctionTransformer(ck_feats.scale), ck_steps.Clip(), LogisticRegression(max_iter=300))
    joblib.dump(pipe.fit(m["x"], m["y"]), d / "model.joblib")

    def run() -> int:
        lira = _in_process(d, None, tmp_path / "cache", modules, model="model.joblib", trust_checkpoint=True)
        assert any("clones of the target" in n for n in lira["notes"])
        return lira["models_trained"]

    trained = [run(), run()]
    _edit(d / "ck_feats.py", "x * 2.0", "x * 3.0")
    trained.append(run())
    _edit(d / "ck_steps.py", "np.clip(X, -self.bound, self.bound)", "np.clip(X, -self.bound / 2, self.bound / 2)")
    trained.append(run())
    assert trained == [4, 0, 4, 4]


def test_the_walk_is_bounded_and_past_its_bounds_the_cache_is_skipped_with_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from privgate.inputs.entrypoints import load_recipe
    from privgate.io import sources
    from privgate.training.engine import train_ensemble
    from privgate.training.plan import model_seeds, paired_masks
    from privgate.training.trained import TrainSettings

    d = _project(tmp_path / "proj", nets="ck_bound_nets", layers="ck_bound_layers")
    monkeypatch.syspath_prepend(str(d))  # the function imports its network when it runs
    recipe = load_recipe("train:train", [d])
    try:
        covered = project_sources(code_of(recipe.train_fn))
        assert covered.files == ("ck_bound_layers.py", "ck_bound_nets.py", "train.py")
        assert [p.split()[0] for p in covered.packages] == ["torch"]
        with pytest.raises(Uncovered, match="more than 2 project files"):
            project_sources(code_of(recipe.train_fn), max_files=2)
        with pytest.raises(Uncovered, match="more than 100 bytes of project files"):
            project_sources(code_of(recipe.train_fn), max_bytes=100)
        monkeypatch.setattr(sources, "MAX_FILES", 2)
        key, warned = key_or_warning(lambda r: project_sources(code_of(r)).digest, recipe.train_fn)
        assert key == "" and "the reference-model cache was not used: it reaches more than 2 project files" in warned[0]
        x, y = synthetic(40, seed=3, label_noise=0.0)
        masks, seeds = paired_masks(40, 2, seed=0), model_seeds(0, 2)
        runs = [
            train_ensemble(recipe, x, y, masks, seeds, TrainSettings(cache_dir=tmp_path / "cache")) for _ in range(2)
        ]
    finally:
        _fresh("train", "ck_bound_nets", "ck_bound_layers")
    assert [(e.trained, e.cached) for e in runs] == [(2, 0), (2, 0)]
    assert runs[1].warnings == warned and not list((tmp_path / "cache").rglob("*.pt"))


def test_a_training_functions_cached_models_load_without_an_architecture(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A target that carries no torch module (ONNX, an endpoint) gives no architecture to check cached states
    against: they load (authenticated), model 0 is trained again for its architecture; it once raised TypeError."""
    from privgate.inputs.entrypoints import load_recipe
    from privgate.training.engine import train_ensemble
    from privgate.training.plan import model_seeds, paired_masks
    from privgate.training.trained import TrainSettings

    d = _project(tmp_path / "proj", nets="ck_arch_nets", layers="ck_arch_layers")
    monkeypatch.syspath_prepend(str(d))
    x, y = synthetic(40, seed=3, label_noise=0.0)
    masks, seeds = paired_masks(40, 2, seed=0), model_seeds(0, 2)
    try:
        recipe = load_recipe("train:train", [d])
        runs = [
            train_ensemble(recipe, x, y, masks, seeds, TrainSettings(cache_dir=tmp_path / "cache")) for _ in range(2)
        ]
    finally:
        _fresh("train", "ck_arch_nets", "ck_arch_layers")
    assert [(e.trained, e.cached) for e in runs] == [(2, 0), (1, 1)]
    assert "model 0 was trained again for its architecture" in " ".join(runs[1].notes)
    np.testing.assert_array_equal(runs[0].logits(x), runs[1].logits(x))
