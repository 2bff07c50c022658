from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

ROOT = Path(__file__).resolve().parent.parent
os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture(scope="session", autouse=True)
def _one_thread():
    import torch

    torch.set_num_threads(1)
    yield


@pytest.fixture
def root() -> Path:
    return ROOT


@pytest.fixture(scope="session")
def case(tmp_path_factory):
    """A leaky and a regularised model on synthetic data, with audit files (built once)."""
    from cases import build_case

    return build_case(tmp_path_factory.mktemp("case"))
