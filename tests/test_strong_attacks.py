"""Strong attacks: LiRA, RMIA, shadow models, label-only and the blind baseline, on small synthetic tasks.

The task: 5 Gaussian classes in 10-D where 30 % of the rows are far from their
class centre and 10 % carry a random label; a small MLP trained without
regularisation memorises those rows. Loss thresholds see only the average gap;
reference-model attacks see each row's own difficulty.
"""

from __future__ import annotations

import json
import textwrap

import inproc
import numpy as np
import pytest
import torch
from cases import run_cli
from torch import nn

from privgate import AuditData, Dataset, PrivgateError, Recipe, RunOptions, Target, check_model, stats, train_model
from privgate.attacks import available_attacks, get_attack
from privgate.attacks.base import AttackContext
from privgate.attacks.blind import soundness_warnings
from privgate.attacks.lira import lira_scores
from privgate.attacks.reference import logit_confidence
from privgate.attacks.rmia import rmia_scores, tempered_true_class
from privgate.errors import PolicyError
from privgate.policy import parse_policy

N = 250


def make_model() -> nn.Module:
    return nn.Sequential(nn.Linear(10, 64), nn.ReLU(), nn.Linear(64, 5))


RECIPE = Recipe(make_model, epochs=80, batch_size=128, lr=1e-2, name="synthetic-mlp")


