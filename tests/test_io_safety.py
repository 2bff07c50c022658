"""Nothing a user owns is overwritten, nothing half-written is left, and the cache cannot change a verdict.

Every test runs the CLI as a user does (its own process, cases.run_cli) and looks at what is on
disk afterwards; the few in-process tests inject a failure no user could time
(a full disk at the last rename). Runs whose point is only a report's numbers
(the reference run of the interrupt tests, the run after an interrupt, the
cache runs whose output is not read from the console, the report that
``report render`` is given) are built in process (``tests/inproc.py``: the
CLI's report, see ``test_front_door.py``), against the same folders and caches.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import inproc
import pytest
import torch
from cases import run_cli

from privgate.io.atomic import TEMP_MARK

LIRA_POLICY = (
    "name: lira\nsensitivity: confidential\nrelease: api\nattacks: {loss: {}, lira: {models: 4}}\n"
    "checks:\n  - {id: lira-auc, attack: lira, metric: auc, max: 0.6}\n  - {id: loss-auc, attack: loss, "
    "metric: auc, max: 0.6}\n"
)

#: A recipe that trains like the target but, with a file 'slow' in the working folder, first waits: a long training
#: to interrupt.
SLOW_RECIPE = textwrap.dedent(
    """
    import os
    import time

    from torch import nn
    from privgate.recipe import Recipe
    from privgate.training.loop import train_loop

    def make_model():
        return nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 4))

    class SlowRecipe(Recipe):
        def train(self, x, y, seed=0, model=None):
            if os.path.exists("slow"):
                time.sleep(120)
            return train_loop(self, x, y, seed=seed, model=model)

    RECIPE = SlowRecipe(model_factory=make_model, epochs=20, batch_size=128, lr=3e-3, name="slow")
    """
)


def _digests(folder: Path) -> dict[str, str]:
    """Every file and folder under ``folder``, with the SHA-256 of each file."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "folder"
        for p in sorted(folder.rglob("*"))
    }


def _temps(folder: Path) -> list[Path]:
    """Temporary files or folders: privgate's (``.NAME.privgate-PID-XXXX.tmp``) or any other ``*.tmp``."""
    return [
        p for p in folder.rglob("*") if p.name.endswith(".tmp") or (TEMP_MARK in p.name and p.name != ".privgate-cache")
    ]


def _one_error(r: subprocess.CompletedProcess, *needles: str) -> str:
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    err = " ".join(r.stderr.split())
    assert err.startswith("error:") and "Traceback" not in r.stderr and err.count(". ") == 0, err  # one sentence
    for n in needles:
        assert n in err, (n, err)
    return err


def _project(case, d: Path) -> Path:
    """A project folder: the case's model, data and recipe, a LiRA policy, a slow recipe, a data factory module."""
    d.mkdir()
    for f in (case.leaky_ts, case.members, case.nonmembers, case.dir / "tiny_recipe.py"):
        shutil.copy(f, d / f.name)
    (d / "slow_recipe.py").write_text(SLOW_RECIPE)
    (d / "lira.yaml").write_text(LIRA_POLICY)
    (d / "factory.py").write_text(
        "import numpy as np\n\ndef members():\n    d = np.load('members.npz')\n    return d['x'], d['y']\n"
    )
    return d


@pytest.fixture
def work(case, tmp_path):
    return _project(case, tmp_path / "work")


def _check(work: Path, *args: str, env: dict[str, str] | None = None, **run: object) -> subprocess.CompletedProcess:
    """``privgate check`` of the work folder's model and data; ``run``: more of :func:`cases.run_cli`'s settings."""
    return run_cli(
        "check", "leaky.ts.pt", "--members", "members.npz", "--nonmembers", "nonmembers.npz", *args, cwd=work, env=env,
        **run,
    )  # fmt: skip


def _check_in_process(work: Path, policy: str, recipe: str | None = None, **kw: object):  # noqa: ANN202
    """``_check(work, "--policy", policy, "--recipe", recipe, …)`` in process (inproc: the CLI's report): the report
    and its JSON, parsed; ``kw``: ``cache_dir=`` (a relative one is the working directory's) …"""
    named = work / policy  # a policy file of the work folder, else a built-in policy's name
    report = inproc.check(
        work / "leaky.ts.pt", named if named.is_file() else policy, work / "members.npz", work / "nonmembers.npz",
        recipe=recipe, search_dirs=(work,), **kw,
    )  # fmt: skip
    return report, json.loads(inproc.render(report, "json")["json"])


