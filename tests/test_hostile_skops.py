"""Hostile ``.skops`` files (issue 41 items 1 and 4): a file names nothing skops would run, and decodes to a bound.

Each attack is a crafted file handed to ``privgate check`` in its own process, as a pull request would commit
it; the variants run in-process through :func:`privgate.inputs.targets.skops_trust.vet`, which is what the CLI
calls before skops (or anything the file names) is imported. The allow-list itself is regenerated from the
installed libraries and its classes are built under an audit hook that sees files, processes and sockets.
"""

from __future__ import annotations

import contextlib
import json
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
from cases import run_cli

from privgate.errors import TargetError
from privgate.inputs.targets import skops_types
from privgate.inputs.targets.skops_trust import check_imported, trusted_names, vet


def _json(value) -> dict:
    return {"__class__": type(value).__name__, "__module__": "builtins", "__loader__": "JsonNode",
            "content": json.dumps(value), "is_json": True}  # fmt: skip


def _seq(kind: str, *items) -> dict:
    return {"__class__": kind, "__module__": "builtins", "__loader__": f"{kind.title()}Node", "content": list(items)}


def _dict(**content) -> dict:
    return {"__class__": "dict", "__module__": "builtins", "__loader__": "DictNode", "content": content,
            "key_types": _seq("list", *(_type("builtins.str") for _ in content))}  # fmt: skip


def _type(name: str) -> dict:
    return _node("TypeNode", name)


def _node(loader: str, name: str, **state) -> dict:
    module, _, cls = name.rpartition(".")
    return {"__class__": cls, "__module__": module, "__loader__": loader, **state}


def _array(entry: str, **state) -> dict:
    return _node("NdArrayNode", "numpy.ndarray", type="numpy", file=entry, **state)


def _model(**attrs) -> dict:
    """A LogisticRegression node whose attributes are ``attrs`` (skops builds them before the model)."""
    return _node("ObjectNode", "sklearn.linear_model._logistic.LogisticRegression", content=_dict(**attrs))


def _skops(path: Path, root: dict, entries: dict[str, bytes] | None = None, protocol: int = 2) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as z:
        z.writestr("schema.json", json.dumps({**root, "protocol": protocol, "_skops_version": "0.16.0"}))
        for name, data in (entries or {}).items():
            z.writestr(name, data)
    return path


def _npy(shape: tuple[int, ...], dtype: str = "<f8", body: bytes | None = None) -> bytes:
    header = repr({"descr": dtype, "fortran_order": False, "shape": shape}).encode()
    header += b" " * (63 - (len(header) + 10) % 64) + b"\n"
    size = int(np.prod(shape)) * np.dtype(dtype).itemsize
    return b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header + (bytes(size) if body is None else body)


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    """The audit tables a pull request's model is checked on (read before the model)."""
    from tables_case import table

    d = tmp_path_factory.mktemp("skops_data")
    table(60, 1).to_parquet(d / "m.parquet")
    table(60, 2).to_parquet(d / "n.parquet")
    return d


def _check(model: Path, data: Path, *more: str, memory: int | None = None):
    return run_cli("check", str(model), "--policy", "internal", "--members", str(data / "m.parquet"), "--nonmembers",
                   str(data / "n.parquet"), "--no-step-summary", *more, cwd=model.parent, memory=memory)  # fmt: skip


def _refused(r, *needles: str) -> str:
    err = " ".join(r.stderr.split())
    assert r.returncode == 2 and "Traceback" not in r.stderr and err.startswith("error:"), (r.returncode, r.stderr)
    assert len(r.stderr.strip().splitlines()) <= 4 and err.count(". ") == 0, err  # one sentence
    for needle in needles:
        assert needle in err, err
    return err


# ------------------------------------------------------------------ item 1: nothing the file names runs


