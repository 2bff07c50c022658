"""``torch.export`` programs (``.pt2``) as targets: the numbers of the same model's TorchScript, and hostile files.

* a memorising MLP saved with ``torch.export.save`` (dynamic batch) fails the gate through the CLI (exit 1,
  format ``torch.export``, white-box) with the report numbers its TorchScript gives;
* a fixed batch dimension, a graph calling ``aten::from_file``, pickled sample inputs (that would write a file
  when unpickled), guard code, a name that would be written into Python, an oversized entry and a damaged archive
  are each one sentence and exit 2, and nothing in the file runs; so is a weight that declares 40 TB (torch would
  allocate it).
"""

from __future__ import annotations

import json
import pickle
import warnings
import zipfile
from pathlib import Path

import inproc
import numpy as np
import pytest
import torch
from cases import AUC_POLICY, make_model, run_cli, synthetic

from privgate import Target
from privgate.errors import TargetError


def _memorising(xm: np.ndarray, ym: np.ndarray) -> torch.nn.Module:
    torch.manual_seed(0)
    net = make_model()
    opt = torch.optim.Adam(net.parameters(), 1e-2)
    xt, yt = torch.from_numpy(xm), torch.from_numpy(ym)
    for _ in range(150):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(net(xt), yt).backward()
        opt.step()
    return net.eval()


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("exported")
    xm, ym = synthetic(200, seed=1, label_noise=0.8)
    xn, yn = synthetic(200, seed=2, label_noise=0.8)
    np.savez(d / "members.npz", x=xm, y=ym)
    np.savez(d / "nonmembers.npz", x=xn, y=yn)
    (d / "policy.yaml").write_text(AUC_POLICY)
    net = _memorising(xm, ym)
    x = torch.from_numpy(xm[:4])
    torch.export.save(torch.export.export(net, (x,), dynamic_shapes=({0: torch.export.Dim("batch")},)), d / "net.pt2")
    torch.export.save(torch.export.export(net, (x,)), d / "fixed.pt2")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.jit.save(torch.jit.script(net), str(d / "net.ts.pt"))
    return d


