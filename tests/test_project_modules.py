"""Every Python file of the user's project that a run imported is an input: no output may land on one.

The recipe named by ``--recipe`` is found before anything is imported; the
modules *it* imports (``import defs`` for the model factory), the helpers of a
data factory, a mechanism or a trainer are only known once they are imported.
Each case runs the CLI as a user does (a subprocess) with an output naming such
a module and checks: exit 2, one sentence naming the file, and the project
folder exactly as it was (the module untouched, nothing new written).
"""

from __future__ import annotations

import hashlib
import shutil
import textwrap
from pathlib import Path

import pytest
from cases import run_cli

DEFS = textwrap.dedent(
    """
    from torch import nn

    def model_factory():
        return nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 4))
    """
)
#: The issue's reproduction: the recipe module imports the project module that defines the model.
RECIPE = "import defs\nfrom privgate.recipe import Recipe\n\nrecipe = Recipe(model_factory=defs.model_factory)\n"
#: A recipe function of a package that imports its model module only when it is called (after the early check).
LAZY = textwrap.dedent(
    """
    from privgate.recipe import Recipe

    def recipe():
        from . import defs

        return Recipe(model_factory=defs.model_factory, epochs=20)
    """
)
FACTORY = "from rows import load\n\n\ndef members():\n    return load('members.npz')\n"
ROWS = "import numpy as np\n\n\ndef load(path):\n    d = np.load(path)\n    return d['x'], d['y']\n"
MECHANISM = "from noise import flip\n\n\ndef randomise(grads, epsilon, clip, generator):\n    return flip(grads)\n"
NOISE = "def flip(grads):\n    return -grads\n"
TRAINER = "from nets import build\n\n\ndef train(x, y, epsilon, delta, seed):\n    return build(x.shape[1])\n"
NETS = "from torch import nn\n\n\ndef build(d):\n    return nn.Linear(d, 10)\n"


def _digests(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "folder"
        for p in sorted(folder.rglob("*"))
        if "__pycache__" not in p.parts
    }


@pytest.fixture(scope="module")
def project(tmp_path_factory, case) -> Path:
    d = tmp_path_factory.mktemp("project")
    for f in (case.leaky_state, case.members, case.nonmembers):
        shutil.copy(f, d / f.name)
    (d / "lazy").mkdir()
    files = {"defs.py": DEFS, "lazy/__init__.py": "", "lazy/defs.py": DEFS, "lazy/recipe.py": LAZY}
    files.update({"r.py": RECIPE, "factory.py": FACTORY})
    files.update({"rows.py": ROWS, "mech.py": MECHANISM, "noise.py": NOISE, "trainers.py": TRAINER, "nets.py": NETS})
    for name, text in files.items():
        (d / name).write_text(text)
    return d


CHECK = ("check", "leaky_state.pt", "--policy", "internal", "--nonmembers", "nonmembers.npz")


@pytest.mark.parametrize(
    "args, module, what",
    [
        # the reproduction: `import defs` in the recipe module, --json defs.py
        ((*CHECK, "--members", "members.npz", "--recipe", "r:recipe", "--json", "defs.py"), "defs", "JSON report"),
        # harden (check --remediate) writes the hardened model: the same guard
        (
            ("harden", *CHECK[1:], "--members", "members.npz", "--recipe", "r:recipe", "--output-model", "defs.py"),
            "defs",
            "hardened model",
        ),
        # a module imported only when the recipe function runs: caught before the reports are written
        (
            (*CHECK, "--members", "members.npz", "--recipe", "lazy.recipe:recipe", "--json", "lazy/defs.py"),
            "lazy.defs",
            "JSON report",
        ),
        # what a data factory imports from the project
        ((*CHECK, "--members", "factory:members", "--recipe", "r:recipe", "--sarif", "rows.py"), "rows", "SARIF"),
        (
            ("audit", "ldp", "--epsilon", "1", "--mechanism", "mech:randomise", "--trials", "50", "--json", "noise.py"),
            "noise",
            "JSON report",
        ),
        (
            ("audit", "dpsgd", "--epsilon", "1", "--train", "trainers:train", "--canaries", "10", "--html", "nets.py"),
            "nets",
            "HTML report",
        ),
        (
            ("fl", "simulate", "--recipe", "r:recipe", "--data", "factory:members", "--nodes", "2", "--rounds", "1")
            + ("--json", "defs.py"),
            "defs",
            "JSON report",
        ),
    ],
    ids=["check", "harden", "check-lazy", "factory", "audit-ldp", "audit-dpsgd", "fl-simulate"],
)
def test_an_output_onto_an_imported_project_module_is_refused(project, args, module, what):
    before = _digests(project)
    r = run_cli(*args, cwd=project)
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    err = " ".join(r.stderr.split())
    assert err.startswith("error:") and "Traceback" not in r.stderr, err
    assert err.count(". ") == 0, err  # one sentence
    file = module.replace(".", "/") + ".py"
    assert f"{file}: the {what}" in err, err
    assert f"would overwrite an input, the Python module '{module}' the run imported" in err, err
    assert str(project / file) in err and "nothing was written" in err, err
    assert _digests(project) == before
