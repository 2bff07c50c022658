"""``privgate audit dpsgd`` (one training run, m canaries) checked against known truths.

Steinke, Nasr & Jagielski's p-value is compared with a direct evaluation of its
formula; the bound is run against per-canary randomised response, which is
exactly ε-DP, and must exceed ε at most at the stated rate. End to end: a
trainer that claims ε = 1 but adds no noise is caught (exit 1); Opacus at
ε = 1, in the user's trainer (black-box) and in privgate's own DP-SGD
(white-box), is not; privgate's DP-SGD with its noise switched off is caught.
The CLI runs in a subprocess for the trainer that is caught (exit 1) and for bad
input (exit 2); the white-box audits, whose point is the report's numbers, run in
process through ``privgate.api.audit_dpsgd`` (the CLI's report, see
``test_front_door.py``), their console view and HTML rendered as the CLI writes them.
"""

from __future__ import annotations

import dataclasses
import json
import math
import textwrap
from pathlib import Path

import inproc
import numpy as np
import pytest
import torch
from cases import run_cli
from scipy import stats as st

from privgate import train_model
from privgate.audits import one_run_bound as B

TRAINERS = textwrap.dedent(
    """
    import torch
    from torch import nn

    def _mlp():
        return nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))

    def no_noise(x, y, epsilon, delta, seed):
        \"\"\"Claims (epsilon, delta)-DP; really full-batch Adam without clipping or noise: it memorises.\"\"\"
        torch.manual_seed(seed)
        model = _mlp()
        opt = torch.optim.Adam(model.parameters(), lr=1e-2)
        xt, yt = torch.as_tensor(x), torch.as_tensor(y)
        for _ in range(100):
            opt.zero_grad()
            nn.functional.cross_entropy(model(xt), yt).backward()
            opt.step()
        return model

    def opacus_dp(x, y, epsilon, delta, seed):
        \"\"\"DP-SGD with Opacus at the claimed (epsilon, delta).\"\"\"
        import warnings
        from opacus import PrivacyEngine

        warnings.simplefilter("ignore")
        torch.manual_seed(seed)
        model = _mlp()
        opt = torch.optim.SGD(model.parameters(), lr=0.5)
        data = torch.utils.data.TensorDataset(torch.as_tensor(x), torch.as_tensor(y))
        loader = torch.utils.data.DataLoader(data, batch_size=128, generator=torch.Generator().manual_seed(seed))
        model, opt, loader = PrivacyEngine(accountant="rdp").make_private_with_epsilon(
            module=model, optimizer=opt, data_loader=loader, target_epsilon=epsilon, target_delta=delta, epochs=10,
            max_grad_norm=1.0, noise_generator=torch.Generator().manual_seed(seed + 1))
        for _ in range(10):
            for xb, yb in loader:
                opt.zero_grad()
                nn.functional.cross_entropy(model(xb), yb).backward()
                opt.step()
        return model._module

    def not_a_model(x, y, epsilon, delta, seed):
        return "model.pt"
    """
)


SMALL_RECIPE = textwrap.dedent(
    """
    from torch import nn
    from privgate.recipe import Recipe

    def model():
        return nn.Sequential(nn.Linear(12, 16), nn.ReLU(), nn.Linear(16, 3))

    RECIPE = Recipe(model_factory=model, epochs=3, batch_size=64, lr=1e-2, name="small-mlp")
    """
)


def _json(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "trainers.py").write_text(TRAINERS)
    return tmp_path


# --------------------------------------------------------------------------- the bound


def _formula(m: int, r: int, v: int, eps: float, delta: float) -> float:
    """The p-value as written: P[Bin(r,q) ≥ v] + 2mδ · max_{1≤i≤v} P[v−i ≤ Bin(r,q) < v]/i, evaluated term by term."""
    q = math.exp(eps) / (1 + math.exp(eps))
    pmf = [math.comb(r, k) * q**k * (1 - q) ** (r - k) for k in range(r + 1)]
    tail = sum(pmf[v:])
    worst = max(sum(pmf[v - i : v]) / i for i in range(1, v + 1))
    return min(1.0, tail + 2 * m * delta * worst)


@pytest.mark.parametrize(
    "m,r,v,eps,delta",
    [(1000, 100, 90, 1.0, 1e-5), (1000, 1000, 700, 0.5, 1e-5), (200, 20, 20, 3.0, 1e-4), (100, 50, 40, 2.0, 0.0)],
)
def test_p_value_is_the_formula(m: int, r: int, v: int, eps: float, delta: float) -> None:
    assert B.p_value(m, r, v, eps, delta) == pytest.approx(_formula(m, r, v, eps, delta), rel=1e-9, abs=1e-15)


