"""``privgate audit dpsgd`` (one training run, m canaries) checked against known truths.

Steinke, Nasr & Jagielski's p-value is compared with a direct evaluation of its
formula; the bound is run against per-canary randomised response, which is
exactly ε-DP, and must exceed ε at most at the stated rate. End to end: a
trainer that claims ε = 1 but adds no noise is caught (exit 1); Opacus at
ε = 1, in the user's trainer (black-box) and in privgate's own DP-SGD
(white-box), is not; privgate's DP-SGD with its noise switched off is caught.
"""

from __future__ import annotations

import json
import math
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy import stats as st

from cases import run_cli
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


@pytest.mark.parametrize("m,r,v,eps,delta", [(1000, 100, 90, 1.0, 1e-5), (1000, 1000, 700, 0.5, 1e-5), (200, 20, 20, 3.0, 1e-4), (100, 50, 40, 2.0, 0.0)])
def test_p_value_is_the_formula(m: int, r: int, v: int, eps: float, delta: float) -> None:
    assert B.p_value(m, r, v, eps, delta) == pytest.approx(_formula(m, r, v, eps, delta), rel=1e-9, abs=1e-15)


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
    assert B.epsilon_lower_bound(1000, 500, 500, 1e-3, 0.05) == 0.0  # 2mδ = 2 > 1
    assert B.epsilon_lower_bound(1000, 500, 500, 1e-5, 0.05) > 4
    assert B.max_provable_epsilon(1000, 1e-5, 0.95) == pytest.approx(5.27, abs=0.01)


# --------------------------------------------------------------------------- end to end


def test_a_trainer_without_noise_is_caught(project: Path) -> None:
    out = project / "nonoise.json"
    r = run_cli("audit", "dpsgd", "--epsilon", "1", "--train", "trainers:no_noise", "--json", str(out), cwd=project)
    assert r.returncode == 1, r.stdout + r.stderr
    rep = _json(out)
    assert rep["kind"] == "dpsgd" and rep["mode"] == "black_box" and rep["verdict"] == "fail"
    assert rep["claimed_epsilon"] == 1 and rep["delta"] == 1e-5 and rep["canaries"] == 1000 and rep["confidence"] == 0.95
    assert rep["epsilon_lb"] > 1.5 and rep["correct"] / rep["guesses"] > 0.9
    assert len(rep["attempts"]) == 6 and rep["bound"]["bonferroni"] == 6
    assert rep["trainer"] == {"kind": "user", "train": "trainers:no_noise", "rows_trained": 797 + rep["included"]}
    assert "FAIL: claimed ε = 1" in r.stdout


def test_opacus_in_the_users_trainer_is_not_caught(project: Path) -> None:
    out = project / "opacus.json"
    r = run_cli("audit", "dpsgd", "--epsilon", "1", "--train", "trainers:opacus_dp", "--json", str(out), cwd=project)
    assert r.returncode == 0, r.stdout + r.stderr
    rep = _json(out)
    assert rep["verdict"] == "pass" and rep["epsilon_lb"] <= 1 and rep["max_provable_epsilon"] > 1


def test_privgate_dp_sgd_white_box_is_not_caught(tmp_path: Path) -> None:
    """The bundled digits MLP through privgate's DP-SGD (Opacus) at ε = 1, with 1,000 gradient canaries."""
    out, html = tmp_path / "wb.json", tmp_path / "wb.html"
    r = run_cli("audit", "dpsgd", "--epsilon", "1", "--json", str(out), "--html", str(html), cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    rep = _json(out)
    dp = rep["trainer"]["dp_sgd"]
    assert rep["mode"] == "white_box" and rep["verdict"] == "pass" and rep["epsilon_lb"] <= 1
    assert dp["noise_multiplier"] > 1 and dp["epsilon"] <= 1 and rep["trainer"]["steps_observed"] == dp["steps"]
    assert "<svg" in html.read_text(encoding="utf-8")


def test_privgate_dp_sgd_without_its_noise_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """Switch Opacus' noise off (a bug in the noise step): the white-box canaries separate perfectly."""
    import opacus.optimizers.optimizer as plain
    import opacus.optimizers.optimizer_fast_gradient_clipping as ghost

    from privgate.audits.dpsgd import DpsgdSettings, audit_dpsgd

    def no_noise(std: float, reference: torch.Tensor, generator: object = None, secure_mode: bool = False) -> torch.Tensor:
        return torch.zeros_like(reference)

    monkeypatch.setattr(plain, "_generate_noise", no_noise)
    monkeypatch.setattr(ghost, "_generate_noise", no_noise)
    rep = audit_dpsgd(DpsgdSettings(epsilon=1.0, canaries=500))
    assert rep.verdict == "fail" and rep.exit_code == 1
    assert rep.epsilon_lb > 3 and any(a.correct == a.guesses for a in rep.attempts)


def test_too_few_canaries_is_inconclusive(project: Path) -> None:
    """100 canaries can prove at most ε ≈ 3: a claim of 4 cannot be refuted, even by a trainer that memorises."""
    out = project / "few.json"
    r = run_cli("audit", "dpsgd", "--epsilon", "4", "--canaries", "100", "--train", "trainers:no_noise", "--json", str(out), cwd=project)
    assert r.returncode == 3, r.stdout + r.stderr
    rep = _json(out)
    assert rep["verdict"] == "inconclusive" and rep["max_provable_epsilon"] < 4 and rep["epsilon_lb"] <= rep["max_provable_epsilon"]
    assert "more canaries" in r.stdout


def test_bad_input_is_one_sentence_and_exit_2(project: Path) -> None:
    cases = [
        (["--train", "os:getcwd"], "standard library"),
        (["--train", "trainers:not_a_model", "--canaries", "20"], "returned a str, expected a torch.nn.Module"),
        (["--train", "trainers:no_noise", "--recipe", "trainers:RECIPE"], "not both"),
        (["--train", "trainers:no_noise", "--canaries", "1795"], "too few for 1795 canaries"),
        (["--delta", "2"], "--delta"),
        (["--train", "trainers:no_noise", "--json", "trainers.py"], "trainers.py"),
    ]
    for extra, phrase in cases:
        r = run_cli("audit", "dpsgd", "--epsilon", "1", *extra, cwd=project)
        assert r.returncode == 2, (extra, r.stdout + r.stderr)
        assert phrase in r.stderr and "Traceback" not in r.stderr, (extra, r.stderr)
    assert (project / "trainers.py").read_text() == TRAINERS