def test_a_function_a_skops_file_names_for_skops_to_call_never_runs(data, tmp_path):
    """Before: ``sklearn.utils._testing.check_output`` passed as "a scikit-learn type" and skops called it with the
    file's arguments while loading: ``sh -c 'id > PWNED'`` ran."""
    call = _node("ConstructorFromReduceNode", "sklearn.utils._testing.check_output",
                 content=_seq("tuple", _seq("list", _json("sh"), _json("-c"), _json("id > PWNED"))))  # fmt: skip
    r = _check(_skops(tmp_path / "model.skops", _model(classes_=call)), data)
    _refused(r, "model.skops: the skops file names 'sklearn.utils._testing.check_output' for skops to import and call")
    assert not (tmp_path / "PWNED").exists()


def test_a_trusted_type_from_the_config_must_be_a_class_of_a_model(data, tmp_path):
    """Before: a pull request's ``privgate.toml`` could trust ``timeit.timeit`` and its model run any statement."""
    (tmp_path / "privgate.toml").write_text('trust_types = ["timeit.timeit"]\n')
    stmt = "open('PWNED', 'w').close()"
    call = _node("ConstructorFromReduceNode", "timeit.timeit", content=_seq("tuple", _json(stmt), _json("pass")))
    r = _check(_skops(tmp_path / "model.skops", _model(classes_=call)), data)
    _refused(r, "--trust-type 'timeit.timeit': 'timeit' is the standard library's, which holds no model's types")
    assert not (tmp_path / "PWNED").exists()


def _refusal(root: dict, tmp_path: Path, trust: tuple[str, ...] = (), protocol: int = 2) -> str:
    with pytest.raises(TargetError) as err:
        vet(_skops(tmp_path / "m.skops", root, protocol=protocol), trust)
    return str(err.value)


_EMPTY = _dict()
#: (what skops does with the name, the node): every one refused before anything is imported.
ATTACKS = {
    "numpy.savetxt": _node("ConstructorFromReduceNode", "numpy.savetxt", content=_seq("tuple", _json("a.pth"))),
    "scipy._lib._tmpdirs.rmtree": _node(
        "ConstructorFromReduceNode", "scipy._lib._tmpdirs.rmtree", content=_seq("tuple", _json("/tmp/x"))
    ),  # fmt: skip
    "sklearn.datasets._base.makedirs": _node(
        "ConstructorFromReduceNode", "sklearn.datasets._base.makedirs", content=_seq("tuple", _json("x"))
    ),  # fmt: skip
    "sklearn.utils.discovery.import_module": _node("FunctionNode", "sklearn.utils.discovery.import_module"),
    "numpy.memmap": _node("ConstructorFromReduceNode", "numpy.memmap", content=_seq("tuple", _json("x"))),
    "numpy.memmap ": _node("NdArrayNode", "numpy.memmap", type="json", content=[], shape=_seq("tuple", _json(0))),
    "numpy.memmap  ": _seq("list", _node("ListNode", "numpy.memmap", content=[_json("x")])),
    "builtins.eval": _node("TypeNode", "builtins.eval"),
    "numpy.save": _node("FunctionNode", "numpy.save"),
    "subprocess.check_output": _node(
        "PartialNode",
        "functools.partial",
        content={
            "func": _node("FunctionNode", "subprocess.check_output"),
            "args": _seq("tuple", _json("id")),
            "kwds": _EMPTY,
            "namespace": _json(None),
        },
    ),  # fmt: skip
    "logging.FileHandler": _node("ObjectNode", "logging.FileHandler", content=_EMPTY),
    "tempfile.TemporaryDirectory": _node(
        "DictNode", "tempfile.TemporaryDirectory", content={}, key_types=_seq("list")
    ),  # fmt: skip
    "numpy.ndarray": _node(
        "MethodNode",
        "numpy.ndarray",
        content={
            "func": "tofile",
            "obj": _node("NdArrayNode", "numpy.ndarray", type="json", content=[], shape=_seq("tuple", _json(0))),
        },
    ),  # fmt: skip
    "operator.methodcaller": _node("OperatorFuncNode", "operator.methodcaller", attrs=_seq("tuple", _json("system"))),
    "sklearn.utils._testing.check_output ": _node(
        "LossNode",
        "sklearn.utils._testing.check_output",
        content=_EMPTY,
        __reduce__={"args": _seq("tuple", _json("id"))},
    ),  # fmt: skip
    "numpy.random.seed": _node(
        "RandomGeneratorNode",
        "numpy.random._generator.Generator",
        content={"bit_generator": _dict(bit_generator=_json("seed")), "seed_seq": _EMPTY},
    ),  # fmt: skip
    "tempfile.mkdtemp": _dict(
        x=_node("DictNode", "builtins.dict", content={"a": _json(1)}, key_types=_seq("list", _type("tempfile.mkdtemp")))
    ),  # fmt: skip
}


