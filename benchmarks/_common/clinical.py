"""The clinical-notes example's builder module (``examples/clinical_notes/build.py``), for the language-model
benchmarks: it builds the public base, the memorised and the other-records fine-tunes from a seed."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def builder() -> ModuleType:
    """``examples/clinical_notes/build.py``, loaded once as the module ``clinical_build``."""
    if "clinical_build" in sys.modules:
        return sys.modules["clinical_build"]
    spec = importlib.util.spec_from_file_location("clinical_build", ROOT / "examples" / "clinical_notes" / "build.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod
