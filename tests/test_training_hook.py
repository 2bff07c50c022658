"""The team's own training loop, ``--recipe trainer:train`` with ``train(x, y, seed, device)`` (issue 35, item 2).

A small project is written to disk the way a user has it: ``trainer.py`` with
its training function (and broken ones), ``nets.py`` with the network it
imports, a target the function trained (TorchScript) and the audit data. The
reference models must be the function's own models (called with the plan's
seeds and masks), cached by the function's source files, refused in one
sentence (exit 2) when the function fails or returns something that is not a
model with the target's outputs, and refused by ``harden`` (DP-SGD needs
privgate's own loop).
"""

from __future__ import annotations

import os
import shutil
import sys
import textwrap
from pathlib import Path
from typing import Any

import inproc
import numpy as np
import pytest
import torch
from cases import run_cli, synthetic
from conftest import built_once

from privgate.errors import RecipeError

pytest_plugins = ["pytester"]

NETS = textwrap.dedent(
    """
    from torch import nn

    def make_net():
        return nn.Sequential(nn.Linear(20, 32), nn.ReLU(), nn.Linear(32, 4))
    """
)

TRAINER = textwrap.dedent(
    """
    import numpy as np
    import torch
    from torch import nn

    import nets


    def train(x, y, seed, device):
        torch.manual_seed(seed)
        net = nets.make_net().to(device)
        opt = torch.optim.Adam(net.parameters(), lr=1e-2)
        xt, yt = torch.as_tensor(x, device=device), torch.as_tensor(y, device=device)
        for _ in range(80):
            opt.zero_grad()
            nn.functional.cross_entropy(net(xt), yt).backward()
            opt.step()
        return net


    def fails(x, y, seed, device):
        raise ValueError("the data loader ran dry")


    def not_a_model(x, y, seed, device):
        return {"weights": np.zeros(3)}


    def nan_outputs(x, y, seed, device):
        net = nets.make_net()
        with torch.no_grad():
            net[2].bias.fill_(float("nan"))
        return net


    def other_network(x, y, seed, device):
        return nn.Sequential(nn.Linear(20, 8), nn.ReLU(), nn.Linear(8, 4))


    def image_outputs(x, y, seed, device):
        return nn.Sequential(nn.Linear(20, 8), nn.Unflatten(1, (2, 4)))


    def two_arguments(x, y):
        return nets.make_net()
    """
)

POLICY = textwrap.dedent(
    """
    name: hook
    sensitivity: internal
    release: model
    confidence: 0.95
    remediation: {enabled: true}
    attacks:
      lira: {models: 4}
    checks:
      - {id: lira-auc, attack: lira, metric: auc, max: 0.99}
    """
)


def _write(d: Path) -> Path:
    (d / "nets.py").write_text(NETS)
    (d / "trainer.py").write_text(TRAINER)
    (d / "policy.yaml").write_text(POLICY)
    xm, ym = synthetic(120, seed=1, label_noise=0.5)
    xn, yn = synthetic(120, seed=2, label_noise=0.5)
    np.savez(d / "members.npz", x=xm, y=ym)
    np.savez(d / "nonmembers.npz", x=xn, y=yn)
    trainer = _import(d)
    torch.jit.save(torch.jit.script(trainer.train(xm, ym, 0, "cpu").eval()), str(d / "model.pt"))
    return d


def _import(d: Path) -> Any:
    """The project's ``trainer`` module, freshly imported from ``d``."""
    for name in ("trainer", "nets"):
        sys.modules.pop(name, None)
    sys.path.insert(0, str(d))
    try:
        import trainer  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(d))
    return trainer


@pytest.fixture(scope="session")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return built_once(tmp_path_factory, "hook-project", _write)


def _check(d: Path, recipe: Any, **kw: Any) -> Any:
    for name in ("trainer", "nets"):  # each run as in a fresh process: the project's modules from its folder
        sys.modules.pop(name, None)
    return inproc.check(
        d / "model.pt", str(d / "policy.yaml"), d / "members.npz", d / "nonmembers.npz",
        recipe=recipe, search_dirs=[d], **kw,
    )  # fmt: skip


def _lira(report: Any) -> Any:
    return next(a for a in report.attacks if a.name == "lira")


