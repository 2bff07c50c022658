from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

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


def privgate_cmd() -> list[str]:
    """The installed console script (as a user runs it)."""
    exe = Path(sys.executable).with_name("privgate")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "privgate.cli"]