# --------------------------------------------------------------------------- outputs never overwrite inputs


@pytest.mark.parametrize(
    "args, needles",
    [
        (
            ["--policy", "internal", "--json", "members.npz"],
            ["members.npz: the JSON report (--json) would overwrite an input, the members data"],
        ),
        (
            ["--policy", "internal", "--junit", "./nonmembers.npz"],
            ["the JUnit report (--junit)", "the non-members data"],
        ),
        (
            ["--policy", "internal", "--sarif", "../work/leaky.ts.pt"],
            ["the SARIF log (--sarif)", "an input, the model"],
        ),
        (["--policy", "lira.yaml", "--markdown", "lira.yaml"], ["the Markdown summary (--markdown)", "the policy"]),
        (
            ["--policy", "internal", "--recipe", "tiny_recipe:RECIPE", "--html", "tiny_recipe.py"],
            ["tiny_recipe.py: the HTML report (--html)", "the recipe's module tiny_recipe.py"],
        ),
        (
            ["--policy", "internal", "--json", "link.npz"],
            ["link.npz: the JSON report", "the members data (members.npz)"],
        ),
        (["--policy", "internal", "--json", "hard.npz"], ["hard.npz: the JSON report", "the members data"]),
        (
            ["--policy", "internal", "--json", "r.json", "--sarif", "./r.json"],
            ["r.json: given as both the JSON report (--json) and the SARIF log (--sarif)"],
        ),
        (
            ["--policy", "internal", "--artefacts", "out", "--markdown", "out/inversion/s.md"],
            [
                "out/inversion/s.md: the Markdown summary (--markdown) lies inside out, the artefacts folder "
                "(--artefacts)"
            ],
        ),
        (
            ["--policy", "internal", "--json", "out/r.json", "--artefacts", "out"],
            ["lies inside out, the artefacts folder"],
        ),
        (["--policy", "internal", "--artefacts", "."], ["the artefacts folder (--artefacts) holds an input"]),
        (
            ["--policy", "internal", "--json", "leaky.ts.pt/r.json"],
            ["cannot be created, because leaky.ts.pt is a file"],
        ),
    ],
    ids=[
        "data",
        "dot-slash",
        "dot-dot",
        "policy",
        "recipe-module",
        "symlink",
        "hard-link",
        "two-outputs",
        "inside-artefacts",
        "report-inside-artefacts",
        "artefacts-hold-inputs",
        "below-a-file",
    ],
)
def test_an_output_on_an_input_or_another_output_is_refused(work, args, needles):
    (work / "link.npz").symlink_to("members.npz")
    os.link(work / "members.npz", work / "hard.npz")
    (work / "sub").mkdir()
    before = _digests(work)
    r = _check(work, *args)
    _one_error(r, *needles, "nothing was written")
    assert _digests(work) == before


def test_a_data_factory_module_and_the_config_file_are_inputs(work):
    before = _digests(work)
    r = run_cli(
        "check",
        "leaky.ts.pt",
        "--policy",
        "internal",
        "--members",
        "factory:members",
        "--nonmembers",
        "nonmembers.npz",
        "--junit",
        "factory.py",
        cwd=work,
    )
    _one_error(
        r,
        "factory.py: the JUnit report (--junit) would overwrite an input, the members data factory's module factory.py",
    )
    # the 'json' key of the config file is checked like --json, and the config file is an input too
    for target, needle in (("members.npz", "the members data"), ("privgate.toml", "the config file")):
        (work / "privgate.toml").write_text(
            f"model = 'leaky.ts.pt'\npolicy = 'internal'\nmembers = 'members.npz'\nnonmembers = "
            f"'nonmembers.npz'\njson = '{target}'\n"
        )
        r = run_cli("check", cwd=work)
        _one_error(r, f"the JSON report ('json' in {work / 'privgate.toml'}) would overwrite an input, {needle}")
    (work / "sub").mkdir()  # click refuses a folder for --json; the config's 'json' is checked here
    (work / "privgate.toml").write_text(
        "model = 'leaky.ts.pt'\npolicy = 'internal'\nmembers = 'members.npz'\nnonmembers = "
        "'nonmembers.npz'\njson = 'sub'\n"
    )
    _one_error(
        run_cli("check", cwd=work),
        f"{work / 'sub'}: the JSON report ('json' in {work / 'privgate.toml'}) is a folder; give a file path",
    )
    (work / "privgate.toml").unlink()
    (work / "sub").rmdir()
    assert _digests(work) == before