def synth(n: int, seed: int, shift: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    centres = np.random.default_rng(99).normal(0, 1.5, size=(5, 10))
    y = rng.integers(0, 5, n)
    scale = rng.choice([0.5, 2.0], size=n, p=[0.7, 0.3])
    x = centres[y] + rng.normal(0, 1, size=(n, 10)) * scale[:, None] + shift
    y = np.where(rng.random(n) < 0.1, rng.integers(0, 5, n), y)
    return x.astype(np.float32), y.astype(np.int64)


def policy(attacks: str, confidence: float = 0.95, checks: str = "  - {id: auc, attack: best, metric: auc, max: 0.9}"):
    return parse_policy(
        f"name: t\nsensitivity: internal\nrelease: api\nconfidence: {confidence}\nattacks: "
        f"{{{attacks}}}\nchecks:\n{checks}\n"
    )


STRONG = (
    "loss: {}, lira: {models: 8}, rmia: {models: 4}, shadow: {models: 4, per_class: true}, label_only: "
    "{queries: 16}, blind: {}"
)


@pytest.fixture(scope="module")
def task():
    members, nonmembers, population = synth(N, 1), synth(N, 2), synth(N, 3)
    target = Target(train_model(RECIPE, *members, seed=123), source="<synthetic>")
    return target, members, nonmembers, population


def _audit_data(members, nonmembers, population) -> AuditData:
    return AuditData(Dataset(*members), Dataset(*nonmembers), Dataset(*population) if population is not None else None)


@pytest.fixture(scope="module")
def scores(task):
    """Each attack's scores on all 500 audit rows (members first)."""
    target, members, nonmembers, population = task
    x, y = np.concatenate([members[0], nonmembers[0]]), np.concatenate([members[1], nonmembers[1]])
    ctx = AttackContext(
        target, x, y, population=Dataset(*population), recipe=RECIPE, run=RunOptions(seed=0, cache_dir="off")
    )
    out = {}
    for name, opts in [
        ("loss", {}),
        ("lira", {"models": 8}),
        ("lira_offline", {"models": 8, "offline": True}),
        ("rmia", {"models": 4}),
    ]:
        out[name] = get_attack(name.split("_")[0])(**opts).run(ctx)
    return out


def _power(scores: np.ndarray) -> tuple[float, float]:
    inside = np.r_[np.ones(N, bool), np.zeros(N, bool)]
    return stats.auc(scores[inside], scores[~inside]).value, stats.empirical_tpr_at_fpr(
        scores[inside], scores[~inside], 0.02
    )


def test_lira_and_rmia_beat_the_loss_attack(scores):
    loss_auc, loss_tpr = _power(scores["loss"].scores)
    for name in ("lira", "lira_offline", "rmia"):
        auc, tpr = _power(scores[name].scores)
        # the low-FPR end is where reference models help (Carlini et al. 2022); offline LiRA's AUC need not move
        assert tpr > 2 * loss_tpr and tpr > 0.1, (name, tpr, loss_tpr)
        if name != "lira_offline":
            assert auc > loss_auc + 0.04, (name, auc, loss_auc)
    assert scores["lira"].models_trained == 8 and scores["rmia"].extras["reference_models"] == 4
    assert 0.0 <= scores["rmia"].extras["a"] <= 1.0


def test_audit_reports_strong_attacks_and_second_run_trains_nothing(task, tmp_path):
    target, members, nonmembers, population = task
    data = _audit_data(members, nonmembers, population)
    first = check_model(target, data, policy(STRONG), recipe=RECIPE, seed=0, cache_dir=str(tmp_path))
    by = {a.name: a for a in first.attacks}
    assert all(a.status == "ran" for a in first.attacks), [(a.name, a.reason) for a in first.attacks]
    assert sum(a.models_trained for a in first.attacks) == 8  # rmia and shadow reuse 4 of lira's 8
    assert by["lira"].auc > by["loss"].auc and by["rmia"].auc > by["loss"].auc
    assert by["shadow"].auc > 0.55 and by["label_only"].threat_model == "label-only"
    assert any("reference model" in n for n in by["rmia"].notes)
    assert first.checks[0].chosen_attack != "blind" and first.warnings == []
    second = check_model(target, data, policy(STRONG), recipe=RECIPE, seed=0, cache_dir=str(tmp_path))
    assert [a.models_trained for a in second.attacks] == [0] * len(second.attacks)
    assert [a.auc for a in second.attacks] == [a.auc for a in first.attacks]


def test_random_guess_sanity(task):
    """A model trained on data independent of the audit set: every attack's AUC interval holds 0.5."""
    _, members, nonmembers, population = task
    unrelated = Target(train_model(RECIPE, *synth(N, 7), seed=5), source="<independent>")
    rep = check_model(
        unrelated,
        _audit_data(members, nonmembers, population),
        policy(STRONG, confidence=0.99),
        recipe=RECIPE,
        seed=0,
        cache_dir="off",
    )
    ran = [a for a in rep.attacks if a.status == "ran"]
    assert len(ran) == 6
    for a in ran:
        assert a.auc_ci[0] <= 0.5 <= a.auc_ci[1], (a.name, a.auc, a.auc_ci)


def test_too_little_population_skips_with_a_reason(task):
    target, members, nonmembers, population = task
    small = (population[0][:20], population[1][:20])
    checks = "  - {id: r, attack: rmia, metric: auc, max: 0.9}"
    rep = check_model(
        target,
        _audit_data(members, nonmembers, small),
        policy("rmia: {models: 4}", checks=checks),
        recipe=RECIPE,
        cache_dir="off",
    )
    (summary,) = rep.attacks
    assert summary.status == "skipped" and "100 population rows" in summary.reason and "has 20" in summary.reason
    assert rep.checks[0].status == "inconclusive" and "population" in rep.checks[0].reason
    x, y = members
    ctx = AttackContext(target, x, y, population=None, recipe=RECIPE, run=RunOptions(cache_dir="off"))
    blind = get_attack("blind")().run(ctx)  # no population: it learns from the calibration split instead
    assert blind.fitted is not None and "no population" in blind.notes[0]


def test_recipe_that_does_not_build_stops_the_audit(task):
    target, members, nonmembers, population = task

    def broken() -> nn.Module:
        raise ImportError("missing layer package")

    with pytest.raises(PrivgateError, match="building the model failed"):
        check_model(
            target,
            _audit_data(members, nonmembers, population),
            policy("rmia: {models: 2}"),
            recipe=Recipe(broken, name="broken"),
            cache_dir="off",
        )


def test_recipe_that_does_not_match_the_checkpoint_exits_2(tmp_path):
    """CLI: a TorchScript target and a recipe whose model has other parameter shapes."""
    torch.jit.save(torch.jit.script(make_model()), str(tmp_path / "model.ts.pt"))
    for name, seed in (("members", 1), ("nonmembers", 2), ("population", 3)):
        x, y = synth(120, seed)
        np.savez(tmp_path / f"{name}.npz", x=x, y=y)
    (tmp_path / "wrong_recipe.py").write_text(
        textwrap.dedent(
            """
        from torch import nn
        from privgate.recipe import Recipe
        RECIPE = Recipe(lambda: nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 5)), epochs=1, name="wrong")
        """
        )
    )
    (tmp_path / "p.yaml").write_text(
        "name: p\nsensitivity: internal\nrelease: api\nattacks: {rmia: {models: 2}}\n"
        "checks:\n  - {id: a, attack: rmia, metric: auc, max: 0.9}\n"
    )
    r = run_cli(
        "check",
        "model.ts.pt",
        "--policy",
        "p.yaml",
        "--members",
        "members.npz",
        "--nonmembers",
        "nonmembers.npz",
        "--population",
        "population.npz",
        "--recipe",
        "wrong_recipe:RECIPE",
        "--cache-dir",
        "cache",
        cwd=tmp_path,
    )
    assert r.returncode == 2, r.stdout + r.stderr
    assert (
        "does not match the target's parameters" in r.stderr and "0.weight" in r.stderr and "Traceback" not in r.stderr
    )


def test_blind_baseline_warns_when_the_data_alone_separates_members():
    """Members from a shifted distribution: the blind attack matches the real ones and the report warns."""
    members, nonmembers, population = synth(N, 1, shift=0.6), synth(N, 2), synth(N, 3)
    target = Target(train_model(RECIPE, *synth(N, 9), seed=1), source="<unrelated>")  # the model leaks nothing
    rep = check_model(
        target, _audit_data(members, nonmembers, population), policy("loss: {}, blind: {classifier: logistic}"), seed=0
    )
    blind = next(a for a in rep.attacks if a.name == "blind")
    assert blind.auc_ci[0] > 0.6
    assert (
        len(rep.warnings) == 1
        and rep.warnings[0].startswith("audit data unsound")
        and "Das et al. 2024" in rep.warnings[0]
    )
    assert rep.checks[0].chosen_attack == "loss"  # the diagnostic never decides 'best'


def test_soundness_warnings_rule():
    class S:
        def __init__(self, name, auc, lo, hi):  # noqa: ANN001, ANN204
            self.name, self.status, self.auc, self.auc_ci = name, "ran", auc, [lo, hi]

    assert soundness_warnings([S("blind", 0.52, 0.47, 0.57), S("lira", 0.9, 0.88, 0.92)]) == []
    (w,) = soundness_warnings([S("blind", 0.62, 0.57, 0.67), S("lira", 0.9, 0.88, 0.92)])
    assert "less well than 'lira'" in w
    (w,) = soundness_warnings([S("blind", 0.30, 0.25, 0.35), S("loss", 0.66, 0.61, 0.71)])  # the other direction
    assert w.startswith("audit data unsound")


def test_label_only_needs_only_predicted_labels(task):
    target, members, nonmembers, _ = task

    class LabelsOnly:
        white_box = False

        def predict(self, x):  # noqa: ANN001, ANN202
            return target.predict(x)

        def predict_proba(self, x):  # noqa: ANN001, ANN202
            raise AssertionError("the label-only attack must not read probabilities")

    x, y = np.concatenate([members[0], nonmembers[0]]), np.concatenate([members[1], nonmembers[1]])
    res = get_attack("label_only")(queries=32).run(AttackContext(LabelsOnly(), x, y))
    auc, _ = _power(res.scores)
    assert res.threat_model == "label-only" and res.extras["noise"] == "gaussian" and auc > 0.55
    flips = get_attack("label_only")(queries=4, noise="flip", sigma=0.1).run(
        AttackContext(LabelsOnly(), (x > 0).astype(np.float32), y)
    )
    assert flips.extras["noise"] == "flip" and flips.scores.shape == (2 * N,)


def test_lira_statistics():
    # φ keeps its value when p_y would round to 1
    logp = np.log(np.array([[1.0, 1e-20, 1e-30]]))
    assert abs(logit_confidence(logp, np.array([0]))[0] - np.log(1 / (1e-20 + 1e-30))) < 1e-6
    rng = np.random.default_rng(0)
    inside = np.tile(np.r_[np.ones(4, bool), np.zeros(4, bool)][:, None], (1, 50))
    phi = np.where(inside, 3.0, 0.0) + rng.normal(0, 0.5, size=inside.shape)
    high, low = np.full(50, 3.0), np.zeros(50)
    for online in (True, False):
        for fixed in (True, False):
            s_hi = lira_scores(high, phi, inside, online=online, fixed_variance=fixed)
            s_lo = lira_scores(low, phi, inside, online=online, fixed_variance=fixed)
            assert (s_hi > s_lo).all()


def test_rmia_statistics():
    # temperature from probabilities equals softmax(logits / T)
    logits = np.array([[2.0, 0.5, -1.0]])
    p = np.exp(logits) / np.exp(logits).sum()
    q = np.exp(logits / 2) / np.exp(logits / 2).sum()
    assert abs(tempered_true_class(np.log(p), np.array([0]), 2.0)[0] - q[0, 0]) < 1e-12
    # scores follow the z-fraction and break its ties by the ratio, never reorder it
    lx, lz = np.array([0.1, 0.2, 5.0, -3.0]), np.linspace(-1, 1, 11)
    s = rmia_scores(lx, lz, gamma=1.0)
    assert list(np.argsort(s)) == [3, 0, 1, 2] and s[3] < 1 / 11 and s[2] > 1.0 - 1e-9


@pytest.mark.parametrize(
    "name, options, message",
    [
        ("lira", {"models": 3}, "at least 4"),
        ("lira", {"models": 10, "fixed_variance": "sometimes"}, "fixed_variance"),
        ("lira", {"models": 4, "fixed_variance": False}, "at least 8"),
        ("rmia", {"models": 5}, "even"),
        ("rmia", {"a": 1.5}, "in \\[0, 1\\]"),
        ("rmia", {"gamma": 0.5}, "gamma"),
        ("shadow", {"classifier": "svm"}, "classifier"),
        ("label_only", {"noise": "blur"}, "noise"),
        ("label_only", {"noise": "flip", "sigma": 2}, "probability"),
        ("blind", {"folds": 1}, "folds"),
        ("rmia", {"reference": 4}, "unknown option"),
    ],
)
def test_bad_options_are_policy_errors(name, options, message):
    with pytest.raises((TypeError, ValueError), match=message):
        available_attacks()[name](**options)
    opts = json.dumps(options)
    with pytest.raises(PolicyError, match=f"attacks.{name}"):
        policy(f"{name}: {opts}")


def test_reference_attacks_are_skipped_without_a_recipe(task):
    target, members, nonmembers, population = task
    rep = check_model(
        target, _audit_data(members, nonmembers, population), policy("loss: {}, lira: {models: 4}"), cache_dir="off"
    )
    lira = next(a for a in rep.attacks if a.name == "lira")
    assert lira.status == "skipped" and "recipe" in lira.reason


def test_threads_option_reaches_the_engine_and_the_report(tmp_path):
    """--threads N trains reference models with N threads and says so; a bad value in the config is exit 2 (CLI)."""
    (tmp_path / "small_recipe.py").write_text(
        textwrap.dedent(
            """
        from torch import nn
        from privgate.recipe import Recipe
        RECIPE = Recipe(
            lambda: nn.Sequential(nn.Linear(10, 64), nn.ReLU(), nn.Linear(64, 5)), epochs=3, batch_size=64, name="small"
        )
        """
        )
    )
    import sys

    sys.path.insert(0, str(tmp_path))
    try:
        from small_recipe import RECIPE as small
    finally:
        sys.path.remove(str(tmp_path))
    for name, seed in (("members", 1), ("nonmembers", 2), ("population", 3)):
        x, y = synth(120, seed)
        np.savez(tmp_path / f"{name}.npz", x=x, y=y)
    torch.jit.save(torch.jit.script(train_model(small, *synth(120, 1), seed=0)), str(tmp_path / "model.ts.pt"))
    (tmp_path / "p.yaml").write_text(
        "name: p\nsensitivity: internal\nrelease: api\nattacks: {rmia: {models: 2}}\n"
        "checks:\n  - {id: a, attack: rmia, metric: auc, max: 0.99}\n"
    )
    args = (
        "check",
        "model.ts.pt",
        "--policy",
        "p.yaml",
        "--members",
        "members.npz",
        "--nonmembers",
        "nonmembers.npz",
        "--population",
        "population.npz",
        "--recipe",
        "small_recipe:RECIPE",
        "--cache-dir",
        "cache",
    )
    # the report's content in process (inproc: the CLI's report, test_front_door.py); the exits below are the CLI's
    report = inproc.check(
        tmp_path / "model.ts.pt", str(tmp_path / "p.yaml"), tmp_path / "members.npz", tmp_path / "nonmembers.npz",
        population=str(tmp_path / "population.npz"), recipe="small_recipe:RECIPE", search_dirs=(tmp_path,),
        cache_dir=str(tmp_path / "cache"), threads=2,
    )  # fmt: skip
    assert report.exit_code in (0, 3), report.summary
    (rmia,) = json.loads(inproc.render(report, "json")["json"])["attacks"]
    assert (rmia["extras"]["threads"], rmia["extras"]["kernel"], rmia["extras"]["engine"]) == (2, "mlp", "vectorised")
    where = "" if rmia["extras"]["device"] == "cpu" else f", {rmia['extras']['device']}"  # "MLP kernel, cuda, 2 …"
    assert any(f"MLP kernel{where}, 2 threads" in n for n in rmia["notes"]), rmia["notes"]
    (tmp_path / "privgate.toml").write_text("threads = 0\n")
    bad = run_cli(*args, cwd=tmp_path)
    assert (
        bad.returncode == 2
        and "privgate.toml" in bad.stderr
        and "'threads'" in bad.stderr
        and "Traceback" not in bad.stderr
    )
    assert run_cli(*args, "--threads", "0", cwd=tmp_path).returncode == 2


def test_attacks_of_one_run_share_one_set_of_reference_models_with_or_without_a_cache(task, tmp_path):
    """Shadow-4 first, then LiRA-8: the first trains the 8 the run needs and reads models 0-3 of them, LiRA
    reads all 8 (before: 4 and then 8 more without a cache). The same numbers with a cache as without."""
    target, members, nonmembers, population = task
    data = _audit_data(members, nonmembers, population)
    attacks = "loss: {}, shadow: {models: 4}, lira: {models: 8}"
    off = check_model(target, data, policy(attacks), recipe=RECIPE, seed=0, cache_dir="off")
    on = check_model(target, data, policy(attacks), recipe=RECIPE, seed=0, cache_dir=str(tmp_path))
    for report in (off, on):
        by = {a.name: a for a in report.attacks}
        assert (by["shadow"].models_trained, by["lira"].models_trained) == (8, 0)
        assert "this attack reads the first 4" in by["shadow"].notes[0]
    assert [(a.auc, a.tpr_at_fpr) for a in off.attacks] == [(a.auc, a.tpr_at_fpr) for a in on.attacks]
