"""Augmented queries (issue 35, item 3): LiRA and RMIA ask every model the same fixed views of each image.

The views are checked against an independent numpy construction (pad, slice,
mirror); LiRA's scores against per-view Gaussians computed by hand from the
same models (Carlini et al. 2022, §V), RMIA's against view-averaged likelihood
ratios; the report lists the views; a recipe without augmentation, or
``augmented_queries: false``, queries once (reports as before); and the CLI runs
it end to end in a subprocess.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import inproc
import numpy as np
import pytest
from cases import run_cli
from conftest import built_once
from torch import nn

from privgate import Recipe, train_model
from privgate.recipe import Augment

pytest_plugins = ["pytester"]

RECIPE_SOURCE = textwrap.dedent(
    """
    from torch import nn
    from privgate.recipe import Augment, Recipe


    def cnn():
        return nn.Sequential(
            nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(64, 10)
        )


    RECIPE = Recipe(model_factory=cnn, epochs=6, batch_size=32, lr=0.05, optimizer="sgd", momentum=0.9,
                    schedule="cosine", augment=Augment(crop_padding=2, flip=True), name="digits-cnn-augmented")
    PLAIN = Recipe(model_factory=cnn, epochs=6, batch_size=32, lr=0.05, optimizer="sgd", momentum=0.9,
                   name="digits-cnn-plain")
    """
)

POLICY = textwrap.dedent(
    """
    name: views
    sensitivity: internal
    release: model
    confidence: 0.95
    attacks:
      lira: {models: 4}
      rmia: {models: 4, min_population: 50}
    checks:
      - {id: lira-auc, attack: lira, metric: auc, max: 0.99}
    """
)


def cnn() -> nn.Module:
    return nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(64, 10))


def _write(d: Path) -> Path:
    import torch
    from sklearn.datasets import load_digits

    digits = load_digits()
    x = (digits.images / 16.0).astype(np.float32)[:, None]
    y = digits.target.astype(np.int64)
    p = np.random.default_rng(0).permutation(len(x))
    (d / "digits_recipe.py").write_text(RECIPE_SOURCE)
    (d / "policy.yaml").write_text(POLICY)
    for name, rows in (("members", p[:200]), ("nonmembers", p[200:400]), ("population", p[400:460])):
        np.savez(d / f"{name}.npz", x=x[rows], y=y[rows])
    recipe = Recipe(model_factory=cnn, epochs=6, batch_size=32, lr=0.05, optimizer="sgd", momentum=0.9,
                    schedule="cosine", augment=Augment(crop_padding=2, flip=True))  # fmt: skip
    torch.save(train_model(recipe, x[p[:200]], y[p[:200]], seed=1).state_dict(), d / "model.pt")
    return d


@pytest.fixture(scope="session")
def images(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return built_once(tmp_path_factory, "augmented-images", _write)


def _check(d: Path, policy: str, recipe: str = "digits_recipe:RECIPE", **kw: Any) -> Any:
    return inproc.check(
        d / "model.pt", policy, d / "members.npz", d / "nonmembers.npz", population=str(d / "population.npz"),
        recipe=recipe, search_dirs=[d], **kw,
    )  # fmt: skip


def _attack(report: Any, name: str) -> Any:
    return next(a for a in report.attacks if a.name == name)


# --------------------------------------------------------------------------- the views


def test_the_views_of_crops_and_flips_are_the_papers_eighteen_and_what_numpy_makes() -> None:
    from privgate.attacks.views import views_for

    views = views_for(Augment(crop_padding=4, flip=True), 18)
    assert views is not None and len(views) == 18 and views.shift == 2
    assert views.names[:3] == ["identity", "shift(-2,-2)", "shift(-2,+0)"] and views.names[9] == "mirror"
    assert views.names[-1] == "mirror+shift(+2,+2)"
    assert len(views_for(Augment(flip=True))) == 2 and len(views_for(Augment(crop_padding=1))) == 9
    assert views_for(Augment(crop_padding=4, flip=True)).names == ["identity", "mirror"]  # the default: LiRA's two
    assert views_for(Augment(transform=lambda b, g: b)) is None and views_for(None) is None

    x = np.random.default_rng(0).normal(size=(5, 2, 7, 6)).astype(np.float32)
    padded = np.pad(x, ((0, 0), (0, 0), (2, 2), (2, 2)))
    for view in views:
        want = padded[:, :, 2 + view.dy : 2 + view.dy + 7, 2 + view.dx : 2 + view.dx + 6]
        if view.flip:  # the window read right to left: the mirror of the shifted crop
            want = np.pad(x[..., ::-1], ((0, 0), (0, 0), (2, 2), (2, 2)))[:, :, 2 + view.dy : 9 + view.dy]
            want = want[..., 2 - view.dx : 8 - view.dx]
        assert np.array_equal(views.apply(view, x), want), view.name
    assert views.apply(views.views[0], x) is x  # the identity is the rows themselves (their outputs are shared)
    reflect = views_for(Augment(crop_padding=2, padding_mode="reflect"), 18)
    edge = reflect.apply(next(v for v in reflect if v.name == "shift(-1,+0)"), x)
    assert np.array_equal(edge[:, :, 0], x[:, :, 1]) and np.array_equal(edge[:, :, 1:], x[:, :, :-1])


# --------------------------------------------------------------------------- the attacks' numbers


@pytest.fixture(scope="module")
def context(images: Path) -> Any:
    """An attack context on the pooled audit rows (as the gate builds it), with the augmented recipe."""
    import torch

    from privgate import AuditData, Dataset, RunOptions, Target
    from privgate.attacks.base import AttackContext
    from privgate.gate import audit_rows

    parts = {k: np.load(images / f"{k}.npz") for k in ("members", "nonmembers", "population")}
    data = AuditData(*(Dataset(parts[k]["x"], parts[k]["y"]) for k in ("members", "nonmembers", "population")))
    rows = audit_rows(data, 0)
    net = cnn()
    net.load_state_dict(torch.load(images / "model.pt", weights_only=True))
    target = Target(net.eval())
    target.detect_outputs(rows.x)
    recipe = Recipe(model_factory=cnn, epochs=6, batch_size=32, lr=0.05, optimizer="sgd", momentum=0.9,
                    schedule="cosine", augment=Augment(crop_padding=2, flip=True))  # fmt: skip
    ctx = AttackContext(target, rows.x, rows.y, data.population, recipe, run=RunOptions(cache_dir="off"))
    ctx.planned_models = 4
    return ctx


def _by_hand(ctx: Any) -> tuple[Any, list[np.ndarray]]:
    """The 18 views of the audit rows made with numpy alone, and the reference models (built once, shared)."""
    from privgate.attacks.reference import build_references

    refs = build_references(ctx, 4, z_samples=60)
    x = ctx.x
    out = []
    for flip in (False, True):
        base = x[..., ::-1] if flip else x
        padded = np.pad(base, ((0, 0), (0, 0), (1, 1), (1, 1)))
        for dy, dx in [(0, 0)] + [(a, b) for a in (-1, 0, 1) for b in (-1, 0, 1) if (a, b) != (0, 0)]:
            dx = -dx if flip else dx
            out.append(np.ascontiguousarray(padded[:, :, 1 + dy : 9 + dy, 1 + dx : 9 + dx]))
    return refs, out


def test_lira_fits_one_gaussian_per_view_and_averages_the_log_likelihood_ratios(context: Any) -> None:
    from privgate.attacks.lira import LiRAAttack, lira_scores
    from privgate.attacks.reference import logit_confidence

    refs, views = _by_hand(context)
    result = LiRAAttack(models=4, augmented_queries=18).run(context)
    want = np.mean(
        [
            lira_scores(
                context.target.map_rows(v, context.y, logit_confidence),
                refs.per_row(logit_confidence, v),
                refs.inside,
                online=True,
                fixed_variance=True,
            )
            for v in views
        ],
        axis=0,
    )
    np.testing.assert_allclose(result.scores, want, rtol=1e-9, atol=1e-9)
    plain = LiRAAttack(models=4, augmented_queries=False).run(context)
    assert not np.allclose(plain.scores, result.scores)  # the augmented queries change the scores
    assert result.extras["augmented_queries"][:2] == ["identity", "shift(-1,-1)"]
    assert len(result.extras["augmented_queries"]) == 18 and "augmented_queries" not in plain.extras
    assert plain.options["augmented_queries"] is False and result.options["augmented_queries"] == 18


def test_rmia_averages_the_likelihood_ratio_over_the_views(context: Any) -> None:
    from privgate.attacks.rmia import RMIAAttack, offline_px, rmia_scores, tempered_true_class

    refs, views = _by_hand(context)
    zx, zy = refs.z_x, refs.z_y
    zviews = []
    for flip in (False, True):
        base = zx[..., ::-1] if flip else zx
        padded = np.pad(base, ((0, 0), (0, 0), (1, 1), (1, 1)))
        for dy, dx in [(0, 0)] + [(a, b) for a in (-1, 0, 1) for b in (-1, 0, 1) if (a, b) != (0, 0)]:
            dx = -dx if flip else dx
            zviews.append(np.ascontiguousarray(padded[:, :, 1 + dy : 9 + dy, 1 + dx : 9 + dx]))

    def p(lp: np.ndarray, y: np.ndarray) -> np.ndarray:
        return tempered_true_class(lp, y, 2.0)

    a = 0.4
    rx, rz = 0.0, 0.0
    for v, zv in zip(views, zviews):
        p_ref, pz_ref = refs.per_row(p, v), refs.z_per_row(p, zv)
        px = offline_px(np.where(~refs.inside, p_ref, 0).sum(0) / (~refs.inside).sum(0), a)
        rx = rx + context.target.map_rows(v, context.y, p) / px
        rz = rz + context.target.map_rows(zv, zy, p) / offline_px(pz_ref.mean(0), a)
    want = rmia_scores(np.log(rx / 18), np.log(rz / 18), 1.0)
    result = RMIAAttack(models=4, a=a, min_population=50, z_samples=60, augmented_queries=18).run(context)
    np.testing.assert_allclose(result.scores, want, rtol=1e-9, atol=1e-12)
    auto = RMIAAttack(models=4, min_population=50, z_samples=60, augmented_queries=18).run(context)
    assert set(auto.extras["a_calibration_auc"]) == {str(g) for g in np.round(np.linspace(0, 1, 21), 2)}
    plain = RMIAAttack(models=4, a=a, min_population=50, z_samples=60, augmented_queries=False).run(context)
    assert not np.allclose(plain.scores, result.scores)
    assert any("averaged over them" in n for n in result.notes)


# --------------------------------------------------------------------------- reports


def test_the_report_lists_the_views_and_a_plain_recipe_queries_once(images: Path, tmp_path: Path) -> None:
    off = tmp_path / "off.yaml"
    off.write_text(POLICY.replace("{models: 4}", "{models: 4, augmented_queries: false}").replace(
        "min_population: 50}", "min_population: 50, augmented_queries: false}"))  # fmt: skip
    cache = str(tmp_path / "cache")
    on = _check(images, str(images / "policy.yaml"), cache_dir=cache)
    once = _check(images, str(off), cache_dir=cache)
    plain = _check(images, str(images / "policy.yaml"), recipe="digits_recipe:PLAIN", cache_dir=cache)
    for name in ("lira", "rmia"):
        a, b, c = _attack(on, name), _attack(once, name), _attack(plain, name)
        assert a.extras["augmented_queries"] == ["identity", "mirror"] and b.extras["models_from_cache"] == 4
        assert "augmented_queries" not in a.options  # the default (2 views when the recipe flips) is not listed
        assert (a.auc, a.roc) != (b.auc, b.roc)  # the same reference models, other scores
        assert "no augmented queries (augmented_queries: false)" in " ".join(b.notes)
        assert "augmented_queries" not in c.extras and "augmented" not in " ".join(c.notes)
        assert "augmented_queries" not in c.options
    lira = next(a for a in json.loads(inproc.render(on, "json")["json"])["attacks"] if a["name"] == "lira")
    assert "2 fixed augmentations of each example (identity, mirrored)" in " ".join(lira["notes"])


def test_rows_that_are_not_images_are_queried_once_with_a_note(tmp_path: Path) -> None:
    from privgate.attacks.views import query_views

    recipe = Recipe(model_factory=cnn, augment=Augment(crop_padding=2, flip=True))
    views, notes = query_views(recipe, np.zeros((4, 64), np.float32), True)
    assert views is None and "not images [C, H, W]" in notes[0]
    views, notes = query_views(
        Recipe(model_factory=cnn, augment=Augment(transform=_noise)), np.zeros((4, 1, 8, 8)), True
    )
    assert views is None and "only its own transform" in notes[0]
    assert query_views(Recipe(model_factory=cnn), np.zeros((4, 1, 8, 8)), True) == (None, [])


def _noise(batch: Any, generator: Any) -> Any:
    return batch


def test_a_bad_option_is_refused_when_the_policy_is_read(images: Path, tmp_path: Path) -> None:
    from privgate.errors import PolicyError

    bad = tmp_path / "bad.yaml"
    bad.write_text(POLICY.replace("lira: {models: 4}", "lira: {models: 4, augmented_queries: sometimes}"))
    with pytest.raises(PolicyError, match="augmented_queries must be true, false, 2, 18 or 50"):
        _check(images, str(bad))


def test_the_cli_queries_the_views_of_an_augmented_recipe(images: Path, tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    r = run_cli(
        "check", "model.pt", "--policy", "policy.yaml", "--members", "members.npz", "--nonmembers",
        "nonmembers.npz", "--population", "population.npz", "--recipe", "digits_recipe:RECIPE",
        "--cache-dir", "off", "--json", str(out), "--quiet",
        cwd=images,
    )  # fmt: skip
    assert r.returncode in (0, 1), r.stderr
    report = json.loads(out.read_text())
    for attack in report["attacks"]:
        assert attack["status"] == "ran" and attack["extras"]["augmented_queries"] == ["identity", "mirror"]
        assert attack["extras"]["reference_passes"]["audit_rows"] == 1  # RMIA read LiRA's outputs: one pass each


PLUGIN_TEST = textwrap.dedent(
    """
    import numpy as np
    import torch
    from pytest_privgate import assert_mia_below

    from digits_recipe import RECIPE, cnn


    def test_an_augmented_model_is_queried_on_its_views():
        m, n, p = (np.load(f"{k}.npz") for k in ("members", "nonmembers", "population"))
        model = cnn()
        model.load_state_dict(torch.load("model.pt", weights_only=True))
        report = assert_mia_below(
            model.eval(), (m["x"], m["y"]), (n["x"], n["y"]), population=(p["x"], p["y"]), auc=0.999,
            attack=["lira", "rmia"], recipe="digits_recipe:RECIPE",
            attack_options={"lira": {"models": 4}, "rmia": {"models": 4, "min_population": 50}},
        )
        for attack in report.attacks:
            assert len(attack.extras["augmented_queries"]) == 2, attack.name
    """
)


def test_the_pytest_assertion_queries_the_views(pytester: pytest.Pytester, images: Path) -> None:
    import shutil
    import sys

    for f in ("digits_recipe.py", "model.pt", "members.npz", "nonmembers.npz", "population.npz"):
        shutil.copy(images / f, pytester.path / f)
    sys.modules.pop("digits_recipe", None)
    pytester.makepyfile(test_user=PLUGIN_TEST)
    pytester.runpytest("-p", "no:cacheprovider", "-q").assert_outcomes(passed=1)
