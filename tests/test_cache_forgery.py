"""A cache someone else wrote cannot change a verdict: entries are authenticated with a key outside the repository.

The attack (privgate issue 36): the SHA-256 of a cache entry is public, so a pull request could commit a
``.privgate-cache/`` whose LiRA reference entries hold the target's own weights, with their digest recomputed, and
name that folder in ``privgate.toml``: every reference model then equals the target, LiRA's in and out
distributions coincide, and a ``fail`` (AUC 0.98) became a ``pass`` (AUC 0.50) with no warning and no model
trained. Entries now carry an HMAC tag under a key the pull request does not have (privgate.training.cache,
privgate.cli.cache_settings); the attacker's entries are refused, the models retrained, and the report says so.

The runs that only fill a cache are in process (tests/inproc.py); the runs whose behaviour is the CLI's (its
default folders, its key from the environment or the user's key file, the forged run) are the CLI in a subprocess.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import threading
from pathlib import Path

import inproc
import pytest
import torch
from cases import run_cli

from privgate.training.cache import ModelCache, entry_digest

#: LiRA alone decides the verdict (a loss check would still catch the leaky model).
LIRA_ONLY = (
    "name: lira-only\nsensitivity: confidential\nrelease: api\nattacks: {lira: {models: 4}}\n"
    "checks:\n  - {id: lira-auc, attack: lira, metric: auc, max: 0.6}\n"
)
#: What a pull request commits: the audit's settings, with the cache in the working tree.
CONFIG = (
    'model = "leaky.ts.pt"\npolicy = "lira.yaml"\nmembers = "members.npz"\nnonmembers = "nonmembers.npz"\n'
    'recipe = "tiny_recipe:RECIPE"\ncache_dir = ".privgate-cache"\n'
)
KEY = "k" * 8 + "0123456789abcdef0123456789abcdef"  # a CI secret: 40 characters


@pytest.fixture
def work(case, tmp_path) -> Path:
    d = tmp_path / "repo"
    d.mkdir()
    for f in (case.leaky_ts, case.leaky_state, case.members, case.nonmembers, case.dir / "tiny_recipe.py"):
        shutil.copy(f, d / f.name)
    (d / "lira.yaml").write_text(LIRA_ONLY)
    return d


def _homes(root: Path, key: str | None = None) -> dict[str, str]:
    """The environment of a fresh runner: its own (empty) XDG cache and config folders, and the key if given."""
    env = {"XDG_CACHE_HOME": str(root / "cache"), "XDG_CONFIG_HOME": str(root / "config")}
    return {**env, "PRIVGATE_CACHE_KEY": key} if key is not None else env


def _fill(work: Path, cache: Path, key: bytes | None = None) -> dict:
    """The audit in process, filling ``cache``: its JSON report."""
    keyed = {"cache_key": key} if key is not None else {}
    report = inproc.check(
        work / "leaky.ts.pt", work / "lira.yaml", work / "members.npz", work / "nonmembers.npz",
        recipe="tiny_recipe:RECIPE", search_dirs=(work,), cache_dir=cache, **keyed,
    )  # fmt: skip
    return json.loads(inproc.render(report, "json")["json"])


def _lira(report: dict) -> dict:
    return next(a for a in report["attacks"] if a["name"] == "lira")


def _forge(cache: Path, weights: dict[str, torch.Tensor]) -> int:
    """What the attacker did: every entry rewritten with ``weights`` (the target's) and its public digest recomputed."""
    entries = sorted((cache / "models").rglob("*.pt"))
    for p in entries:
        entry = torch.load(p, weights_only=True)
        entry["state"] = {k: weights[k].clone() for k in entry["state"]}
        entry["sha256"] = entry_digest(entry["key"], entry["state"])
        torch.save(entry, p)
    return len(entries)


def test_a_forged_cache_committed_to_the_repository_cannot_flip_the_verdict(work, tmp_path):
    """The attacker fills a cache in the repository and rewrites its LiRA references with the target's weights; the
    CI run that reads the repository's privgate.toml still fails the model, retrains the 4 references and warns."""
    honest = _fill(work, work / ".privgate-cache")  # the attacker's own run: any key, the entries' keys are public
    assert honest["verdict"] == "fail" and _lira(honest)["auc"] > 0.9 and _lira(honest)["models_trained"] == 4
    assert _forge(work / ".privgate-cache", torch.load(work / "leaky_state.pt", weights_only=True)) == 4
    (work / "privgate.toml").write_text(CONFIG)

    r = run_cli("check", "--json", "r.json", cwd=work, env=_homes(tmp_path / "runner"))
    assert r.returncode == 1, r.stdout + r.stderr  # before the tags: exit 0, lira AUC 0.500, 0 models trained
    report = json.loads((work / "r.json").read_text())
    lira = _lira(report)
    assert report["verdict"] == "fail" and lira["auc"] == _lira(honest)["auc"] and lira["auc_ci"][0] > 0.85
    assert lira["models_trained"] == 4 and lira["extras"]["models_from_cache"] == 0
    (warning,) = report["warnings"]  # one sentence for the four entries
    assert warning.startswith("4 cache entries in ") and "had no valid tag for this run's cache key" in warning
    assert "forged" in warning and "the models were retrained" in warning
    assert "4 cache entries in" in " ".join(r.stdout.split())  # the console shows it too
    # the entries were rewritten with the runner's key: its next run trains nothing and warns of nothing
    key = (tmp_path / "runner" / "config" / "privgate" / "cache-key").read_bytes().strip()
    again = _fill(work, work / ".privgate-cache", key)
    assert _lira(again)["models_trained"] == 0 and again["warnings"] == [] and _lira(again)["auc"] == lira["auc"]


def test_a_restored_cache_serves_only_runs_given_its_key(work, tmp_path):
    """A cache restored between CI runs: a fresh runner given the pipeline's key (an environment secret) trains
    nothing; one without it (a fork's job: a key file of its own, created on first use) retrains with one warning."""
    restored = tmp_path / "restored"
    first = _fill(work, restored, KEY.encode())
    args = ["check", "leaky.ts.pt", "--policy", "lira.yaml", "--members", "members.npz", "--nonmembers"]
    args += ["nonmembers.npz", "--recipe", "tiny_recipe:RECIPE", "--cache-dir", str(restored), "--json", "r.json"]

    r = run_cli(*args, cwd=work, env=_homes(tmp_path / "ci", KEY))
    assert r.returncode == 1, r.stdout + r.stderr
    report = json.loads((work / "r.json").read_text())
    assert _lira(report)["models_trained"] == 0 and _lira(report)["extras"]["models_from_cache"] == 4
    assert report["warnings"] == [] and _lira(report)["auc"] == _lira(first)["auc"]
    assert not (tmp_path / "ci" / "config").exists()  # the key came from the environment: no key file written

    r = run_cli(*args, cwd=work, env=_homes(tmp_path / "fork"))
    assert r.returncode == 1, r.stdout + r.stderr
    report = json.loads((work / "r.json").read_text())
    assert _lira(report)["models_trained"] == 4 and _lira(report)["auc"] == _lira(first)["auc"]
    (warning,) = report["warnings"]
    assert warning.startswith(f"4 cache entries in {restored} had no valid tag")
    key_file = tmp_path / "fork" / "config" / "privgate" / "cache-key"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600 and len(key_file.read_text().strip()) == 64
    assert key_file.read_text().strip() != KEY


def test_the_default_cache_is_the_users_and_not_the_working_folders(work, tmp_path):
    """Without --cache-dir the cache is $XDG_CACHE_HOME/privgate and the key $XDG_CONFIG_HOME/privgate/cache-key:
    nothing is written in the working folder."""
    before = sorted(p.name for p in work.iterdir())
    r = run_cli(
        "check", "leaky.ts.pt", "--policy", "lira.yaml", "--members", "members.npz", "--nonmembers", "nonmembers.npz",
        "--recipe", "tiny_recipe:RECIPE", "--quiet", cwd=work, env=_homes(tmp_path / "home"),
    )  # fmt: skip
    assert r.returncode == 1, r.stdout + r.stderr
    assert sorted(p.name for p in work.iterdir()) == before
    assert len(list((tmp_path / "home" / "cache" / "privgate" / "models").rglob("*.pt"))) == 4
    assert [p.name for p in (tmp_path / "home" / "config" / "privgate").iterdir()] == ["cache-key"]


@pytest.mark.parametrize(
    "env, needle",
    [
        ({"PRIVGATE_CACHE_KEY": "short"}, "$PRIVGATE_CACHE_KEY: a cache key needs at least 32 bytes, this one has 5"),
        ({"PRIVGATE_CACHE_KEY_FILE": "no-such-key"}, "no-such-key: cannot read the cache key file named by"),
    ],
)
def test_a_bad_cache_key_is_one_sentence_and_exit_2(work, tmp_path, env, needle):
    r = run_cli(
        "check", "leaky.ts.pt", "--policy", "lira.yaml", "--members", "members.npz", "--nonmembers", "nonmembers.npz",
        "--recipe", "tiny_recipe:RECIPE", cwd=work, env={**_homes(tmp_path / "home"), **env},
    )  # fmt: skip
    assert r.returncode == 2, r.stdout + r.stderr
    err = " ".join(r.stderr.split())
    assert err.startswith("error:") and needle in err and "Traceback" not in r.stderr


def test_the_users_key_file_is_created_once_even_by_runs_at_the_same_time(tmp_path):
    """Eight first runs at once: one key file (mode 0600), the same key for all of them, no temporary file left."""
    from privgate.cli.cache_settings import resolve_key
    from privgate.cli.guard import Environment

    env = Environment(xdg_config_home=str(tmp_path / "config"))
    keys: list[bytes | None] = []
    start = threading.Barrier(8)

    def first_run() -> None:
        start.wait()
        keys.append(resolve_key(env, None)[0])

    threads = [threading.Thread(target=first_run) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(keys) == 8 and len(set(keys)) == 1 and len(keys[0]) == 64
    folder = tmp_path / "config" / "privgate"
    assert os.listdir(folder) == ["cache-key"] and stat.S_IMODE((folder / "cache-key").stat().st_mode) == 0o600
    assert resolve_key(env, None) == (keys[0], None)


def test_language_model_scores_under_another_key_are_scored_again(tmp_path):
    """The language-model score cache is the same cache: an entry tagged under another key is not read."""
    from privgate.lm.score_cache import open_cache

    mine, theirs = open_cache(tmp_path, b"m" * 32), open_cache(tmp_path, b"t" * 32)
    scores = {"logprob": torch.arange(5, dtype=torch.float64)}
    assert theirs.store("ab" * 32, scores) and mine.load("ab" * 32, scores) is None
    assert mine.warnings == [
        f"1 cache entry in {tmp_path} had no valid tag for this run's cache key (written under another key, by an "
        "older privgate, or forged) and was not used: the records were scored again, and the entry rewritten with "
        "this key; runs that share a cache must share its key"
    ]
    assert open_cache(tmp_path, b"t" * 32).load("ab" * 32, scores)["logprob"].tolist() == [0, 1, 2, 3, 4]
    with pytest.raises(ValueError, match="at least 16 bytes"):
        ModelCache(tmp_path, b"short")