@pytest.mark.parametrize("name", list(ATTACKS))
def test_every_name_a_node_would_import_is_on_the_allow_list_for_what_skops_does_with_it(name, tmp_path):
    """Functions and classes of scikit-learn, numpy and scipy (and what those merely import) pass no more by their
    package; a key type, a bound method, an operator, a partial's function, a bit generator are names too."""
    assert f"'{name.strip()}'" in _refusal(ATTACKS[name], tmp_path)


def test_a_protocol_0_function_node_is_checked_by_the_name_it_imports(tmp_path):
    """skops' protocol-0 ``FunctionNode`` imports the ``module_path.function`` of its content, not its own name."""
    node = {**_node("FunctionNode", "numpy.log1p"), "content": {"module_path": "os", "function": "system"}}
    assert "'os.system' for skops to import and hand to the model to call" in _refusal(node, tmp_path, protocol=0)


@pytest.mark.parametrize(
    "name", ["timeit.timeit", "cProfile.run", "pdb.run", "pydoc.pipepager", "_posixsubprocess.fork_exec",
             "logging.FileHandler", "numpy.memmap", "scipy.sparse.load_npz", "sklearn.utils._testing.check_output",
             "builtins.eval", "privgate.io.atomic.write_bytes"],
)  # fmt: skip
def test_the_user_cannot_trust_a_name_of_the_standard_library_numpy_scipy_privgate_or_scikit_learns_tests(name):
    """Before: the user's (or a config's) trusted names were refused only for 30 modules such as ``os``."""
    with pytest.raises(TargetError, match="never trusts|already trusts|test helpers"):
        trusted_names([name])


