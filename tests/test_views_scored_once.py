"""Augmented queries bounded and scored once (issue 41 item 12, issue 43 items 1 and 2).

* Views and forward passes of large images go a byte-bounded number of rows
  at a time, and a bad ``crop_padding`` (negative, huge, fractional, a flag) is
  one sentence and exit 2 through the CLI.
* Every reference model runs once per view over the audit rows and the
  z-samples, whatever reads them (LiRA, then RMIA): the rows its network sees
  are counted, and the report's ``reference_passes`` says 1.
* ``augmented_queries: 2 | 18 | 50 | false`` picks the grid of views.
"""

from __future__ import annotations

import dataclasses
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from cases import run_cli
from test_augmented_queries import context, images  # noqa: F401  (the augmented digits and their context)

from privgate import Recipe
from privgate.recipe import Augment

BAD_RECIPES = textwrap.dedent(
    """
    from torch import nn
    from privgate.recipe import Augment, Recipe


    def cnn():
        return nn.Sequential(
            nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(64, 10)
        )


    def _bad(padding):
        recipe = Recipe(model_factory=cnn, epochs=1, augment=Augment(crop_padding=2, flip=True), name="bad")
        recipe.augment = Augment(crop_padding=padding, flip=True)  # changed after the recipe was checked
        return recipe


    def negative():
        return _bad(-2)


    def huge():
        return _bad(10**9)


    def fractional():
        return _bad(1.5)


    def flag():
        return _bad(True)
    """
)


def test_the_slab_of_large_images_is_bounded_in_bytes() -> None:
    from privgate.training.augment import SLAB_BYTES, slab_rows

    rows = slab_rows((3, 512, 512), padding=2, most=4096)
    assert rows >= 1 and rows * 4 * 3 * 516 * 516 <= SLAB_BYTES < (rows + 1) * 4 * 3 * 516 * 516
    assert rows == 21  # not 4,096 rows (12.9 GB a slab)
    assert slab_rows((3, 32, 32), padding=2, most=4096) == 4096  # small images: the batches of before
    assert slab_rows((3, 8192, 8192), padding=4) == 1  # never less than one row


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ("negative", "augment.crop_padding must be a whole number of pixels >= 0, got -2."),
        ("huge", "augment.crop_padding 1000000000 must be smaller than the images' height and width (8, 8)."),
        ("fractional", "augment.crop_padding must be a whole number of pixels >= 0, got 1.5."),
        ("flag", "augment.crop_padding must be a whole number of pixels >= 0, got True."),
    ],
)
def test_a_bad_crop_padding_is_one_sentence_and_exit_2(images: Path, tmp_path: Path, spec: str, words: str) -> None:  # noqa: F811
    for f in ("model.pt", "members.npz", "nonmembers.npz", "population.npz", "policy.yaml"):
        (tmp_path / f).write_bytes((images / f).read_bytes())
    (tmp_path / "bad_recipes.py").write_text(BAD_RECIPES)
    r = run_cli(
        "check", "model.pt", "--policy", "policy.yaml", "--members", "members.npz", "--nonmembers",
        "nonmembers.npz", "--population", "population.npz", "--recipe", f"bad_recipes:{spec}", "--cache-dir", "off",
        "--quiet",
        cwd=tmp_path,
    )  # fmt: skip
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip() == f"error: recipe 'bad': {words}"


def test_the_setting_picks_the_grid_of_views() -> None:
    from privgate.attacks.views import check_option, query_views, views_for

    both = Augment(crop_padding=2, flip=True)
    assert views_for(both).names == ["identity", "mirror"] and views_for(both, 2).shift == 0
    eighteen, fifty = views_for(both, 18), views_for(both, 50)
    assert len(eighteen) == 18 and eighteen.shift == 1 and len(fifty) == 50 and fifty.shift == 2
    assert {(v.dy, v.dx) for v in fifty} == {(a, b) for a in range(-2, 3) for b in range(-2, 3)}  # RMIA's 50
    assert "shifts of up to ±2 px in steps of 1" in fifty.describe()
    assert (
        len(views_for(Augment(crop_padding=8, flip=True), 50)) == 50
        and views_for(Augment(crop_padding=8), 50).shift == 4
    )
    assert len(views_for(Augment(crop_padding=1, flip=True), 50)) == 18  # a 1 px crop has no 5×5 grid within it
    assert len(views_for(Augment(crop_padding=2))) == 9  # a recipe that only crops: its 3×3 shifts by default
    x = np.zeros((3, 1, 8, 8), np.float32)
    views, notes = query_views(Recipe(model_factory=lambda: None, augment=Augment(crop_padding=2)), x, 2)
    assert views is None and "gives only the identity for a recipe that does not flip" in notes[0]
    views, notes = query_views(Recipe(model_factory=lambda: None, augment=Augment(crop_padding=1, flip=True)), x, 50)
    assert len(views) == 18 and notes == ["augmented_queries: 50 asks 50 views; the recipe's augment gives 18 of them"]
    for bad in (3, 0, "18", 18.0, None):
        with pytest.raises(ValueError, match="must be true, false, 2, 18 or 50"):
            check_option(bad)


def test_each_reference_model_is_scored_once_per_view(context: Any, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    from privgate.attacks.lira import LiRAAttack
    from privgate.attacks.reference import build_references
    from privgate.attacks.rmia import RMIAAttack
    from privgate.training.ensemble import TorchReader

    build_references(context, 4)  # the module's four models (trained once), read afresh below: no outputs kept
    trained = context.ensembles[4]
    afresh = dataclasses.replace(trained, reader=dataclasses.replace(trained.reader, _outputs={}))
    ctx = dataclasses.replace(context, ensembles={4: afresh})
    seen = {"rows": 0}
    made = TorchReader._model

    def counted(self: TorchReader) -> Any:
        net = made(self)
        net.register_forward_hook(lambda mod, inp, out: seen.__setitem__("rows", seen["rows"] + len(inp[0])))
        return net

    monkeypatch.setattr(TorchReader, "_model", counted)
    lira = LiRAAttack(models=4, augmented_queries=18).run(ctx)
    rmia = RMIAAttack(models=4, min_population=50, z_samples=60, augmented_queries=18).run(ctx)
    n, m = len(ctx.y), 60
    assert seen["rows"] == 4 * 18 * (n + m)  # each model once per view: the audit rows (LiRA), the z-samples (RMIA)
    assert lira.extras["reference_passes"] == {"audit_rows": 1}
    assert rmia.extras["reference_passes"] == {"audit_rows": 1, "z_samples": 1}
