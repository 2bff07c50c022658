from __future__ import annotations

import atexit
import getpass
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

ROOT = Path(__file__).resolve().parent.parent
os.environ.setdefault("OMP_NUM_THREADS", "1")
# privgate's default is the cores this process may use; the suite runs several pytest-xdist workers on the same
# cores, so every privgate run it starts (the CLI in a subprocess or in process, the pytest plugin's audits) keeps
# one thread, as in-process runs do (torch's one thread, below)
os.environ.setdefault("PRIVGATE_THREADS", "1")
# what importing scikit-learn (and joblib) writes into os.environ, written before any run so every CLI fork server
# of this session is keyed on the environment it will have anyway (tests/cli_fork.py: else the first import
# changes the key and each worker starts a second server)
os.environ.setdefault("KMP_DUPLICATE_LIB_OK", "True")
os.environ.setdefault("KMP_INIT_AT_FORK", "FALSE")
# the same for torch's compiler: the first torch.export in a worker (an in-process harden writes one) or peft import
# loads torch._inductor, which exports its cache folder, tempdir/torchinductor_USER
os.environ.setdefault(
    "TORCHINDUCTOR_CACHE_DIR", os.path.join(tempfile.gettempdir(), f"torchinductor_{getpass.getuser()}")
)
# the few runs with more than one thread (tests/test_threads.py) share the cores with the other workers: OpenMP's
# idle threads sleep instead of spinning, as privgate.cli.guard.passive_openmp has them in a CLI run (read when
# OpenMP loads, so set before torch or scikit-learn is imported; 2.7x faster measured on a loaded 2-core machine)
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

# The CLI's default reference-model cache and cache key live in the user's XDG folders (privgate.cli.cache_settings):
# the tests' runs keep theirs in a folder of this session (each test gets its own below), never in the user's home.
_XDG = Path(tempfile.mkdtemp(prefix="privgate-tests-xdg-"))
atexit.register(shutil.rmtree, _XDG, ignore_errors=True)
os.environ["XDG_CACHE_HOME"], os.environ["XDG_CONFIG_HOME"] = str(_XDG / "cache"), str(_XDG / "config")
for _name in ("PRIVGATE_CACHE_DIR", "PRIVGATE_CACHE_KEY", "PRIVGATE_CACHE_KEY_FILE"):
    os.environ.pop(_name, None)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--clinical-seed",
        type=int,
        default=0,
        help="seed of the clinical-notes example the language-model tests build (the `clinical` fixture; default 0): "
        "the tests' assertions hold for other seeds too, and this checks it",
    )


def pytest_configure(config: pytest.Config) -> None:
    """``make test-gpu`` (``PRIVGATE_DEVICE=cuda``) stops here, in one sentence, on a machine without a CUDA GPU.

    With the variable set, every CLI run of the suite gets ``--device cuda`` (the CLI reads ``$PRIVGATE_DEVICE``)
    and every in-process run ``auto``, which this check has made the GPU.
    """
    if os.environ.get("PRIVGATE_DEVICE", "").strip().lower() == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise pytest.UsageError(
                "PRIVGATE_DEVICE=cuda (make test-gpu) runs the suite on a CUDA GPU, but torch sees none on this "
                "machine (torch.cuda.is_available() is False); run make test instead."
            )


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """This worker's CLI fork servers end with its session, waited for (tests/cli_fork.py)."""
    fork = sys.modules.get("cli_fork")
    if fork is not None:
        fork.close_all()


@pytest.fixture(scope="session", autouse=True)
def _gpu_lane():
    """``make test-gpu``: every in-process ``auto`` run takes the GPU, whatever ``auto``'s estimate of its work.

    The lane exists to run the suite's paths on a GPU; the suite's models are small, and ``auto`` would keep
    them on the CPU (:func:`privgate.device.choose_device`). Installed after the test modules are imported, so a
    test that calls ``choose_device`` itself gets the real one.
    """
    if os.environ.get("PRIVGATE_DEVICE", "").strip().lower() != "cuda":
        yield
        return
    import privgate.device as device

    real = device.choose_device

    def on_the_gpu(work, cuda, threads, *costs):
        if not cuda:
            return real(work, cuda, threads, *costs)
        return device.DeviceChoice("cuda", "make test-gpu runs every in-process run on the GPU")

    device.choose_device = on_the_gpu
    yield
    device.choose_device = real


@pytest.fixture(scope="session", autouse=True)
def _one_thread():
    import torch

    torch.set_num_threads(1)
    yield