def test_a_trusted_name_is_a_class_defined_where_it_says_or_the_users_own_function(tmp_path, monkeypatch):
    """Checked once imported, before skops calls anything: a re-export, an installed package's function, an
    instance, and the user's own function where skops would call it, are one sentence each."""
    (tmp_path / "mine.py").write_text(
        "from os import makedirs\nimport json\nclass Step:\n    pass\ndef twice(x):\n    return 2 * x\nONE = Step()\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    check_imported({"mine.Step": {"ObjectNode"}, "mine.twice": {"FunctionNode"}})  # the user's own: trusted
    for name, loaders, needle in [
        ("mine.makedirs", {"ConstructorFromReduceNode"}, "is a re-export of 'os.makedirs'"),
        ("sklearn.datasets._base.makedirs", {"FunctionNode"}, "is a re-export of 'os.makedirs'"),
        ("yaml.safe_load", {"FunctionNode"}, "is a function of an installed package"),
        ("mine.ONE", {"ObjectNode"}, "is a Step, not a class"),
        ("mine.twice", {"ConstructorFromReduceNode"}, "is a function, and the file would call it while loading"),
        ("sklearn.utils._bunch.Bunch", {"ObjectNode"}, "is not a scikit-learn estimator"),
    ]:
        with pytest.raises(TargetError, match=needle):
            check_imported({name: loaders})


def test_a_pipeline_whose_memory_caches_pickles_is_refused_once_loaded(tmp_path):
    """``Pipeline(memory=DIR)``: joblib would write its fitted steps to DIR as pickles, and load whatever pickle a
    pull request put there when privgate refits the pipeline for its reference models."""
    import skops.io as sio
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    from privgate.inputs.targets.sklearn import load_skops

    x, y = np.random.default_rng(0).normal(size=(40, 2)), np.arange(40) % 2
    sio.dump(make_pipeline(StandardScaler(), LogisticRegression(), memory="cache").fit(x, y), tmp_path / "p.skops")
    with pytest.raises(TargetError, match=r"the model's 'memory' is 'cache': joblib would cache fitted steps"):
        load_skops(tmp_path / "p.skops")


# ------------------------------------------------------------------ item 4: bounded before anything inflates


def test_an_array_named_by_many_nodes_is_refused_before_it_is_read_again_and_again(data, tmp_path):
    """Before: one 16 MiB entry named by 200 nodes of a 70 KB file was read 200 times (3.2 GB) inside
    ``get_untrusted_types``, before any trust decision; under a 1 GiB address-space limit, one sentence now."""
    zeros = _npy((2 << 20,))  # 16 MiB of float64 zeros, 16 KB deflated
    root = _model(coef_=_seq("list", *(_array("a.npy") for _ in range(200))))
    model = _skops(tmp_path / "bomb.skops", root, {"a.npy": zeros})
    assert model.stat().st_size < 100_000
    r = _check(model, data, memory=1 << 30)
    _refused(r, "bomb.skops: the skops file's arrays decode to more than the 2.0 GiB privgate loads from one model",
             "the largest, 'a.npy', holds 16.0 MiB")  # fmt: skip


def test_the_npz_inside_a_sparse_matrix_is_checked_as_audit_data_is(data, tmp_path):
    """Before: the ``.npz`` a sparse-matrix node names was never looked into: 72 MiB of zeros deflated to 0.3 MB
    inflated when scipy read it (and a header may declare any shape)."""
    import io

    inner = io.BytesIO()
    with zipfile.ZipFile(inner, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as z:
        z.writestr("format.npy", _npy((), "<U3", "csr".encode("utf-32-le")))
        z.writestr("data.npy", _npy((9 << 20,)))
    sparse = _node("SparseMatrixNode", "scipy.sparse._csr.csr_matrix", type="scipy", file="s.npz")
    model = _skops(tmp_path / "sparse.skops", _model(coef_=sparse), {"s.npz": inner.getvalue()})
    assert model.stat().st_size < 1_000_000
    r = _check(model, data, memory=1 << 30)
    _refused(r, "sparse.skops: the sparse matrix 's.npz': array 'data.npy' inflates", "a compression bomb")
    # a shape its entry cannot hold, and more entries than scipy writes, inside the same nested archive
    lie = io.BytesIO()
    with zipfile.ZipFile(lie, "w") as z:
        z.writestr("data.npy", _npy((10**9,), body=b""))
    model = _skops(tmp_path / "lie.skops", _model(coef_=sparse), {"s.npz": lie.getvalue()})
    with pytest.raises(TargetError, match=r"array 'data.npy' declares shape \(1000000000,\) of float64"):
        vet(model)
    many = io.BytesIO()
    with zipfile.ZipFile(many, "w") as z:
        for i in range(20):
            z.writestr(f"{i}.npy", b"")
    model = _skops(tmp_path / "many.skops", _model(coef_=sparse), {"s.npz": many.getvalue()})
    with pytest.raises(TargetError, match="the zip declares 20 entries, more than the 16 privgate reads"):
        vet(model)


def test_a_schema_is_bounded_in_depth_nodes_and_bytes_and_names_only_entries_it_holds(tmp_path):
    deep: dict = _json(1)
    for _ in range(150):
        deep = _seq("list", deep)
    assert "its nodes nest more than 100 deep" in _refusal(deep, tmp_path)
    assert "the entry 'gone.npy', which the zip does not hold" in _refusal(_model(coef_=_array("gone.npy")), tmp_path)
    assert "a node's loader is 'EvalNode'" in _refusal(_node("EvalNode", "builtins.eval"), tmp_path)
    forged = _node("ObjectNode", "sklearn.pipeline.Pipeline", __module__="sklearn.pipeline", __class__="a.Pipeline")
    assert "a node names 'sklearn.pipeline'.'a.Pipeline'" in _refusal(forged, tmp_path)
    # three nodes naming one array cost three reads; under one __id__ they are one object to skops: one read
    each = 2 * 8000 + 128  # the entry (header and 1,000 float64) and the array it decodes to
    model = _skops(tmp_path / "three.skops", _model(coef_=_seq("list", *(_array("a.npy") for _ in range(3)))),
                   {"a.npy": _npy((1000,))})  # fmt: skip
    with pytest.raises(TargetError, match="decode to more than the 19.5 KiB"):
        vet(model, most=20_000)
    shared = _seq("list", *(_array("a.npy", __id__=7) for _ in range(3)))
    assert (
        "numpy.ndarray"
        in vet(_skops(tmp_path / "one.skops", _model(coef_=shared), {"a.npy": _npy((1000,))}), most=each).trusted
    )


# ------------------------------------------------------------------ the allow-list


def test_the_committed_allow_list_is_what_the_installed_libraries_give():
    """A scikit-learn, numpy, scipy or skops upgrade that adds, moves or drops a class or function is noticed here:
    regenerate with ``python -m privgate.inputs.targets.skops_types > privgate/inputs/targets/skops_types.txt``."""
    committed, generated = skops_types.allowed(), skops_types.generate()
    diff = {r: sorted(committed.get(r, frozenset()) ^ generated.get(r, frozenset())) for r in {*committed, *generated}}
    assert not any(diff.values()), {r: d[:10] for r, d in diff.items() if d}
    assert len(committed["object"]) > 250 and "sklearn.tree._tree.Tree" in committed["object"]
    for never in (
        "numpy.memmap",
        "numpy.void",
        "numpy.save",
        "numpy.savetxt",
        "numpy.load",
        "tempfile.TemporaryFile",
        "sklearn.utils._testing.check_output",
        "sklearn.datasets._base.makedirs",
        "logging.FileHandler",
    ):
        assert not any(never in names for names in committed.values()), never  # fmt: skip


_WATCHED = ("open", "os.", "subprocess.", "socket.", "shutil.", "ctypes.", "exec", "mmap.", "webbrowser.")


def _effects(cls: type, seen: list[str]) -> list[str]:
    """The file, process and network events building ``cls`` raises, as skops may build it."""
    seen.clear()
    for make in (lambda: cls.__new__(cls), cls, lambda: cls("privgate-probe"), lambda: cls(["privgate-probe"])):
        with contextlib.suppress(Exception):  # a constructor that refuses its arguments did nothing
            make()
    return list(seen)


def test_no_class_on_the_allow_list_touches_files_processes_or_the_network_when_built(tmp_path, monkeypatch):
    """Every class is resolved (a re-export would not match its name) and built with no argument, a string and a
    list under an audit hook, twice (the second time is counted: a lazy import reads its files once); memmap,
    TemporaryFile and FileHandler, built the same way, are seen."""
    import importlib
    import warnings

    monkeypatch.chdir(tmp_path)
    seen: list[str] = []
    watching = []
    sys.addaudithook(lambda event, _: watching and event.startswith(_WATCHED) and seen.append(event))
    table = skops_types.allowed()
    classes = set().union(*(names for role, names in table.items() if role != "function"))
    touched = {}
    watching.append(True)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # deprecated estimators say so when built
            import logging
            import tempfile

            assert all(_effects(c, seen) for c in (np.memmap, tempfile.TemporaryFile, logging.FileHandler))
            for name in sorted(classes):
                module, _, attr = name.rpartition(".")
                cls = getattr(importlib.import_module(module), attr)
                home = f"{cls.__module__}.{cls.__qualname__}"
                if name in table["bit_generator"]:  # skops resolves a bit generator in numpy.random
                    assert issubclass(cls, np.random.BitGenerator) and module == "numpy.random", name
                else:
                    assert isinstance(cls, type) and home in (name, f"numpy.{attr}"), name
                _effects(cls, seen)  # a module imported lazily on the first build reads its files once
                if events := _effects(cls, seen):
                    touched[name] = events
    finally:
        watching.clear()
    assert not touched, touched
    for name in table["function"]:
        module, _, attr = name.rpartition(".")
        fn = getattr(importlib.import_module(module), attr)
        pure = ("sklearn.metrics", "sklearn.feature_selection", "scipy.special", "scipy._lib.array_api_compat")
        assert isinstance(fn, np.ufunc) or module.startswith(pure), name


def test_models_of_every_kind_pass_the_check_and_load(tmp_path):
    """The classes and functions a fitted model holds besides its estimators: a KD-tree and its distance, a
    splitter, a scorer and its metric, an SGD loss, a selector's score function, an optimiser, kernels, a
    calibrator, a spline and its array namespace, a column selector (the forest, boosting and linear pipelines of
    tests/tables_case.py load in test_sklearn_target.py)."""
    import warnings

    import pandas as pd
    import skops.io as sio
    from sklearn import (
        calibration,
        compose,
        ensemble,
        gaussian_process,
        linear_model,
        model_selection,
        naive_bayes,
        neighbors,
        neural_network,
        pipeline,
        preprocessing,
    )
    from sklearn.feature_selection import SelectKBest

    from privgate.inputs.targets.sklearn import load_skops

    rng = np.random.default_rng(0)
    x = pd.DataFrame({"a": rng.normal(size=60), "b": rng.normal(size=60), "c": rng.choice(["u", "v"], 60)})
    y = (x["a"] > 0).astype(int) + (x["b"] > 0)
    cols = compose.ColumnTransformer([("oh", preprocessing.OneHotEncoder(), ["c"]),
                                      ("sc", preprocessing.SplineTransformer(n_knots=3),
                                       compose.make_column_selector(dtype_include=np.number))])  # fmt: skip
    voters = [
        neighbors.KNeighborsClassifier(3, algorithm="kd_tree"),
        model_selection.GridSearchCV(
            linear_model.SGDClassifier(loss="modified_huber"), {"alpha": [1e-3]}, cv=2, scoring="accuracy"
        ),
        pipeline.make_pipeline(SelectKBest(k=2), neural_network.MLPClassifier(max_iter=5)),
        gaussian_process.GaussianProcessClassifier(),
        calibration.CalibratedClassifierCV(naive_bayes.GaussianNB(), cv=2),
    ]
    vote = ensemble.VotingClassifier([(str(i), v) for i, v in enumerate(voters)], voting="soft")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # five iterations of an MLP do not converge
        fitted = pipeline.make_pipeline(cols, vote).fit(x, y)
    sio.dump(fitted, tmp_path / "vote.skops")
    loaded = load_skops(tmp_path / "vote.skops").estimator
    assert (loaded.predict_proba(x) == fitted.predict_proba(x)).all()


def test_a_forged_model_whose_classes_are_a_scalar_is_one_sentence(tmp_path):
    """Before: a model whose ``classes_`` was a number loaded, then ended the run in an internal error (exit 4)."""
    from privgate.inputs.targets.sklearn import load_skops

    model = _skops(tmp_path / "m.skops", _model(classes_=_json(0)))
    with pytest.raises(TargetError, match="the LogisticRegression's classes_ is not a list of two or more classes"):
        load_skops(model)