def test_p_value_takes_the_binomial_tail_from_its_ufunc(monkeypatch: pytest.MonkeyPatch) -> None:
    """The bisection evaluates the tail ~25 times per guess count: scipy.stats.binom.sf's argument handling costs
    ~0.5 ms a call, scipy.special.bdtrc (the same tail) a few µs; the value is the formula's either way."""
    from scipy import stats as scipy_stats

    def refuse(*a, **k):
        raise AssertionError("the p-value's tail needs no distribution object")

    monkeypatch.setattr(scipy_stats.binom, "sf", refuse)
    for m, r, v, eps in ((100, 50, 40, 2.0), (1000, 1000, 700, 0.5), (200, 20, 20, 3.0)):
        assert B.p_value(m, r, v, eps, 0.0) == pytest.approx(_formula(m, r, v, eps, 0.0), rel=1e-9, abs=1e-15)


def test_p_value_is_monotone_where_the_bound_is_used() -> None:
    """Non-decreasing in ε and non-increasing in v when 2mδ ≤ 1: the bisection's sup is a valid bound."""
    for m, r, delta in ((1000, 200, 1e-5), (1000, 1000, 4e-4), (50, 50, 0.01)):
        for v in range(1, r + 1, max(1, r // 25)):
            ps = [B.p_value(m, r, v, e, delta) for e in np.linspace(0, 8, 41)]
            assert all(b >= a - 1e-12 for a, b in zip(ps, ps[1:])), (m, r, v, delta)
        for e in (0.5, 2.0, 5.0):
            ps = [B.p_value(m, r, v, e, delta) for v in range(0, r + 1)]
            assert all(b <= a + 1e-12 for a, b in zip(ps, ps[1:])), (m, r, e, delta)


def test_bound_exceeds_epsilon_at_most_at_rate_alpha_for_randomised_response() -> None:
    """Each canary's output is its inclusion bit, kept with e^ε/(1+e^ε): exactly ε-DP per canary (δ = 0)."""
    rng = np.random.default_rng(5)
    eps, m, reps, alpha = 1.0, 1000, 300, 0.05
    keep = math.exp(eps) / (1 + math.exp(eps))
    over = 0
    lbs = []
    for _ in range(reps):
        included = rng.random(m) < 0.5
        seen = np.where(rng.random(m) < keep, included, ~included)
        scores = seen + 0.01 * rng.random(m)  # ties broken independently of inclusion
        best, _ = B.audit_bound(scores, included, 0.0, 1 - alpha)
        lbs.append(best.epsilon_lb)
        over += best.epsilon_lb > eps
    assert over <= st.binom.ppf(1 - 1e-3, reps, alpha)
    assert np.median(lbs) > 0.5 * eps  # and it finds most of ε


def test_guesses_take_the_top_and_the_bottom() -> None:
    scores = np.array([0.9, 0.1, 0.8, 0.2, 0.5, 0.4])
    included = np.array([True, False, True, True, False, False])
    assert B.guess(scores, included, 2) == (4, 3)  # in: 0.9 ✓, 0.8 ✓; out: 0.1 ✓, 0.2 ✗
    assert B.guess(scores, included, 3) == (6, 4)
    assert B.guess_counts(1000) == [10, 25, 50, 100, 250, 500]


def test_delta_too_large_for_m_proves_nothing() -> None:
    assert B.epsilon_lb_from_guesses(1000, 500, 500, 1e-3, 0.05) == 0.0  # 2mδ = 2 > 1
    assert B.epsilon_lb_from_guesses(1000, 500, 500, 1e-5, 0.05) > 4
    assert B.max_provable_from_canaries(1000, 1e-5, 0.95) == pytest.approx(5.27, abs=0.01)


# --------------------------------------------------------------------------- end to end


def test_a_trainer_without_noise_is_caught(project: Path) -> None:
    out = project / "nonoise.json"
    r = run_cli("audit", "dpsgd", "--epsilon", "1", "--train", "trainers:no_noise", "--json", str(out), cwd=project)
    assert r.returncode == 1, r.stdout + r.stderr
    rep = _json(out)
    assert rep["kind"] == "dpsgd" and rep["mode"] == "black_box" and rep["verdict"] == "fail"
    assert (
        rep["claimed_epsilon"] == 1 and rep["delta"] == 1e-5 and rep["canaries"] == 1000 and rep["confidence"] == 0.95
    )
    assert rep["epsilon_lb"] > 1.5 and rep["correct"] / rep["guesses"] > 0.9
    assert len(rep["attempts"]) == 6 and rep["bound"]["bonferroni"] == 6
    assert rep["trainer"] == {"kind": "user", "train": "trainers:no_noise", "rows_trained": 797 + rep["included"]}
    assert "FAIL: claimed ε = 1" in r.stdout


def _trainer(project: Path, name: str):  # noqa: ANN202 - the user's function
    from privgate.audits.entry import load_trainer

    return load_trainer(f"trainers:{name}", [project])


def test_opacus_in_the_users_trainer_is_not_caught(project: Path) -> None:
    """The same black-box audit against a trainer that really runs Opacus at ε = 1."""
    from privgate.audits.dpsgd import DpsgdSettings, audit_dpsgd

    rep = audit_dpsgd(DpsgdSettings(epsilon=1.0), train=_trainer(project, "opacus_dp"), train_name="trainers:opacus_dp")
    assert rep.verdict == "pass" and rep.exit_code == 0
    assert rep.epsilon_lb <= 1 < rep.max_provable_epsilon


def test_too_few_canaries_is_inconclusive(project: Path) -> None:
    """100 canaries can prove at most ε ≈ 3: a claim of 4 cannot be refuted, even for a trainer that memorises."""
    from privgate.audits.dpsgd import DpsgdSettings, audit_dpsgd

    rep = audit_dpsgd(
        DpsgdSettings(epsilon=4.0, canaries=100), train=_trainer(project, "no_noise"), train_name="no_noise"
    )
    assert rep.verdict == "inconclusive" and rep.exit_code == 3
    assert rep.epsilon_lb <= rep.max_provable_epsilon < 4 and rep.epsilon_lb > 1
    assert "more canaries (--canaries) could test it" in rep.summary


def test_privgate_dp_sgd_white_box_is_not_caught() -> None:
    """The bundled digits MLP through privgate's DP-SGD (Opacus) at ε = 1, with 1,000 gradient canaries.

    In process (``audit dpsgd --epsilon 1 --json … --html …``), the HTML and the console as the CLI writes them."""
    rep, stdout, report = inproc.audit("dpsgd", epsilon=1.0)
    assert report.exit_code == 0, stdout
    dp = rep["trainer"]["dp_sgd"]
    assert rep["mode"] == "white_box" and rep["verdict"] == "pass" and rep["epsilon_lb"] <= 1
    assert dp["noise_multiplier"] > 1 and dp["epsilon"] <= 1 and rep["trainer"]["steps_observed"] == dp["steps"]
    assert rep["trainer"]["recipe"] == "bundled digits MLP" and rep["canaries"] == 1000
    assert "<svg" in inproc.render(report, "html")["html"] and "PASS: claimed ε = 1" in stdout


def test_users_recipe_through_privgate_dp_sgd(tmp_path: Path) -> None:
    """--recipe and --data: the user's model (259 parameters) trained by privgate's DP-SGD, 200 gradient canaries.

    In process (``audit dpsgd --epsilon 2 --recipe small:RECIPE --data data.npz --canaries 200``, from the folder)."""
    (tmp_path / "small.py").write_text(SMALL_RECIPE)
    rng = np.random.default_rng(0)
    y = rng.integers(0, 3, 400)
    np.savez(tmp_path / "data.npz", x=(rng.normal(size=(400, 12)) + y[:, None]).astype(np.float32), y=y)
    rep, stdout, report = inproc.audit(
        "dpsgd", epsilon=2.0, recipe="small:RECIPE", data="data.npz", canaries=200, search_dirs=(tmp_path,)
    )
    assert report.exit_code == 0, stdout
    assert rep["trainer"]["recipe"] == "small-mlp" and rep["data"]["rows"] == 400 and rep["canaries"] == 200
    assert rep["trainer"]["dp_sgd"]["epsilon"] <= 2 and rep["epsilon_lb"] <= 2


def test_privgate_dp_sgd_without_its_noise_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """Switch the DP-SGD noise off (a bug in the noise step): the white-box canaries separate (almost) perfectly."""
    import privgate.dpsgd.noise
    from privgate.audits.bundled import DPSGD_RECIPE
    from privgate.audits.dpsgd import DpsgdSettings, audit_dpsgd

    def no_noise(summed: torch.Tensor, std: float, generator: torch.Generator) -> torch.Tensor:
        return torch.zeros_like(summed)

    monkeypatch.setattr(privgate.dpsgd.noise, "gaussian_like", no_noise)
    recipe = dataclasses.replace(DPSGD_RECIPE, epochs=5)
    rep = audit_dpsgd(DpsgdSettings(epsilon=1.0, canaries=500), recipe=recipe)
    assert rep.verdict == "fail" and rep.exit_code == 1
    assert rep.epsilon_lb > 3 and any(a.correct == a.guesses for a in rep.attempts)


def test_bad_input_is_one_sentence_and_exit_2(project: Path) -> None:
    cases = [
        (["--train", "os:getcwd"], "standard library"),
        (["--train", "trainers:not_a_model", "--canaries", "20"], "returned a str, expected a torch.nn.Module"),
        (["--train", "trainers:no_noise", "--recipe", "trainers:RECIPE"], "not both"),
        (["--delta", "2"], "--delta"),
        (["--epsilon", "nan"], "positive finite number"),
        (["--train", "trainers:no_noise", "--json", "trainers.py"], "trainers.py"),
    ]
    for extra, phrase in cases:
        r = run_cli("audit", "dpsgd", "--epsilon", "1", *extra, cwd=project)
        assert r.returncode == 2, (extra, r.stdout + r.stderr)
        assert phrase in r.stderr and "Traceback" not in r.stderr, (extra, r.stderr)
    assert (project / "trainers.py").read_text() == TRAINERS


def test_more_canaries_than_rows_is_refused() -> None:
    from privgate import PrivgateError
    from privgate.audits.bundled import digits
    from privgate.audits.dpsgd_blackbox import mislabelled_canaries

    with pytest.raises(PrivgateError, match="1797 rows are too few for 1795 canaries"):
        mislabelled_canaries(digits(), 1795, 0)
    rows, wrong, included, clean = mislabelled_canaries(digits(), 1000, 0)
    assert len(clean) == 797 and not set(rows) & set(clean) and np.all(wrong != digits().y[rows])


# --------------------------------------------------------------------------- remediation.audit

HARDEN_POLICY = """
name: audited-remediation
sensitivity: confidential
release: api
decision: point
attacks: {loss: {}}
checks:
  - {id: mia-acc, attack: loss, metric: accuracy, max: 0.55}
remediation: {enabled: true, epsilons: [4], accountant: rdp, epochs: 8, batch_size: 100, max_grad_norm: 1.0,
              audit: true, audit_canaries: 1000}
"""


def test_remediation_audits_the_chosen_epsilon(monkeypatch: pytest.MonkeyPatch) -> None:
    """``remediation.audit: true``: the hardened run's settings are audited with canaries; the claim sits next to the
    measured lower bound in the report. A DP-SGD run that does not deliver the chosen ε hands out no model."""
    from rich.console import Console

    import privgate.audits.dpsgd as dpsgd
    from privgate import AuditData, Recipe, Target
    from privgate.audits.bundled import digits
    from privgate.dp import remediate as rem
    from privgate.policy import parse_policy
    from privgate.report import render
    from privgate.report.console import print_remediation

    data = digits()
    order = np.random.default_rng(0).permutation(len(data))
    members, nonmembers = data.subset(order[:300]), data.subset(order[1000:1300])
    net = torch.nn
    recipe = Recipe(model_factory=lambda: net.Sequential(net.Linear(64, 64), net.Tanh(), net.Linear(64, 10)),
                    epochs=80, batch_size=32, lr=2e-2, name="tiny")  # fmt: skip
    target = Target(train_model(recipe, members.x, members.y, seed=0), source="memorising")
    policy = parse_policy(HARDEN_POLICY)
    out = rem.remediate(target, AuditData(members, nonmembers), policy, recipe, seed=0)
    audit = out.report.remediation.audit
    assert out.status == "hardened" and out.model is not None and out.exit_code == 0
    # δ = 1/(10·300): 1,000 canaries can prove at most about 2.7 (the 2mδ term), so ε = 4 cannot be refuted (ε = 4,
    # not 8: Opacus calibrates its σ in a third of the time)
    assert audit["claimed_epsilon"] == 4 and audit["verdict"] == "inconclusive"
    assert 0 <= audit["epsilon_lb"] <= audit["max_provable_epsilon"] < 4 and audit["canaries"] == 1000
    assert audit["delta"] == out.report.remediation.settings.delta
    assert f"claimed ε = 4, measured ε ≥ {audit['epsilon_lb']:.3f}" in out.report.summary
    console = Console(record=True, width=200)
    print_remediation(out.report.remediation, console)
    assert audit["summary"] in console.export_text()
    assert "DP-SGD audit: claimed ε = 4" in render(out.report, "html")

    real = dpsgd.train_with_canaries

    def without_noise(*args, **kwargs):  # the audited run's noise step is broken
        import privgate.dpsgd.noise

        with monkeypatch.context() as m:
            m.setattr(privgate.dpsgd.noise, "gaussian_like", lambda summed, std, generator: torch.zeros_like(summed))
            return real(*args, **kwargs)

    monkeypatch.setattr(dpsgd, "train_with_canaries", without_noise)
    low = parse_policy(HARDEN_POLICY.replace("epsilons: [4]", "epsilons: [2]"))  # 1,000 canaries can refute ε = 2
    broken = rem.remediate(target, AuditData(members, nonmembers), low, recipe, seed=0)
    assert broken.status == "audit_failed" and broken.model is None
    assert broken.report.verdict == "fail" and broken.exit_code == 1
    assert broken.report.remediation.audit["epsilon_lb"] > 2
    assert "the claim is refuted" in broken.report.remediation.reason
