"""``--device auto`` picks the device that finishes sooner, from the check's estimated work, and the report says why.

The decision (:func:`privgate.device.choose_device`) is a pure function of
facts — the work (:class:`privgate.device.Workload`, gathered from the loaded
inputs by :mod:`privgate.workload`), whether torch sees a CUDA GPU and the
threads — so it is checked here on the facts of real inputs: the digits
example's MLP goes to the CPU on the 16-core machine of issue 33, a
CIFAR-shaped CNN check to the GPU, a language model (whose work is not
estimated) to the GPU, anything without a GPU to the CPU. The in-process runs
check that the report carries the device, what was asked for and the reason;
on this CPU-only machine a GPU's presence is the one fact the tests supply
(``privgate.device.cuda_available``), as ``test_device.py`` does.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path

import inproc
import numpy as np
import pytest
import torch
from cases import LOSS_ONLY
from torch import nn

import privgate.device as device
from privgate import RunOptions
from privgate.device import Workload, choose_device
from privgate.workload import probe, workload_of

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def digits():
    """The digits example's inputs (``examples/digits/privgate.toml``: 897 + 600 + 300 8×8 images, MLP, strict)."""
    from privgate import CheckSettings
    from privgate.api import load_inputs

    folder = ROOT / "examples" / "digits"
    settings = CheckSettings(
        model=str(folder / "model.pt"), policy="strict", members="data:members", nonmembers="data:nonmembers",
        population="data:population", recipe="recipe:RECIPE", search_dirs=(folder,),
    )  # fmt: skip
    inputs = load_inputs(settings)
    yield inputs
    for name in ("data", "recipe"):  # the example's modules, imported by name from its folder
        sys.modules.pop(name, None)


def cifar_shaped():
    """The inputs of ``benchmarks/engine/cifar_engine.py``'s check, only their shapes real:
    25,000 + 25,000 3×32×32 rows, an airbench-class CNN of width 32, LiRA-64 + RMIA-4, 8 epochs of batch 512."""
    from privgate import AuditData, Dataset, Recipe, Target
    from privgate.policy import parse_policy

    def make() -> nn.Module:
        def block(i: int, o: int, pool: bool) -> list[nn.Module]:
            return [nn.Conv2d(i, o, 3, padding=1, bias=False), nn.BatchNorm2d(o), nn.GELU()] + (
                [nn.MaxPool2d(2)] if pool else []
            )

        return nn.Sequential(
            *block(3, 32, False), *block(32, 64, True), *block(64, 128, True), *block(128, 128, True),
            nn.AdaptiveMaxPool2d(1), nn.Flatten(), nn.Linear(128, 10),
        )  # fmt: skip

    def part(n: int, seed: int, role: str) -> Dataset:
        return Dataset(np.random.default_rng(seed).random((n, 3, 32, 32), dtype=np.float32), np.arange(n) % 10, role)

    recipe = Recipe(model_factory=make, epochs=8, batch_size=512, lr=0.2, optimizer="sgd", name="cifar-like")
    data = AuditData(part(25_000, 0, "members"), part(25_000, 1, "non-members"), part(5_000, 2, "population"))
    policy = parse_policy(
        "name: cifar\nsensitivity: internal\nrelease: api\nattacks: {lira: {models: 64}, rmia: {models: 4}}\n"
        "checks:\n  - {id: tpr, attack: lira, metric: tpr_at_fpr, fpr: 0.01, max: 1.0}\n"
    )
    return Target(recipe.build(seed=0)), data, policy, recipe


def test_the_probe_counts_linear_and_convolution_flops():
    mlp = nn.Sequential(nn.Linear(64, 256), nn.Tanh(), nn.Linear(256, 256), nn.Tanh(), nn.Linear(256, 10))
    assert probe(mlp, np.zeros((5, 64), np.float32)) == (2 * (64 * 256 + 256 * 256 + 256 * 10), 5)
    cnn = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(32 * 32 * 32, 10))
    flops, layers = probe(cnn, np.zeros((2, 3, 32, 32), np.float32))
    assert flops == 2 * 3 * 9 * 32 * 32 * 32 + 2 * 32 * 32 * 32 * 10 and layers == 4
    scripted = torch.jit.script(mlp)  # no hooks on TorchScript: two FLOPs per parameter
    assert probe(scripted, np.zeros((2, 64), np.float32))[0] == 2 * sum(p.numel() for p in mlp.parameters())
    assert probe(mlp, np.zeros((2, 7), np.float32)) == (0.0, 0)  # rows it cannot take: no estimate, no error


def test_the_digits_mlp_goes_to_the_cpu_and_a_cifar_cnn_to_the_gpu(digits):
    """Issue 33: on a 16-core GPU machine the digits example (then 256 units, 150 epochs) took 20.4 s on the GPU
    and 15.4 s on the CPU; today's (128 units, 60 epochs of batch 32) is smaller still."""
    work = workload_of(digits.target, digits.data, digits.policy, digits.recipe, RunOptions())
    # the strict policy's plan: LiRA and the learned attack share 16 reference models, stacked, on half of the
    # 1,497 audit rows each, 60 epochs of batch 32 (24 steps each: 1,440); the gradient attack trains 2 more on
    # population halves; inversion optimises for 300 steps
    assert (work.models, work.stacked, work.group, work.epochs, work.batch_size) == (16, True, 16, 60, 32)
    assert (work.rows, work.population, work.other_trainings, work.optimisation_steps) == (1497, 300, 2, 300)
    assert work.flops_per_row == 2 * (64 * 128 + 128 * 128 + 128 * 10)
    choice = choose_device(work, cuda=True, threads=16)
    assert choice.device == "cpu"
    assert choice.reason.startswith("auto chose the CPU: this check's estimated work (16 reference models × 1,440")
    assert "on 16 CPU threads" in choice.reason and "on the GPU, its 5 s start-up" in choice.reason
    assert work.cpu_seconds(16) < work.cpu_seconds(1) < work.gpu_seconds()
    # the GPU's start-up is paid once: on one thread a hardening that audits the model and 2 candidates is worth it,
    # on 16 it is not
    thrice = dataclasses.replace(work, repeats=3)
    assert choose_device(thrice, cuda=True, threads=1).device == "cuda"
    assert choose_device(thrice, cuda=True, threads=16).device == "cpu"

    big = workload_of(*cifar_shaped(), RunOptions())
    assert big.models == 64 and big.flops > 1e15  # 64 CNNs × 8 epochs × 25,000 rows: petaFLOPs
    assert choose_device(big, cuda=True, threads=16).device == "cuda"
    assert choose_device(big, cuda=True, threads=256).device == "cuda"


def test_without_a_gpu_auto_is_the_cpu_and_unestimated_jobs_take_the_gpu(digits):
    work = workload_of(digits.target, digits.data, digits.policy, digits.recipe, RunOptions())
    assert choose_device(work, cuda=False, threads=1) == (
        "cpu",
        "torch sees no CUDA GPU on this machine, so auto runs on the CPU",
    )
    lm = choose_device(None, cuda=True, threads=16)  # a language model's check: no estimate, the GPU
    assert lm.device == "cuda" and "language models" in lm.reason
    assert choose_device(None, cuda=False, threads=16).device == "cpu"
    nothing = Workload(parameters=0, flops_per_row=0.0, layers=0, rows=1000)  # a scikit-learn target, no recipe
    assert choose_device(nothing, cuda=True, threads=1) == (
        "cpu",
        "auto chose the CPU: nothing in this check runs on torch",
    )
    # the same reason without a GPU: such a check never asks torch about one (tests/test_no_torch.py)
    assert choose_device(nothing, cuda=False, threads=1) == choose_device(nothing, cuda=True, threads=1)


def test_arithmetic_and_fewer_threads_favour_the_gpu_launches_do_not():
    """More stacked models (arithmetic, no more launches) or fewer CPU threads move the choice towards the GPU;
    the same models trained one at a time (launches: host-bound on both devices) do not."""
    base = Workload(parameters=85_000, flops_per_row=170_000.0, layers=5, rows=2_000, models=16, epochs=50)

    def gpu_saves(w: Workload, threads: int = 8) -> float:
        return w.cpu_seconds(threads) - w.gpu_seconds()

    stacked = Workload(**{**base.__dict__, "models": 64, "group": 64})
    one_by_one = Workload(**{**base.__dict__, "stacked": False})
    assert gpu_saves(stacked) > gpu_saves(base) > gpu_saves(one_by_one)
    assert all(gpu_saves(base, t) > gpu_saves(base, t + 1) for t in range(1, 32))


