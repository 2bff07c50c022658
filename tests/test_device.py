"""Device and engine settings as a user meets them: --device / --engine, the config, RunOptions and the report.

No GPU is needed: ``cuda`` paths are checked by what the machine can show —
``auto`` resolving by ``torch.cuda.is_available()``, ``cuda`` refused without
one, and every tensor of a training step staying on the training device (the
``meta`` device stands in for a GPU: a stray CPU tensor meeting a ``meta`` one
is an error, as it would be on ``cuda``). The paths that read numbers back — the
white-box attacks, DP-SGD retraining, language-model scoring and fine-tuning —
run on a CUDA-like device with data (``tests/standin.py``) in
``tests/test_device_paths.py``; ``make test-gpu`` runs the suite on a real GPU.
"""

from __future__ import annotations

import json
import os
import textwrap

import inproc
import numpy as np
import pytest
import torch
from cases import run_cli
from torch import nn

from privgate import RunOptions, train_model
from privgate.device import DeviceError, resolve_device

CUDA = torch.cuda.is_available()


def test_auto_takes_a_gpu_exactly_when_torch_sees_one(monkeypatch):
    import privgate.device as device

    monkeypatch.setattr(device, "cuda_available", lambda: False)
    assert resolve_device("auto") == "cpu" and resolve_device("cpu") == "cpu"
    with pytest.raises(DeviceError, match=r"^device 'cuda' was asked for, but torch sees no CUDA GPU"):
        resolve_device("cuda")
    assert RunOptions(device="auto").resolved().device == "cpu"
    monkeypatch.setattr(device, "cuda_available", lambda: True)
    assert resolve_device("auto") == "cuda" and resolve_device("cuda") == "cuda" and resolve_device("cpu") == "cpu"
    with pytest.raises(ValueError, match="device must be one of auto, cpu, cuda, got 'gpu'"):
        RunOptions(device="gpu")


def test_a_target_moves_as_a_copy():
    from privgate import Target

    model = nn.Linear(3, 2)
    target = Target(model)
    assert target.device == "cpu" and target.to_device("cpu") is target
    moved = target.to_device("meta")  # any other device: the caller's module stays where it was
    assert moved.device == "meta" and next(model.parameters()).device.type == "cpu"


def test_a_training_step_keeps_every_tensor_on_the_training_device():
    """The vmap and grouped kernels, the MLP kernel, DP-SGD noise and both optimisers, run on ``meta`` tensors.

    The step's inputs (batch indices, loss weights, dropout masks, noise) are
    made on the CPU, as they are for a GPU run; anything not moved to the
    training device would meet a ``meta`` tensor and raise.
    """
    from torch.func import stack_module_state

    from privgate import Recipe
    from privgate.recipe import DPSGD
    from privgate.training import grouped, mlp
    from privgate.training.dp_step import dp_step
    from privgate.training.optimisers import optimise
    from privgate.training.stacked import StackedModel

    meta = torch.device("meta")
    torch.manual_seed(0)

    def cnn() -> nn.Module:
        return nn.Sequential(
            nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.Dropout2d(0.25), nn.Flatten(),
            nn.Linear(144, 3),
        )  # fmt: skip

    x, y = torch.randn(40, 1, 6, 6), torch.randint(0, 3, (40,))
    idx = torch.stack([torch.arange(8), torch.arange(8, 16), torch.arange(16, 24)])
    w = torch.full((3, 8), 1 / 8)
    w[2, 5:] = 0  # model 2 has a short batch: two groups, its buffers gathered and written back

    def schedule():  # noqa: ANN202
        return idx.unsqueeze(0), w.unsqueeze(0), np.array([[True, True, False]])  # model 2 sits out: state restored

    layout, _ = grouped.plan(cnn(), (1, 6, 6))
    for forward in (None, grouped.GroupedForward(layout)):  # the vmap kernel, then the grouped kernel
        model = StackedModel([cnn() for _ in range(3)], x, y, [1, 2, 3], grouped=forward)
        model.device, model.x, model.y = meta, x.to(meta), y.to(meta)
        model.buffers = {k: v.to(meta) for k, v in model.buffers.items()}
        p = [t.detach().to(meta).requires_grad_() for t in model.params]
        for opt in ({"optimizer": "adam"}, {"optimizer": "sgd", "momentum": 0.9, "weight_decay": 1e-3}):
            optimise(Recipe(cnn, epochs=1, **opt), p, model.grads, schedule)
        assert {t.device.type for t in [*p, *model.buffers.values()]} == {"meta"}
        model.x = x  # one CPU tensor in the step: caught
        with pytest.raises(RuntimeError, match="meta"):
            model.grads(p, idx, w)

    net = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 3))
    plan, _ = mlp.plan(net)
    stacked, _ = stack_module_state([net, net])
    names = list(stacked)
    xm, ym = torch.randn(30, 6).to(meta), torch.randint(0, 3, (30,)).to(meta)
    kernel = mlp.StackedMLP(plan, names, 2, 1, xm, ym)
    pp = kernel.pack([stacked[n].detach().to(meta) for n in names])
    rows = [torch.arange(15), torch.arange(15, 30)]
    gens = [torch.Generator().manual_seed(1), torch.Generator().manual_seed(2)]
    grad_fn, dp_schedule = dp_step(kernel, DPSGD(1.0, 1.0, None, 8), rows, gens, [1, 2], pp)
    optimise(Recipe(cnn, epochs=1), pp, grad_fn, dp_schedule)
    assert {t.device.type for t in pp} == {"meta"}