@pytest.fixture(autouse=True)
def _environment_as_found():
    """What a test's in-process imports and runs export into ``os.environ`` ends with the test.

    Libraries write variables at import or first use (lightning's ``PYTORCH_NVML_BASED_CUDA_CHECK``, Ray's
    ``PYTHONBREAKPOINT``, …); left there, every later CLI run of this worker would key a fork server of its own
    (tests/cli_fork.py: one more start of privgate's imports) and see a variable its user's shell would not have.
    """
    before = dict(os.environ)
    yield
    if os.environ != before:
        os.environ.clear()
        os.environ.update(before)


@pytest.fixture(autouse=True)
def _own_cache_home(tmp_path_factory, monkeypatch):
    """Each test's CLI runs start with an empty default cache and a cache key of their own (as a fresh runner)."""
    home = tmp_path_factory.mktemp("xdg")
    monkeypatch.setenv("XDG_CACHE_HOME", str(home / "cache"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / "config"))


@pytest.fixture
def pytester(pytester):
    """pytester whose in-process runs take out of ``sys.modules`` afterwards only the modules they wrote.

    pytester's own rule drops every module first imported during a run or a test (privgate's lazily imported
    modules, xgboost's, …); a later test of the same worker then imports them again, and objects built from the
    new classes fail ``isinstance`` against the old ones that kept modules still hold (a boosted target's
    recipe check stopped raising after an in-process plugin run). The test files, conftests and helpers a
    run writes under ``pytester.path`` still leave, so the next run imports its own.
    """
    from _pytest.pytester import SysModulesSnapshot

    root = str(pytester.path)

    def keep(name: str) -> bool:
        return not (getattr(sys.modules.get(name), "__file__", None) or "").startswith(root)

    taker = "_Pytester__take_sys_modules_snapshot"
    assert hasattr(pytester, taker), "pytest's Pytester no longer takes sys.modules snapshots this way"
    setattr(pytester, taker, lambda: SysModulesSnapshot(preserve=keep))
    pytester._sys_modules_snapshot = SysModulesSnapshot(preserve=keep)
    return pytester


@pytest.fixture
def root() -> Path:
    return ROOT


@pytest.fixture(scope="session")
def case(tmp_path_factory):
    """A leaky and a regularised model on synthetic data, with audit files (built once)."""
    from cases import build_case

    return build_case(tmp_path_factory.mktemp("case"))


def clinical_builder():
    """The clinical-notes example's builder module (``examples/clinical_notes/build.py``)."""
    import importlib.util

    name = "clinical_build"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, ROOT / "examples" / "clinical_notes" / "build.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # its dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def built_once(tmp_path_factory, name: str, build) -> Path:
    """``build(folder)`` run once per test session, even across xdist workers, and its folder shared.

    The first worker to ask builds under a file lock in the directory all workers' temporary folders share;
    the others wait and reuse the folder (a ``.built`` marker says it is complete). Tests only read it.
    """
    from filelock import FileLock

    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        return build(tmp_path_factory.mktemp(name))
    folder = base.parent / f"shared-{name}"
    with FileLock(str(folder) + ".lock"):
        if not (folder / ".built").exists():
            if folder.exists():
                shutil.rmtree(folder)  # a build that was interrupted
            folder.mkdir()
            build(folder)
            (folder / ".built").touch()
    return folder


@pytest.fixture(scope="session")
def clinical(tmp_path_factory, pytestconfig) -> Path:
    """The clinical-notes example built with its test profile, once per test session (shared by the workers).

    ``base/`` (the public base model), ``memorised/`` and ``other/`` (fine-tuned on the members or on other
    records), ``members.jsonl``/``nonmembers.jsonl`` and the canaries: every language-model test uses these.
    Seed 0 unless ``--clinical-seed`` says otherwise (the builder's public text is its own, made from the seed,
    so a seed gives the same models on every Python version).
    """
    seed = pytestconfig.getoption("clinical_seed")
    return built_once(tmp_path_factory, f"clinical-{seed}", lambda d: clinical_builder().build(d, "test", seed=seed))


@pytest.fixture(scope="session")
def tables(tmp_path_factory) -> Path:
    """A table with text columns and labels and scikit-learn pipelines on it (tests/tables_case.py), built once."""
    from tables_case import build_tables

    return built_once(tmp_path_factory, "tables", build_tables)


@pytest.fixture(scope="session")
def tiny(tmp_path_factory) -> dict:
    """The remediation tests' memorising digits model, its recipe, audit files and policies (tests/remediation_case.py),
    built once per worker: the CLI tests write their outputs into its folder."""
    from remediation_case import build_tiny

    return build_tiny(tmp_path_factory.mktemp("remediation"))


@pytest.fixture(scope="session")
def tiny_lm_dir(tmp_path_factory) -> Path:
    """The character-level tiny LM of tests/tiny_lm.py, trained once per test session and saved."""
    from tiny_lm import build_tiny_lm

    return built_once(tmp_path_factory, "tiny-lm", build_tiny_lm)
