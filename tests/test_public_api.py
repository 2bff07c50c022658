"""The public surface (docs/api.md) is what the packages export, every name resolves, and nothing else is listed."""

from __future__ import annotations

import re
import subprocess
import sys

import privgate
import privgate.api
import privgate.attacks
import pytest_privgate

SECTIONS = {"`privgate`": privgate, "`pytest_privgate`": pytest_privgate, "Registries": privgate.attacks}


def _listed(page: str) -> dict[str, set[str]]:
    """Names in the first column of each section's table, by section heading."""
    out: dict[str, set[str]] = {}
    for block in re.split(r"^## ", page, flags=re.M)[1:]:
        heading = block.splitlines()[0]
        key = next((k for k in SECTIONS if heading.startswith(k)), None)
        if key is not None:
            out[key] = set(re.findall(r"^\| `([A-Za-z_]+)` \|", block, flags=re.M))
    return out


def test_the_api_page_lists_exactly_what_each_package_exports(root):
    listed = _listed((root / "docs" / "api.md").read_text(encoding="utf-8"))
    assert set(listed) == set(SECTIONS)
    for key, module in SECTIONS.items():
        exported = set(module.__all__) - {"__version__"}
        assert listed[key] == exported, (key, listed[key] ^ exported)
        for name in exported:
            assert getattr(module, name) is not None
            assert name in dir(module)
    # privgate.api's jobs and settings are privgate's own objects, not copies
    for name in privgate.api.__all__:
        assert getattr(privgate, name) is getattr(privgate.api, name), name


def test_an_unknown_name_is_an_attribute_error_and_import_privgate_loads_no_library():
    try:
        privgate.no_such_name  # noqa: B018
    except AttributeError as e:
        assert "no_such_name" in str(e)
    else:
        raise AssertionError("privgate.no_such_name resolved")
    probe = "import sys, privgate; print(sorted(m for m in ('torch', 'sklearn', 'numpy') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