def test_a_device_asked_for_stays_and_says_so(monkeypatch):
    monkeypatch.setattr(device, "cuda_available", lambda: True)
    big = Workload(parameters=10**7, flops_per_row=1e9, layers=40, rows=50_000, models=64, epochs=8, batch_size=512)
    run = RunOptions(device="cpu", threads=2).resolved(big)
    assert (run.device, run.device_requested, run.device_reason) == ("cpu", "cpu", "device 'cpu' was asked for")
    auto = RunOptions(threads=2).resolved(big)
    assert (auto.device, auto.device_requested) == ("cuda", "auto")
    assert auto.resolved(None) is auto  # decided once: resolving again changes nothing
    assert auto.replace(device="cpu").resolved().device_reason == "device 'cpu' was asked for"


def test_the_report_says_which_device_auto_chose_and_why(case, monkeypatch):
    """In process, as ``privgate check`` builds it: environment.device, device_requested, device_reason."""
    from privgate.policy import parse_policy

    policy = parse_policy(LOSS_ONLY)
    recipe = {"recipe": case.recipe_spec, "search_dirs": (case.dir,)}
    rep = inproc.check(case.leaky_state, policy, case.members, case.nonmembers, **recipe)
    env = rep.environment
    if os.environ.get("PRIVGATE_DEVICE", "").strip().lower() == "cuda":
        assert (env["device"], env["device_requested"]) == ("cuda", "auto")
        pytest.skip("make test-gpu runs every in-process run on the GPU (tests/conftest.py)")
    assert (env["device"], env["device_requested"]) == ("cpu", "auto")
    if not torch.cuda.is_available():
        assert env["device_reason"] == "torch sees no CUDA GPU on this machine, so auto runs on the CPU"
    # where torch sees a GPU, this tiny MLP still runs on the CPU, and the report gives the estimate
    monkeypatch.setattr(device, "cuda_available", lambda: True)
    rep = inproc.check(case.leaky_state, policy, case.members, case.nonmembers, **recipe, threads=1)
    env = rep.environment
    assert (env["device"], env["device_requested"], env["threads"]) == ("cpu", "auto", 1)
    assert env["device_reason"].startswith("auto chose the CPU: this check's estimated work (")
    assert "takes about" in env["device_reason"] and "on 1 CPU thread and about 5" in env["device_reason"]
    # the probe (privgate.calibration) cannot start this machine's missing GPU: the documented constants decide
    assert env["device_estimate"]["costs"]["source"] == "constants" and env["device_estimate"]["costs"]["probe_failed"]
    assert env["device_reason"].endswith("(documented constants, not measured here)")
    page = inproc.render(rep, "html")["html"]  # the HTML report's environment says it too
    assert "<li>device cpu — auto chose the CPU: this check" in page and "<li>threads 1 — threads=1 was asked" in page
    asked = inproc.check(case.safe_ts, policy, case.members, case.nonmembers, device="cpu").environment
    assert (asked["device"], asked["device_requested"], asked["device_reason"]) == (
        "cpu",
        "cpu",
        "device 'cpu' was asked for",
    )


def test_a_language_models_check_and_hardening_take_the_gpu_without_an_estimate(tiny_lm_dir, tmp_path, monkeypatch):
    """A Hugging Face folder's inputs are text records, not rows a probe forward pass could take: where torch sees a
    GPU, ``auto`` resolves a language model's check and hardening without estimating their work (the GPU), as the
    gate and the ε search ask :func:`privgate.workload.decided` for every kind of target."""
    import json

    from tiny_lm import tiny_lm_records

    from privgate import CheckSettings
    from privgate.api import load_inputs
    from privgate.workload import decided

    files = {}
    for role, texts in zip(("members", "nonmembers"), tiny_lm_records()):
        files[role] = tmp_path / f"{role}.jsonl"
        files[role].write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    settings = CheckSettings(model=str(tiny_lm_dir), policy="internal", **{k: str(v) for k, v in files.items()})
    inputs = load_inputs(settings)
    assert inputs.target.kind == "causal_lm"
    monkeypatch.setattr(device, "cuda_available", lambda: True)
    for hardening in (False, True):
        run = decided(
            RunOptions(threads=1), inputs.target, inputs.data, inputs.policy, inputs.recipe, hardening=hardening
        )
        assert (run.device, run.device_requested) == ("cuda", "auto")
        if os.environ.get("PRIVGATE_DEVICE", "").strip().lower() == "cuda":  # the lane's choice (tests/conftest.py)
            assert run.device_reason == "make test-gpu runs every in-process run on the GPU"
        else:
            assert "this job's work is not estimated (language models" in run.device_reason