def test_the_cli_trains_reference_models_with_the_function_and_says_the_engine_could_not_stack_it(
    project: Path, tmp_path: Path
) -> None:
    out = tmp_path / "report.json"
    r = run_cli(
        "check", str(project / "model.pt"), "--policy", str(project / "policy.yaml"),
        "--members", str(project / "members.npz"), "--nonmembers", str(project / "nonmembers.npz"),
        "--recipe", "trainer:train", "--cache-dir", str(tmp_path / "cache"), "--json", str(out), "--quiet",
        cwd=project,
    )  # fmt: skip
    assert r.returncode in (0, 1), r.stderr
    import json

    lira = next(a for a in json.loads(out.read_text())["attacks"] if a["name"] == "lira")
    assert lira["status"] == "ran" and lira["models_trained"] == 4
    assert lira["extras"]["kernel"] == "function" and lira["extras"]["engine"] == "sequential"
    notes = " ".join(lira["notes"])
    assert "trains with its own function trainer:train (privgate's engine cannot stack a user's training loop)" in notes
    assert "4 models trained as 4 tasks of at most 1 (local executor)" in notes
    assert 0.5 < lira["auc"] <= 1.0


def test_reference_models_are_the_functions_own_with_the_plans_seeds_and_masks(project: Path) -> None:
    from privgate.inputs.entrypoints import load_recipe
    from privgate.training.engine import train_ensemble
    from privgate.training.plan import model_seeds, paired_masks

    recipe = load_recipe("trainer:train", [project])
    assert recipe.own_loop and not recipe.vectorisable and recipe.name == "trainer:train"
    x, y = synthetic(60, seed=3, label_noise=0.0)
    masks, seeds = paired_masks(60, 2, seed=5), model_seeds(5, 2)
    ens = train_ensemble(recipe, x, y, masks, seeds, architecture=None)
    assert ens.kernel == "function" and ens.trained == 2
    trainer = _import(project)
    for state, mask, seed in zip(ens.models, masks, seeds):
        direct = trainer.train(x[mask], y[mask], seed, "cpu").state_dict()
        assert all(torch.equal(state[k], direct[k]) for k in direct)
    # the ensemble reads them through a model the function returned (no model_factory): the function's outputs
    net = trainer.train(x[masks[1]], y[masks[1]], seeds[1], "cpu").eval()
    with torch.no_grad():
        want = net(torch.as_tensor(x)).double().numpy()
    assert np.array_equal(ens.logits(x)[1], want)


def test_models_are_cached_and_a_changed_source_file_retrains(project: Path, tmp_path: Path) -> None:
    d = tmp_path / "proj"
    shutil.copytree(project, d)
    cache = tmp_path / "cache"
    first = _lira(_check(d, "trainer:train", cache_dir=str(cache)))
    again = _lira(_check(d, "trainer:train", cache_dir=str(cache)))
    assert (first.models_trained, again.models_trained, again.extras["models_from_cache"]) == (4, 0, 4)
    assert again.auc == first.auc and again.tpr_at_fpr == first.tpr_at_fpr
    assert "trains with its own function trainer:train" in again.notes[0]
    (d / "trainer.py").write_text(TRAINER + "\n# lr schedule tuned\n")  # the training script changes: retrained
    edited = _lira(_check(d, "trainer:train", cache_dir=str(cache)))
    (d / "nets.py").write_text(NETS + "\n# a comment in the network's module it imports\n")
    imported = _lira(_check(d, "trainer:train", cache_dir=str(cache)))
    assert (edited.models_trained, imported.models_trained) == (4, 4)


def test_a_function_object_is_a_recipe_for_library_callers(project: Path) -> None:
    trainer = _import(project)
    by_object = _lira(_check(project, trainer.train))
    by_spec = _lira(_check(project, "trainer:train"))
    assert by_object.auc == by_spec.auc and by_object.models_trained == 4


@pytest.mark.parametrize(
    ("spec", "sentence"),
    [
        ("trainer:fails", "training function 'trainer:fails': training failed (ValueError: the data loader ran dry)."),
        ("trainer:not_a_model", "training function 'trainer:not_a_model': returned a dict, not a torch.nn.Module."),
    ],
)
def test_a_failing_function_or_one_that_returns_no_model_is_one_sentence_exit_2(
    project: Path, tmp_path: Path, spec: str, sentence: str
) -> None:
    r = run_cli(
        "check", str(project / "model.pt"), "--policy", str(project / "policy.yaml"),
        "--members", str(project / "members.npz"), "--nonmembers", str(project / "nonmembers.npz"),
        "--recipe", spec, "--cache-dir", "off", "--json", str(tmp_path / "r.json"), "--quiet",
        cwd=project,
    )  # fmt: skip
    assert r.returncode == 2, r.stderr
    assert sentence in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "r.json").exists()


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ("trainer:nan_outputs", "outputs NaN or infinite values on the training rows"),
        ("trainer:image_outputs", "outputs shape (8, 2, 4) on 8 rows; expected [8, classes] logits"),
        ("trainer:other_network", "a model it returned does not have the parameters of the target's model"),
        ("trainer:two_arguments", "train_fn takes 2 positional argument(s); it must be train(x, y, seed, device)"),
    ],
)
def test_a_model_with_other_outputs_is_one_sentence_naming_the_function(project: Path, spec: str, words: str) -> None:
    with pytest.raises(RecipeError) as info:
        _check(project, spec)
    msg = str(info.value)
    assert spec in msg and words in msg and "\n" not in msg