def test_harden_outputs_are_checked_before_any_work(work):
    """The hardened model and the state_dict beside it (NAME.state_dict.pt) may not land on an input."""
    shutil.copy(work / "leaky.ts.pt", work / "x.state_dict.pt")
    before = _digests(work)
    args = ["--policy", "internal", "--recipe", "tiny_recipe:RECIPE"]
    r = run_cli(
        "harden",
        "leaky.ts.pt",
        "--members",
        "members.npz",
        "--nonmembers",
        "nonmembers.npz",
        *args,
        "--output-model",
        "members.npz",
        cwd=work,
    )
    _one_error(r, "members.npz: the hardened model (--output-model) would overwrite an input, the members data")
    r = run_cli(
        "harden",
        "x.state_dict.pt",
        "--members",
        "members.npz",
        "--nonmembers",
        "nonmembers.npz",
        *args,
        "--output-model",
        "x.pt",
        cwd=work,
    )
    _one_error(
        r, "x.state_dict.pt: the hardened model's state_dict (--output-model) would overwrite an input, the model"
    )
    r = run_cli(
        "harden",
        "leaky.ts.pt",
        "--members",
        "members.npz",
        "--nonmembers",
        "nonmembers.npz",
        *args,
        "--json",
        "leaky.ts.hardened.pt",
        cwd=work,
    )
    _one_error(
        r,
        "leaky.ts.hardened.pt: given as both the JSON report (--json) and the hardened model (the default, "
        "beside the model)",
    )
    assert _digests(work) == before


def test_report_render_never_overwrites_its_report_or_its_artefacts(work):
    # the report to render, built in process (the CLI's r.json of `check --json r.json`)
    report, rep = _check_in_process(work, "internal", cache_dir="off")
    assert report.exit_code == 1, report.summary
    rep["attacks"][0]["extras"]["artefacts"] = ["r.artefacts/inversion/reconstructions.png"]
    (work / "r.json").write_text(json.dumps(rep))
    (work / "r.artefacts" / "inversion").mkdir(parents=True)
    (work / "r.artefacts" / "inversion" / "reconstructions.png").write_bytes(b"\x89PNG user's picture")
    before = _digests(work)
    _one_error(
        run_cli("report", "render", "r.json", "--json", "./r.json", cwd=work),
        "the JSON report (--json) would overwrite an input, the report being rendered",
    )
    _one_error(
        run_cli("report", "render", "r.json", "--html", "r.artefacts/inversion/reconstructions.png", cwd=work),
        "would overwrite an input, an artefact of attack 'loss'",
    )
    _one_error(
        run_cli("report", "render", "r.json", "--html", "x.html", "--markdown", "x.html", cwd=work), "given as both"
    )
    assert _digests(work) == before


# --------------------------------------------------------------------------- nothing half-written


def test_stale_temporary_files_of_a_killed_run_are_removed(work):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = work / f".r.json.privgate-{dead.pid}-0badc0de.tmp"
    stale.write_text('{"half": ')
    staging = work / f".r.artefacts.privgate-{dead.pid}-0badc0de.tmp" / "inversion"
    staging.mkdir(parents=True)
    (staging / "reconstructions.png").write_bytes(b"half")
    r = _check(work, "--policy", "internal", "--json", "r.json")
    assert r.returncode == 1, r.stderr
    assert json.loads((work / "r.json").read_text())["verdict"] == "fail"
    assert _temps(work) == []


def test_a_full_disk_names_the_file_and_leaves_the_old_report(work):
    """Writes past a file-size limit fail as on a full disk (EFBIG, not ENOSPC): exit 2, one sentence, old file kept."""
    (work / "r.json").write_text("the user's previous report")

    r = _check(work, "--policy", "internal", "--json", "r.json", "--junit", "r.xml", file_size=4096)
    _one_error(r, "r.json: cannot write the JSON report (File too large); nothing was written")
    assert (work / "r.json").read_text() == "the user's previous report" and not (work / "r.xml").exists()
    assert _temps(work) == []