def test_engines_train_on_an_explicit_cpu_device_as_by_default():
    from privgate import Recipe
    from privgate.training.engine import train_models
    from privgate.training.plan import model_seeds, paired_masks

    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(60, 1, 4, 4)).astype(np.float32), rng.integers(0, 2, 60)
    recipe = Recipe(lambda: nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2), nn.Flatten(), nn.Linear(8, 2)))
    recipe = Recipe(recipe.model_factory, epochs=1, batch_size=16)
    masks, seeds = paired_masks(60, 2, 0), model_seeds(0, 2)
    for vectorise in (True, False):
        a = train_models(recipe, x, y, masks, seeds, vectorise=vectorise).states
        b = train_models(recipe, x, y, masks, seeds, vectorise=vectorise, device="cpu").states
        assert all(torch.equal(sa[k], sb[k]) for sa, sb in zip(a, b) for k in sa)


# --------------------------------------------------------------------------- the CLI

RECIPES = textwrap.dedent(
    """
    import torch.nn.functional as F
    from torch import nn
    from privgate.recipe import Recipe

    def cnn():
        return nn.Sequential(
            nn.Conv2d(1, 4, 3, padding=1, bias=False), nn.BatchNorm2d(4), nn.ReLU(), nn.Dropout2d(0.1),
            nn.AvgPool2d(2), nn.Flatten(), nn.Linear(36, 3),
        )

    class Noisy(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Linear(36, 8), nn.Linear(8, 3)

        def forward(self, x):
            return self.b(F.dropout(self.a(x.flatten(1)).relu(), 0.2, self.training))

    CNN = Recipe(cnn, epochs=3, batch_size=32, lr=1e-2, name="tiny-cnn")
    NOISY = Recipe(Noisy, epochs=2, batch_size=32, name="noisy")
    """
)