def _forge(src: Path, dst: Path, edit) -> Path:  # noqa: ANN001 - edit(name, bytes) -> bytes | None (dropped)
    """A copy of the archive ``src`` at ``dst`` with each entry passed through ``edit``."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_STORED) as zout:
        for info in zin.infolist():
            data = edit(info.filename, zin.read(info))
            if data is not None:
                zout.writestr(info.filename, data)
    return dst


def _edit_graph(change):  # noqa: ANN001, ANN202 - change(graph json) in place
    def edit(name: str, data: bytes) -> bytes:
        if "/models/" not in name:
            return data
        g = json.loads(data)
        change(g)
        return json.dumps(g).encode()

    return edit


def test_an_exported_program_fails_the_gate_with_its_torchscripts_numbers(exported):
    res = run_cli(
        "check", "net.pt2", "--policy", "policy.yaml", "--members", "members.npz", "--nonmembers", "nonmembers.npz",
        "--cache-dir", "off", "--json", "out.json", "-q", cwd=exported,
    )  # fmt: skip
    assert res.returncode == 1, res.stderr
    report = json.loads((exported / "out.json").read_text())
    assert report["verdict"] == "fail"
    assert report["target"]["format"] == "torch.export" and report["target"]["white_box"] is True
    ts = json.loads(inproc.render(inproc.check(*(exported / f for f in _FILES)), "json")["json"])
    assert ts["target"]["format"] == "torchscript"
    for a, b in zip(report["checks"], ts["checks"], strict=True):
        assert a["value"] == pytest.approx(b["value"], abs=1e-6) and a["ci"] == pytest.approx(b["ci"], abs=1e-6)
        assert a["status"] == b["status"] == "fail"
    assert report["checks"][0]["value"] > 0.6


_FILES = ("net.ts.pt", "policy.yaml", "members.npz", "nonmembers.npz")


def test_a_fixed_batch_dimension_is_one_sentence(exported):
    with pytest.raises(TargetError) as err:
        Target.load(exported / "fixed.pt2")
    assert "batch dimension is fixed at 4 rows" in str(err.value) and "dynamic_shapes" in str(err.value)


class _WritesAFile:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):  # noqa: ANN204 - unpickling this opens (creates) the marker file
        return (open, (str(self.marker), "w"))


def _hostile(src: Path, d: Path) -> dict[str, tuple[Path, str]]:
    marker = d / "unpickled"

    def from_file(g):  # noqa: ANN001, ANN202
        g["graph_module"]["graph"]["nodes"][0]["target"] = "torch.ops.aten.from_file.default"

    def higher_order(g):  # noqa: ANN001, ANN202
        g["graph_module"]["graph"]["nodes"][0]["target"] = "torch.ops.higher_order.cond"

    def guards(g):  # noqa: ANN001, ANN202
        g["guards_code"] = ["__import__('os').system('touch /tmp/x') or True"]

    def name(g):  # noqa: ANN001, ANN202
        g["graph_module"]["graph"]["nodes"][0]["outputs"][0]["as_tensor"]["name"] = 'x")\nimport os#'

    def expr(g):  # noqa: ANN001, ANN202
        g["range_constraints"] = {"__import__('os').getcwd()": {"min_val": 0, "max_val": None}}

    pickled = pickle.dumps(((_WritesAFile(marker),), {}))
    return {
        "from_file": (_forge(src, d / "from_file.pt2", _edit_graph(from_file)), "aten.from_file.default"),
        "higher_order": (_forge(src, d / "cond.pt2", _edit_graph(higher_order)), "higher_order.cond"),
        "guards": (_forge(src, d / "guards.pt2", _edit_graph(guards)), "guard code"),
        "name": (_forge(src, d / "name.pt2", _edit_graph(name)), "not a plain identifier"),
        "expr": (_forge(src, d / "expr.pt2", _edit_graph(expr)), "not a plain symbol"),
        "pickle": (
            _forge(src, d / "pickle.pt2", lambda n, b: pickled if "sample_inputs" in n else b),
            "sample inputs are pickled",
        ),
        "use_pickle": (
            _forge(src, d / "use_pickle.pt2", lambda n, b: b.replace(b'"use_pickle": false', b'"use_pickle": true')),
            "pickled",
        ),
        "oversized": (
            _forge(src, d / "oversized.pt2", lambda n, b: _declare(b) if n.endswith("weights_config.json") else b),
            "declares shape [100000, 100000, 1000]",
        ),
        "extra": (_forge(src, d / "extra.pt2", lambda n, b: b), "code"),  # replaced below with an extra entry
        "truncated": (d / "truncated.pt2", "not a readable zip archive"),
    }


def _declare(config: bytes) -> bytes:
    """A weights config whose first weight declares 40 TB (stored empty: torch would allocate it as zeros)."""
    g = json.loads(config)
    meta = next(iter(g["config"].values()))["tensor_meta"]
    meta["sizes"] = [{"as_int": 100000}, {"as_int": 100000}, {"as_int": 1000}]
    meta["strides"] = [{"as_int": 100000000}, {"as_int": 1000}, {"as_int": 1}]
    return json.dumps(g).encode()


def test_hostile_archives_are_one_sentence_and_run_nothing(exported, tmp_path):
    cases = _hostile(exported / "net.pt2", tmp_path)
    with zipfile.ZipFile(cases["extra"][0], "a") as z:
        z.writestr("net/data/aotinductor/model.so", b"\x7fELF")
    (tmp_path / "truncated.pt2").write_bytes((exported / "net.pt2").read_bytes()[:700])
    for key, (path, words) in cases.items():
        with pytest.raises(TargetError) as err:
            Target.load(path)
        assert words in str(err.value) and str(path) in str(err.value), (key, str(err.value))
        assert "\n" not in str(err.value)
    assert not (tmp_path / "unpickled").exists()
    res = run_cli(
        "check", str(cases["from_file"][0]), "--policy", "policy.yaml", "--members", "members.npz",
        "--nonmembers", "nonmembers.npz", "--cache-dir", "off", "-q", cwd=exported,
    )  # fmt: skip
    assert res.returncode == 2 and "aten.from_file.default" in res.stderr and "Traceback" not in res.stderr


def test_an_entry_that_inflates_too_far_is_refused_before_loading(exported, tmp_path, monkeypatch):
    from privgate.inputs.targets import exported as module

    monkeypatch.setattr(module, "RATIO_FROM", 1 << 20)  # a 2 MiB bomb stands for a 2 GiB one
    path = tmp_path / "bomb.pt2"
    with zipfile.ZipFile(exported / "net.pt2") as zin, zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zout:
        for info in zin.infolist():
            zout.writestr(info.filename, zin.read(info))
        zout.writestr("net/data/constants/tensor_9", b"\0" * (2 << 20))
    with pytest.raises(TargetError, match=r"inflates [\d,]+ times"):
        Target.load(path)


class _Branches(torch.nn.Module):
    """A model whose forward branches on its data: torch.export refuses it, TorchScript scripts it."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(20, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if bool(x.sum() > 0):
            return self.layer(x)
        return -self.layer(x)


def test_harden_writes_a_pt2_and_torchscript_only_for_a_model_that_cannot_export(tmp_path):
    from privgate.dp.hardened import default_output, files_named, hardened_files

    assert default_output("m.pt2").name == "m.hardened.pt2" and default_output("m.pt").name == "m.hardened.pt"

    x, _ = synthetic(8, seed=3, label_noise=0.0)
    torch.manual_seed(0)
    net = make_model().eval()
    files, described = hardened_files(net, tmp_path / "m.hardened.pt2", x)
    assert (
        set(files)
        == {tmp_path / "m.hardened.pt2", tmp_path / "m.hardened.state_dict.pt"}
        <= set(files_named(tmp_path / "m.hardened.pt2"))
    )
    assert described["format"] == "torch.export" and "export_refused" not in described
    for path, data in files.items():
        path.write_bytes(data)
    loaded = Target.load(tmp_path / "m.hardened.pt2")
    assert loaded.fmt == "torch.export" and loaded.white_box
    with torch.no_grad():
        assert torch.allclose(loaded.module(torch.from_numpy(x)), net(torch.from_numpy(x)), atol=1e-6)

    files, described = hardened_files(_Branches().eval(), tmp_path / "b.pt2", x)
    assert tmp_path / "b.pt" in files and tmp_path / "b.pt2" not in files and described["format"] == "torchscript"
    assert described["export_refused"].startswith("torch.export cannot export the model (")
    assert tmp_path / "b.pt" in files_named(tmp_path / "b.pt2")