def test_commit_names_the_file_on_enospc(tmp_path, monkeypatch):
    from privgate import PrivgateError
    from privgate.io import atomic
    from privgate.io.staging import commit

    real = atomic._write_temp

    def full(path, payload, mode):  # noqa: ANN001, ANN202
        if path.suffix == ".html":
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(path, payload, mode)

    monkeypatch.setattr(atomic, "_write_temp", full)
    with pytest.raises(PrivgateError) as info:
        commit({tmp_path / "m.pt": ("hardened model", b"weights"), tmp_path / "r.html": ("HTML report", "<html>")})
    assert (
        str(info.value)
        == f"{tmp_path / 'r.html'}: cannot write the HTML report (No space left on device); nothing was written."
    )
    assert list(tmp_path.iterdir()) == []


def test_an_artefact_that_cannot_be_written_names_where_it_was_going(tmp_path, monkeypatch):
    from privgate import PrivgateError
    from privgate.io import atomic
    from privgate.io.artefacts import save_artefacts
    from privgate.io.staging import Staging

    def full(path, payload, mode):  # noqa: ANN001, ANN202
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    final = tmp_path / "reports" / "r.artefacts"
    with pytest.raises(PrivgateError) as info, Staging(final) as staging:
        monkeypatch.setattr(atomic, "_write_temp", full)
        save_artefacts("inversion", {"reconstructions.png": b"png"}, staging.path)
    assert (
        str(info.value)
        == f"{final / 'inversion' / 'reconstructions.png'}: cannot write the attack artefact (No space left "
        f"on device); nothing was written."
    )
    assert list(tmp_path.iterdir()) == []  # neither the staging folder nor the 'reports' folder made for it is left


# --------------------------------------------------------------------------- interrupts


def _numbers(report: dict) -> list:
    return (
        [report["verdict"]]
        + [(c["id"], c["value"], c["ci"], c["status"]) for c in report["checks"]]
        + [(a["name"], a["auc"], a["auc_ci"], a["accuracy"], a["accuracy_ci"]) for a in report["attacks"]]
    )


INTERRUPTED = [
    "--policy",
    "lira.yaml",
    "--recipe",
    "slow_recipe:RECIPE",
    "--cache-dir",
    ".privgate-cache",  # a cache in the work folder, as a config's cache_dir may keep it
    "--json",
    "r.json",
    "--junit",
    "r.xml",
    "--html",
    "r.html",
]


@pytest.fixture(scope="module")
def uninterrupted(case, tmp_path_factory) -> list:
    """The numbers of the run the interrupt tests interrupt, run to the end with a cache of its own (in process:
    only its numbers are compared)."""
    d = _project(case, tmp_path_factory.mktemp("uninterrupted") / "work")
    report, rep = _check_in_process(d, "lira.yaml", "slow_recipe:RECIPE", cache_dir=d / ".privgate-cache")
    assert report.exit_code == 1, report.summary
    return _numbers(rep)