POLICY = textwrap.dedent(
    """
    name: tiny-references
    sensitivity: confidential
    release: api
    confidence: 0.95
    attacks:
      loss: {}
      lira: {models: 4}
    checks:
      - id: mia-auc
        attack: best
        metric: auc
        max: 0.95
    """
)


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """A tiny image project: 3 classes of 1×6×6 images, a CNN with BatchNorm and dropout, a LiRA policy."""
    d = tmp_path_factory.mktemp("cnn-project")
    rng = np.random.default_rng(0)
    centres = rng.normal(size=(3, 1, 6, 6))

    def images(n: int) -> tuple[np.ndarray, np.ndarray]:
        y = rng.integers(0, 3, n)
        return (centres[y] + rng.normal(size=(n, 1, 6, 6))).astype(np.float32), y

    for name in ("members", "nonmembers"):
        x, y = images(120)
        np.savez(d / f"{name}.npz", x=x, y=y)
    (d / "recipes.py").write_text(RECIPES)
    (d / "policy.yaml").write_text(POLICY)
    import importlib.util

    spec = importlib.util.spec_from_file_location("recipes_for_test", d / "recipes.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    xm = np.load(d / "members.npz")
    torch.save(train_model(module.CNN, xm["x"], xm["y"], seed=0).state_dict(), d / "model.pt")
    torch.save(train_model(module.NOISY, xm["x"], xm["y"], seed=0).state_dict(), d / "noisy.pt")
    return d


def _check(project, tmp_path, *flags: str, recipe: str = "recipes:CNN"):  # noqa: ANN202
    out = tmp_path / f"report{len(list(tmp_path.glob('*.json')))}.json"
    model = "noisy.pt" if recipe.endswith("NOISY") else "model.pt"
    args = ["check", model, "--policy", "policy.yaml", "--members", "members.npz", "--nonmembers"]
    args += ["nonmembers.npz", "--recipe", recipe, "--cache-dir", "off", "--json", str(out), *flags]
    r = run_cli(*args, cwd=project)
    return r, (json.loads(out.read_text()) if out.exists() else None)


def _report(project, model: str = "model.pt", recipe: str = "recipes:CNN", **run):  # noqa: ANN202
    """``_check``'s report built in process (inproc: the CLI's report, test_front_door.py), parsed back."""
    report = inproc.check(
        project / model, str(project / "policy.yaml"), project / "members.npz", project / "nonmembers.npz",
        recipe=recipe, search_dirs=(project,), **run,
    )  # fmt: skip
    return report, json.loads(inproc.render(report, "json")["json"])


def test_engines_give_the_same_report_and_say_which_ran(project):
    r_vec, vec = _report(project, engine="vectorised", device="cpu")
    r_seq, seq = _report(project, engine="sequential")
    assert r_vec.exit_code == r_seq.exit_code == 0, r_vec.summary + r_seq.summary
    lira = {rep["environment"]["engine"]: next(a for a in rep["attacks"] if a["name"] == "lira") for rep in (vec, seq)}
    assert (lira["vectorised"]["extras"]["engine"], lira["vectorised"]["extras"]["kernel"]) == ("vectorised", "grouped")
    assert (lira["sequential"]["extras"]["engine"], lira["sequential"]["extras"]["kernel"]) == ("sequential", "loop")
    assert lira["vectorised"]["models_trained"] == lira["sequential"]["models_trained"] == 4
    # same seeds, same models up to float rounding: the same scores, so the same AUC and verdict
    assert lira["vectorised"]["auc"] == pytest.approx(lira["sequential"]["auc"], abs=1e-6)
    assert [c["value"] for c in vec["checks"]] == pytest.approx([c["value"] for c in seq["checks"]], abs=1e-6)
    # seq: auto, which keeps a model this small on the CPU (privgate.device.choose_device), but in the GPU lane
    expected = "cuda" if os.environ.get("PRIVGATE_DEVICE", "").strip().lower() == "cuda" else "cpu"
    assert vec["environment"]["device"] == "cpu" and seq["environment"]["device"] == expected
    assert lira["vectorised"]["extras"]["device"] == "cpu"


def test_vectorised_engine_refuses_a_model_it_cannot_stack(project, tmp_path):
    r, report = _check(project, tmp_path, "--engine", "vectorised", recipe="recipes:NOISY")
    assert r.returncode == 2 and report is None
    line = r.stderr.strip()
    assert "\n" not in line and "Traceback" not in r.stderr
    assert "engine 'vectorised' cannot train this model: the model draws random numbers in training" in line
    r_auto, rep = _report(project, "noisy.pt", "recipes:NOISY")  # auto: one model after another, and says so
    assert r_auto.exit_code in (0, 1, 3), r_auto.summary
    lira = next(a for a in rep["attacks"] if a["name"] == "lira")
    assert lira["extras"]["engine"] == "sequential"
    assert any("outside nn.Dropout layers" in n for n in lira["notes"])


@pytest.mark.skipif(CUDA, reason="this machine has a CUDA GPU")
def test_cuda_without_a_gpu_is_bad_input(project, tmp_path, monkeypatch):
    """--device cuda, or $PRIVGATE_DEVICE=cuda without the flag (make test-gpu's switch): exit 2, one sentence."""
    sentence = (
        "error: device 'cuda' was asked for, but torch sees no CUDA GPU on this machine "
        "(torch.cuda.is_available() is False); use --device auto or --device cpu."
    )
    r, report = _check(project, tmp_path, "--device", "cuda")
    assert r.returncode == 2 and report is None and r.stderr.strip() == sentence
    monkeypatch.setenv("PRIVGATE_DEVICE", "cuda")
    r, report = _check(project, tmp_path)
    assert r.returncode == 2 and report is None and r.stderr.strip() == sentence
    # the flag wins over the variable: the run gets past the device to the (missing) data
    args = ("--members", "none.npz", "--nonmembers", "nonmembers.npz", "--device", "cpu")
    r = run_cli("check", "model.pt", "--policy", "policy.yaml", *args, cwd=project)
    assert r.returncode == 2 and "none.npz" in r.stderr and "cuda" not in r.stderr, r.stderr
    monkeypatch.setenv("PRIVGATE_DEVICE", "gpu")
    r, report = _check(project, tmp_path)
    assert r.returncode == 2 and "(env var: 'PRIVGATE_DEVICE'): 'gpu' is not one of 'auto', 'cpu', 'cuda'" in r.stderr


@pytest.mark.skipif(CUDA, reason="this machine has a CUDA GPU")
def test_gpu_lane_stops_at_once_without_a_gpu(root):
    """``make test-gpu`` (PRIVGATE_DEVICE=cuda) on this machine: pytest stops before collecting, in one sentence."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "PRIVGATE_DEVICE": "cuda"}
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "tests/test_packaging.py"],
        cwd=root, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert r.returncode == 4 and "passed" not in r.stdout, r.stdout + r.stderr
    assert (
        "ERROR: PRIVGATE_DEVICE=cuda (make test-gpu) runs the suite on a CUDA GPU, but torch sees none on this "
        "machine (torch.cuda.is_available() is False); run make test instead." in r.stderr
    )


@pytest.mark.parametrize(
    "line, message",
    [
        ('device = "gpu"', "'device' must be one of auto, cpu, cuda, got 'gpu' (did you mean 'cpu'?)."),
        (
            'engine = "vectorized"',
            "'engine' must be one of auto, vectorised, sequential, got 'vectorized' (did you mean",
        ),
        ("device = 1", "'device' must be a str, got int 1."),
    ],
)
def test_config_device_and_engine_are_validated(project, tmp_path, line, message):
    cfg = tmp_path / "privgate.toml"
    cfg.write_text(f"{line}\n")
    r = run_cli("check", "model.pt", "--policy", "public", "--config", str(cfg), cwd=project)
    assert r.returncode == 2 and message in r.stderr and str(cfg) in r.stderr, r.stderr
