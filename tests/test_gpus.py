"""Reference-model groups spread over every GPU of the machine (issue 43, item 4), on two stand-in GPUs.

``tests/standin.py`` with :data:`standin.COUNT` = 2 gives torch two devices, ``standin:0`` and ``standin:1``, that
compute on the CPU and refuse what CUDA refuses: a tensor of one meeting a tensor of the other (or of the CPU) in
an operation. ``device="cuda"`` resolves to them here, and each worker thread of
:class:`privgate.executors.devices.DevicePool` runs under the stand-in's function mode as the test's own thread
does; every other line of privgate runs as it does for a user. What a run on two GPUs must show: the groups ran on
two workers at once, each group on exactly one device, trained and scored there, and every number of the report
equal to the one-device run's for the same seed.
"""

from __future__ import annotations

import contextlib
import threading
from pathlib import Path

import pytest
import standin
import torch
from cases import make_model, synthetic
from standin import StandInMode

from privgate import PrivgateError, Recipe, RunOptions, api
from privgate.report import render

POLICY = """\
name: gpus
sensitivity: internal
release: model
confidence: 0.9
attacks:
  lira: {models: 4}
checks:
  - {id: lira-auc, attack: lira, metric: auc, max: 0.99}
"""


@pytest.fixture
def gpus(monkeypatch):
    """Two stand-in GPUs: ``device="cuda"`` resolves to ``standin``, torch sees ``standin:0`` and ``standin:1``."""
    import privgate.device as device
    import privgate.options as options

    if torch.cuda.is_available():
        pytest.skip("a CUDA GPU is here: the stand-in device would break CUDA's autograd (see test_device_paths.py)")
    name = standin.install()
    monkeypatch.setattr(standin, "COUNT", 2)
    real, on = device.resolve_device, device.on_device
    monkeypatch.setattr(options, "DEVICES", (*options.DEVICES, name))
    monkeypatch.setattr(device, "DEVICES", (*device.DEVICES, name))
    monkeypatch.setattr(device, "resolve_device", lambda asked: name if asked in ("cuda", name) else real(asked))

    @contextlib.contextmanager
    def worker(where: str):  # a worker thread under the stand-in's mode, as this thread is (modes are per thread)
        with on(where), StandInMode():
            yield

    monkeypatch.setattr(device, "on_device", worker)
    with StandInMode(), torch.autograd.set_multithreading_enabled(False):  # standin.py: backward in this thread
        yield name


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> dict:
    """A small MLP target, 40 members and 40 non-members, a recipe of 3 epochs and a LiRA policy of 4 models."""
    folder = tmp_path_factory.mktemp("gpus")
    (folder / "policy.yaml").write_text(POLICY)
    torch.manual_seed(0)
    return {
        "settings": make_model().eval(),
        "policy": str(folder / "policy.yaml"),
        "members": synthetic(40, 1, 0.5),
        "nonmembers": synthetic(40, 2, 0.5),
        "recipe": Recipe(make_model, epochs=3, batch_size=16, lr=3e-3, name="tiny"),
    }


def _check(world: dict, **kw):
    return api.check(**world, device="cuda", models_per_task=1, cache_dir="off", seed=0, threads=1, **kw)


def test_groups_run_on_two_gpus_at_once_with_the_one_gpu_numbers(gpus, world, monkeypatch):
    """4 models in 4 groups on two stand-in GPUs: groups 0 and 2 train on ``standin:0``, 1 and 3 on ``standin:1``, two
    at a time (a barrier that only two concurrent workers pass), each pinned to its worker's device and scored there;
    every row's score and every number of the report equal the run on ``--devices 1``. A group gathered out of order
    changes the scores; a group's tensors on the other device make the stand-in raise."""
    from privgate.training import engine
    from privgate.training.ensemble import TorchReader

    one = _check(world, devices="1")
    trained, read, lock = [], [], threading.Lock()
    together = threading.Barrier(2, timeout=20)  # sequential workers would never meet here
    task, read_group = engine.train_task, TorchReader._read_group

    def train_task(*args):
        with lock:
            trained.append((threading.current_thread().name, args[-1], standin._Backend.current_device(), args[4]))
        together.wait()
        return task(*args)

    def reading(self, states, todo, x, rows, transform, device, runners):
        out = read_group(self, states, todo, x, rows, transform, device, runners)
        with lock:
            read.append((device, tuple(todo), standin._Backend.current_device(), {str(o.device) for o in out}))
        return out

    monkeypatch.setattr(engine, "train_task", train_task)
    monkeypatch.setattr(TorchReader, "_read_group", reading)
    two = _check(world)

    assert one.environment["devices"] == ["standin:0"] and one.environment["devices_requested"] == "1"
    assert two.environment["devices"] == ["standin:0", "standin:1"] and "devices_requested" not in two.environment
    placement = [{"device": f"standin:{g % 2}", "models": [g]} for g in range(4)]
    assert two.attacks[0].extras["placement"] == placement and "placement" not in one.attacks[0].extras
    # every group once, on its worker's own device; two workers, one device each
    assert len(trained) == 4 and len({seeds[0] for *_, seeds in trained}) == 4
    assert all(len(seeds) == 1 and on == f"standin:{current}" for _, on, current, seeds in trained)
    workers: dict[str, set[str]] = {}
    for thread, on, _, _ in trained:
        workers.setdefault(thread, set()).add(on)
    assert sorted(map(sorted, workers.values())) == [["standin:0"], ["standin:1"]]
    # scored where each group trained: group g on standin:g%2, the outputs back on the host
    assert sorted((todo, device) for device, todo, *_ in read) == [((g,), f"standin:{g % 2}") for g in range(4)]
    assert all(device == f"standin:{current}" and where == {"cpu"} for device, _, current, where in read)
    # the same numbers, bit for bit
    assert one.records_table() == two.records_table() and one.records_table()
    assert [(c.value, c.ci, c.status) for c in one.checks] == [(c.value, c.ci, c.status) for c in two.checks]
    assert [a.auc for a in one.attacks] == [a.auc for a in two.attacks]
    assert any("4 groups over standin:0, standin:1" in n for n in two.attacks[0].notes)
    assert "reference-model groups over standin:0, standin:1" in render(two, "html")


