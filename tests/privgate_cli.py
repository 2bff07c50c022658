"""How the tests start the ``privgate`` CLI: ``python -m privgate.cli`` with this interpreter.

That is the privgate this test process imports, wherever and however it is installed — an editable install,
a wheel, ``PYTHONPATH`` on a machine lent for ``make test-gpu`` — with or without a ``privgate`` console
script beside ``sys.executable``. The console script itself is checked where it is made: the wheel's entry
point (``tests/test_packaging.py``).
"""

from __future__ import annotations

import sys
from pathlib import Path

#: The command line that runs ``privgate``; append the arguments.
PRIVGATE: list[str] = [sys.executable, "-m", "privgate.cli"]


def privgate_on_path(folder: Path) -> Path:
    """A ``privgate`` executable in ``folder`` that runs :data:`PRIVGATE`, for scripts that call ``privgate`` from
    ``PATH`` (the GitHub action's steps); returns ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    exe = folder / "privgate"
    exe.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m privgate.cli "$@"\n')
    exe.chmod(0o755)
    return folder