def test_engine_vectorised_refuses_a_training_function(project: Path) -> None:
    with pytest.raises(RecipeError, match="engine 'vectorised' cannot train this model: recipe 'trainer:train' trains"):
        _check(project, "trainer:train", engine="vectorised")


def test_harden_refuses_a_training_function_in_one_sentence(project: Path) -> None:
    from privgate import api

    with pytest.raises(RecipeError) as info:
        api.harden(
            str(project / "model.pt"), str(project / "policy.yaml"), str(project / "members.npz"),
            str(project / "nonmembers.npz"), recipe="trainer:train", search_dirs=[project], cache_dir="off",
        )  # fmt: skip
    assert str(info.value) == (
        "recipe 'trainer:train': remediation retrains with DP-SGD inside privgate's own training loop, which cannot "
        "run your training function; give a Recipe with the model's model_factory (and your settings)."
    )


def test_a_recipe_may_carry_the_function_and_a_factory_for_a_state_dict_target(project: Path, tmp_path: Path) -> None:
    from privgate import Recipe

    trainer = _import(project)
    nets = sys.modules["nets"]
    xm, ym = np.load(project / "members.npz")["x"], np.load(project / "members.npz")["y"]
    torch.save(trainer.train(xm, ym, 0, "cpu").state_dict(), tmp_path / "state.pt")
    recipe = Recipe(model_factory=nets.make_net, train_fn=trainer.train, name="carried")
    report = inproc.check(
        tmp_path / "state.pt", str(project / "policy.yaml"), project / "members.npz", project / "nonmembers.npz",
        recipe=recipe,
    )  # fmt: skip
    by_spec = _lira(_check(project, "trainer:train"))
    assert _lira(report).auc == by_spec.auc and _lira(report).extras["kernel"] == "function"
    with pytest.raises(RecipeError, match="give a model_factory .* or a train_fn"):
        Recipe(name="empty")


PLUGIN_TEST = textwrap.dedent(
    """
    import numpy as np
    import pytest
    from pytest_privgate import assert_mia_below

    import trainer


    def data():
        m, n = np.load("members.npz"), np.load("nonmembers.npz")
        return (m["x"], m["y"]), (n["x"], n["y"])


    def test_reference_models_from_our_own_loop():
        members, nonmembers = data()
        model = trainer.train(*members, 0, "cpu").eval()
        report = assert_mia_below(
            model, members, nonmembers, auc=0.999, attack="lira", recipe="trainer:train",
            attack_options={"lira": {"models": 4}},
        )
        lira = next(a for a in report.attacks if a.name == "lira")
        assert lira.extras["kernel"] == "function" and lira.models_trained == 4


    def test_a_loop_that_returns_no_model():
        members, nonmembers = data()
        model = trainer.train(*members, 0, "cpu").eval()
        assert_mia_below(model, members, nonmembers, auc=0.999, attack="lira", recipe="trainer:not_a_model",
                         attack_options={"lira": {"models": 4}})
    """
)


def test_the_pytest_assertion_takes_a_training_function(pytester: pytest.Pytester, project: Path) -> None:
    for f in ("trainer.py", "nets.py", "members.npz", "nonmembers.npz"):
        shutil.copy(project / f, pytester.path / f)
    for name in ("trainer", "nets"):
        sys.modules.pop(name, None)
    pytester.makepyfile(test_user=PLUGIN_TEST)
    result = pytester.runpytest("-p", "no:cacheprovider", "-q")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*training function 'trainer:not_a_model': returned a dict, not a torch.nn.Module.*"])


def test_auto_on_a_machine_with_a_gpu_estimates_a_training_function_by_the_targets_network(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--device auto`` where torch sees a GPU estimates the check's work on a network; a training function has
    no factory to build one, so the target's own is probed (it was ``Recipe.build``: exit 2 on every GPU machine)."""
    from privgate import device

    monkeypatch.setattr(device, "cuda_available", lambda: True)
    d = tmp_path / "proj"
    shutil.copytree(project, d)
    env = _check(d, "trainer:train", cache_dir=str(tmp_path / "cache"), threads=1).environment
    if os.environ.get("PRIVGATE_DEVICE", "").strip().lower() == "cuda":  # make test-gpu: in-process runs take the GPU
        assert env["device"] == "cuda"
        return
    assert env["device"] == "cpu" and env["device_reason"].startswith("auto chose the CPU: this check's estimated work")