def test_a_group_left_on_the_other_gpu_fails(gpus):
    """The stand-in refuses what CUDA refuses: a model on ``standin:1`` fed rows on ``standin:0`` (the mix-up a
    worker scoring with another worker's rows would make), and a state moved between the two only by a copy."""
    net = make_model().to("standin:1")
    rows = torch.as_tensor(synthetic(4, 0, 0.0)[0], device="standin:0")
    with pytest.raises(RuntimeError, match="standin:0 and standin:1"):
        net(rows)
    assert str(net(rows.to("standin:1")).device) == "standin:1"


def test_more_gpus_than_torch_sees_is_one_sentence(gpus, world):
    """``--devices 7`` or GPU 5 with two GPUs, and ``--devices`` with the CPU or Ray: one sentence (exit 2), before
    anything is loaded."""
    with pytest.raises(PrivgateError, match=r"--devices 7 asks for 7 GPUs, but torch sees 2 \(standin:0, standin:1\)"):
        _check({**world, "members": "missing.npz"}, devices="7")  # refused before the members are read
    with pytest.raises(PrivgateError, match="--devices 0,5 names GPU 5, but torch sees 2"):
        RunOptions(device="cuda", devices="0,5").resolved()
    with pytest.raises(PrivgateError, match="each task runs on a GPU Ray assigns"):
        RunOptions(device="cuda", devices="2", executor="ray").resolved()
    assert RunOptions(device="cuda", devices="cuda:1").resolved().device_list == ("standin:1",)
    assert RunOptions(device="cuda").resolved().device_list == ("standin:0", "standin:1")
    assert RunOptions(device="cpu").resolved().device_list == ("cpu",)
    with pytest.raises(ValueError, match="names a GPU twice"):
        RunOptions(devices="0,cuda:0")


@pytest.mark.parametrize(
    "flags, needle",
    [
        (("--device", "cpu", "--devices", "2"), "--devices 2 spreads reference models over GPUs, but device 'cpu'"),
        (("--devices", "7"), "--devices 7 names GPUs, but torch sees no CUDA GPU"),
        (("--devices", "0,x"), "--devices '0,x' is not all, a count N"),
    ],
)
def test_devices_bad_input_through_the_cli(case, flags, needle):
    """The CLI in its own process: one sentence and exit 2, nothing written."""
    from cases import run_cli

    out = Path(case.dir) / "never.json"
    r = run_cli(
        "check", str(case.safe_ts), "--policy", "internal", "--members", str(case.members), "--nonmembers",
        str(case.nonmembers), "--json", str(out), *flags,
    )  # fmt: skip
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr + r.stdout and needle in " ".join(r.stderr.split()), r.stderr
    assert len(r.stderr.strip().splitlines()) <= 4 and not out.exists()


def test_devices_in_the_config_is_checked(tmp_path):
    """The config's ``devices`` key: the same grammar as the flag, one sentence naming the file when it is wrong."""
    from privgate.inputs.config import ConfigError, load_config

    good, bad = tmp_path / "privgate.toml", tmp_path / "bad" / "privgate.toml"
    bad.parent.mkdir()
    good.write_text('devices = "0,2"\n')
    bad.write_text('devices = "every"\n')
    assert load_config(good).get("devices") == "0,2"
    with pytest.raises(ConfigError, match=r"privgate.toml: 'devices': --devices 'every' is not all"):
        load_config(bad)
