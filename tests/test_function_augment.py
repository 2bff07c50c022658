"""A training-function recipe on images says when it declares no augmentation (issue 42, item 6).

``--recipe trainer:train`` whose loop crops and flips once ran LiRA and RMIA on the unaugmented images
without a word: privgate cannot see inside the loop. The report (JSON and console) now warns, naming how to
declare it; a recipe that declares ``augment`` (``Recipe(train_fn=train, augment=Augment(…))``) does not warn.
"""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import numpy as np
import torch
from cases import run_cli

TRAINER = textwrap.dedent(
    """
    import torch
    from torch import nn

    from privgate.recipe import Augment, Recipe


    def make_net():
        return nn.Sequential(nn.Flatten(), nn.Linear(36, 3))


    def train(x, y, seed, device):
        torch.manual_seed(seed)
        net = make_net()
        opt = torch.optim.Adam(net.parameters(), lr=1e-2)
        xt, yt = torch.as_tensor(x), torch.as_tensor(y)
        for _ in range(3):
            batch = torch.where(torch.rand(len(xt), 1, 1, 1) < 0.5, xt.flip(-1), xt)  # the loop flips
            opt.zero_grad()
            nn.functional.cross_entropy(net(batch), yt).backward()
            opt.step()
        return net


    DECLARED = Recipe(train_fn=train, augment=Augment(flip=True), name="declared")
    """
)
POLICY = textwrap.dedent(
    """
    name: augment
    sensitivity: internal
    release: model
    attacks:
      lira: {models: 4}
    checks:
      - {id: lira-auc, attack: lira, metric: auc, max: 0.999}
    """
)
WORDS = "recipe 'ck_aug_trainer:train' is a training function that declares no augmentation, so lira queried each image"


def _project(d: Path) -> Path:
    (d / "ck_aug_trainer.py").write_text(TRAINER)
    (d / "policy.yaml").write_text(POLICY)
    rng = np.random.default_rng(0)
    for name, n in (("m", 40), ("n", 40)):
        np.savez(d / f"{name}.npz", x=rng.normal(size=(n, 1, 6, 6)).astype(np.float32), y=rng.integers(0, 3, n))
    sys.path.insert(0, str(d))
    try:
        import ck_aug_trainer  # type: ignore[import-not-found]

        m = np.load(d / "m.npz")
        net = ck_aug_trainer.train(m["x"], m["y"], 0, "cpu").eval()
    finally:
        sys.path.remove(str(d))
    torch.jit.save(torch.jit.script(net), str(d / "model.pt"))
    return d


def test_a_training_function_without_augment_is_told_how_to_declare_it_and_a_declared_one_is_not(
    tmp_path: Path,
) -> None:
    from privgate import api

    d = _project(tmp_path)
    try:
        r = run_cli(
            "check", "model.pt", "--policy", "policy.yaml", "--members", "m.npz", "--nonmembers", "n.npz",
            "--recipe", "ck_aug_trainer:train", "--cache-dir", "off", "--json", "r.json", cwd=d,
        )  # fmt: skip
        assert r.returncode in (0, 1, 3), r.stderr
        warnings = json.loads((d / "r.json").read_text())["warnings"]
        said = [w for w in warnings if WORDS in w]
        assert len(said) == 1 and "Recipe(train_fn=train, augment=Augment(crop_padding=4, flip=True))" in said[0]
        assert WORDS in " ".join(r.stdout.split())  # the console's warning lines
        declared = api.check(str(d / "model.pt"), str(d / "policy.yaml"), str(d / "m.npz"), str(d / "n.npz"),
                             recipe="ck_aug_trainer:DECLARED", search_dirs=[d], cache_dir="off")  # fmt: skip
    finally:
        sys.modules.pop("ck_aug_trainer", None)
    lira = next(a for a in declared.attacks if a.name == "lira")
    assert lira.status == "ran" and lira.extras["augmented_queries"] == ["identity", "mirror"]
    assert not [w for w in declared.warnings if "declares no augmentation" in w]