def _alive(pid: int) -> bool:
    """Whether process ``pid`` still runs (a zombie, ended and not yet reaped, does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


@pytest.mark.parametrize("sig, code, name", [(signal.SIGINT, 130, "SIGINT"), (signal.SIGTERM, 143, "SIGTERM")])
def test_an_interrupted_run_exits_130_or_143_and_leaves_nothing(work, uninterrupted, sig, code, name):
    """The interrupted run is the CLI in its own process (signalled once it trains); the run after it, on the cache
    it left, is in process."""
    locks = work / ".privgate-cache" / "locks"

    def interrupt(pid: int) -> None:
        deadline = time.monotonic() + 120
        while not (locks.is_dir() and any(locks.iterdir())):  # the lock is taken when training starts
            assert _alive(pid) and time.monotonic() < deadline, "the run ended (or never trained) before its signal"
            time.sleep(0.1)
        time.sleep(0.5)
        os.kill(pid, sig)

    (work / "slow").touch()
    args = ("leaky.ts.pt", "--members", "members.npz", "--nonmembers", "nonmembers.npz", *INTERRUPTED)
    r = run_cli("check", *args, cwd=work, started=interrupt, timeout=180)
    (work / "slow").unlink()
    out, err = r.stdout, r.stderr
    assert r.returncode == code, (r.returncode, out, err)
    assert err.strip().splitlines() == [f"interrupted ({name}): stopped without writing partial output."]
    assert not any((work / f).exists() for f in ("r.json", "r.xml", "r.html", "r.artefacts"))
    assert _temps(work) == []  # the work folder and the cache in it
    assert not list((work / ".privgate-cache").rglob("*.pt"))  # interrupted before any model was stored

    # the cache the interrupted run used (in the work folder) is valid
    again, report = _check_in_process(work, "lira.yaml", "slow_recipe:RECIPE", cache_dir=work / ".privgate-cache")
    assert again.exit_code == 1, again.summary
    assert _numbers(report) == uninterrupted and report["warnings"] == []


# --------------------------------------------------------------------------- the cache cannot change a verdict


def _tamper(cache: Path) -> None:
    """Zero one entry's weights (keeping its key and recorded hash), swap two entries' files, flip a bit in the last."""
    files = sorted((cache / "models").rglob("*.pt"))
    assert len(files) == 4
    entry = torch.load(files[0], weights_only=True)
    entry["state"] = {k: torch.zeros_like(v) for k, v in entry["state"].items()}
    torch.save(entry, files[0])
    a, b = files[1].read_bytes(), files[2].read_bytes()
    files[1].write_bytes(b)
    files[2].write_bytes(a)
    raw = bytearray(files[3].read_bytes())
    weight = torch.load(files[3], weights_only=True)["state"]["0.weight"]
    raw[bytes(raw).find(weight.numpy().tobytes()) + 10] ^= 0x01
    files[3].write_bytes(bytes(raw))


def test_a_tampered_or_unusable_cache_does_not_change_the_report(work, monkeypatch):
    """The run on the tampered cache is the CLI (its console warning is read); the runs that fill the cache, reuse
    the retrained entries and meet an unusable cache folder are in process (their reports are the point), in the
    work folder as the CLI runs there."""
    monkeypatch.chdir(work)  # relative cache folders are the work folder's, as for the CLI
    args = ["--policy", "lira.yaml", "--recipe", "tiny_recipe:RECIPE", "--json", "r.json"]
    key = "0123456789abcdef" * 3  # every run has the same cache key (the CLI's from the environment)
    first, clean = _check_in_process(work, "lira.yaml", "tiny_recipe:RECIPE", cache_dir="cache", cache_key=key.encode())
    assert first.exit_code == 1, first.summary
    assert clean["verdict"] == "fail" and clean["warnings"] == []
    lira = next(a for a in clean["attacks"] if a["name"] == "lira")
    assert lira["models_trained"] == 4

    _tamper(work / "cache")
    second = _check(work, *args, "--cache-dir", "cache", env={"PRIVGATE_CACHE_KEY": key})
    assert second.returncode == 1, second.stdout + second.stderr
    report = json.loads((work / "r.json").read_text())
    assert _numbers(report) == _numbers(clean)
    assert len(report["warnings"]) == 4 and all(
        "failed its integrity check" in w and "retrained" in w for w in report["warnings"]
    )
    reasons = " ".join(report["warnings"])
    assert reasons.count("do not match their SHA-256") == 2 and reasons.count("holds the model of another key") == 2
    lira = next(a for a in report["attacks"] if a["name"] == "lira")
    assert lira["models_trained"] == 4 and sum("integrity check" in n for n in lira["notes"]) == 4
    assert "extras" in lira and "cache_warnings" not in lira["extras"]
    assert "warning: cache entry" in " ".join(second.stdout.split())

    # the entries were overwritten with the retrained models
    third, report = _check_in_process(
        work, "lira.yaml", "tiny_recipe:RECIPE", cache_dir="cache", cache_key=key.encode()
    )
    assert report["warnings"] == [] and third.exit_code == 1

    (work / "blocker").write_text("a file where the cache folder would go")
    unusable, report = _check_in_process(work, "lira.yaml", "tiny_recipe:RECIPE", cache_dir="blocker/cache")
    assert unusable.exit_code == 1, unusable.summary
    assert _numbers(report) == _numbers(clean)
    assert report["warnings"] == [
        "the reference-model cache blocker/cache cannot be used (Not a directory); models were trained without it"
    ]
    assert _temps(work) == []
