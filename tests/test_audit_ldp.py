"""``privgate audit ldp`` checked against known truths.

The LDP-SGD randomiser's mean has a closed form; its worst case (dummy gradient,
white-box, seed 001 Proposition 1) errs with probability exactly 1/(1 + e^ε);
a randomiser that keeps the sign with e^{3ε}/(1 + e^{3ε}) is 3ε-LDP, not ε-LDP.
The lower bound is sound when it stays at or below the true ε at the stated
rate, and tight when the worst case comes close to ε. The CLI runs in a
subprocess, as a user runs it, and its JSON report is read back: for each exit
code (0, 1, 3, 2) and the user's recipe and data. The worst case and the sweep,
whose point is the report's numbers, run in process through
``privgate.api.audit_ldp`` (the CLI's report, see ``test_front_door.py``); their
console view and HTML page are rendered as the CLI writes them.
"""

from __future__ import annotations

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

from privgate.audits.ldp_estimate import epsilon_empirical, epsilon_lb_from_errors, max_provable_from_trials
from privgate.audits.ldp_game import white_box_guess
from privgate.audits.ldp_mechanism import keep_probability, ldp_sgd_randomise, server_update

CHEAT = textwrap.dedent(
    """
    import math
    import torch

    def cheat(grads, epsilon, clip, generator):
        \"\"\"LDP-SGD's randomiser, but the sign survives with e^{3ε}/(1+e^{3ε}) while ε is claimed.\"\"\"
        k, d = grads.shape
        v = torch.randn(k, d, generator=generator, dtype=grads.dtype)
        v = v / v.norm(dim=1, keepdim=True)
        norm = grads.norm(dim=1).clamp(max=clip)
        proj = torch.where(torch.rand(k, generator=generator, dtype=grads.dtype) < 0.5 + norm / (2 * clip), 1.0, -1.0)
        along = torch.sign((grads * v).sum(dim=1)) * proj
        keep = torch.rand(k, generator=generator, dtype=grads.dtype) < 1 / (1 + math.exp(-3 * epsilon))
        return v * torch.where(keep, along, -along).unsqueeze(1)

    def wrong_shape(grads, epsilon, clip, generator):
        return grads[:, :3]
    """
)


def _json(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def _cell(report: dict, adversary: str, distinguisher: str, eps: float | None = None) -> dict:
    return next(
        r
        for r in report["results"]
        if r["adversary"] == adversary
        and r["distinguisher"] == distinguisher
        and (eps is None or r["claimed_epsilon"] == eps)
    )


# --------------------------------------------------------------------------- the mechanism


@pytest.mark.parametrize("eps", [0.5, 2.0])
@pytest.mark.parametrize("grad", [[0.3, 0.1, 0.0, 0.0, 0.0], [3.0, 4.0, 0.0, 0.0, 0.0]])
def test_randomiser_mean_has_the_closed_form(eps: float, grad: list[float]) -> None:
    """E[ẑ] = tanh(ε/2) · c_d · x/L, x the clipped gradient, c_d = Γ(d/2)/(√π Γ((d+1)/2)) (within 5 standard errors)."""
    d, n, clip = len(grad), 200_000, 1.0
    g = torch.tensor([grad], dtype=torch.float64)
    out = ldp_sgd_randomise(g.expand(n, d).clone(), eps, clip, torch.Generator().manual_seed(7))
    assert torch.allclose(out.norm(dim=1), torch.ones(n, dtype=torch.float64))
    x = g[0] * min(1.0, clip / float(g.norm()))
    c_d = math.exp(math.lgamma(d / 2) - math.lgamma((d + 1) / 2)) / math.sqrt(math.pi)
    expected = math.tanh(eps / 2) * c_d * x / clip
    se = out.std(dim=0) / math.sqrt(n)
    assert torch.all((out.mean(dim=0) - expected).abs() < 5 * se), (out.mean(dim=0), expected)


def test_worst_case_errs_at_exactly_one_over_one_plus_e_eps() -> None:
    """Dummy gradient (norm L) and its flip, white-box: error rate 1/(1+e^ε) within a 1e-3-tail binomial band."""
    eps, n, d = 1.0, 40_000, 50
    g1 = torch.full((n, d), 1.0 / math.sqrt(d))
    source_g2 = torch.arange(n) % 2 == 1
    submitted = torch.where(source_g2.unsqueeze(1), -g1, g1)
    reports = ldp_sgd_randomise(submitted, eps, 1.0, torch.Generator().manual_seed(3))
    errors = int((white_box_guess(reports, g1, -g1, True) != source_g2).sum())
    p = 1 - keep_probability(eps)
    assert st.binom.ppf(1e-3, n, p) <= errors <= st.binom.ppf(1 - 1e-3, n, p)


def test_server_step_stays_in_the_parameter_ball() -> None:
    theta = torch.full((10,), 0.3, dtype=torch.float64)
    reports = torch.nn.functional.normalize(torch.randn(100, 10, dtype=torch.float64), dim=1)
    radius = float(theta.norm()) * 1.000001  # θ_t on the boundary: many steps leave the ball and are projected back
    after = server_update(theta, reports, 2.0, 1.0, radius)
    assert torch.all(after.norm(dim=1) <= radius * (1 + 1e-12))
    assert torch.any(after.norm(dim=1) > radius * (1 - 1e-9))


# --------------------------------------------------------------------------- the estimate


def test_eq3_matches_seed_001_example() -> None:
    """Seed 001, §3.1: FP = 0.1, FN = 0.2 give ε_emp ≈ 2.0 (ln 8 = 2.079); a rate of 0 is ∞; guessing is ≤ 0."""
    assert epsilon_empirical(0.1, 0.2) == pytest.approx(math.log(8))
    assert epsilon_empirical(0.0, 0.3) == math.inf
    assert epsilon_empirical(0.5, 0.5) == 0.0


@pytest.mark.parametrize("eps", [0.5, 2.0, 4.0])
def test_lower_bound_exceeds_the_true_epsilon_at_most_at_rate_alpha(eps: float) -> None:
    """The optimal test of an exactly ε-LDP mechanism (FP = FN = 1/(1+e^ε)), 4,000 audits of 500 + 500 trials."""
    rng = np.random.default_rng(11)
    reps, n, alpha = 4000, 500, 0.05
    p = 1 - keep_probability(eps)
    fp, fn = rng.binomial(n, p, reps), rng.binomial(n, p, reps)
    over = sum(epsilon_lb_from_errors(int(a), n, int(b), n, alpha) > eps for a, b in zip(fp, fn))
    assert over <= st.binom.ppf(1 - 1e-3, reps, alpha)
    # and the bound is not vacuous: the median audit proves more than half of ε
    assert (
        np.median([epsilon_lb_from_errors(int(a), n, int(b), n, alpha) for a, b in zip(fp[:200], fn[:200])]) > 0.5 * eps
    )


def test_max_provable_grows_with_trials_and_bounds_every_result() -> None:
    ceilings = [max_provable_from_trials(k, k, 0.05 / 12) for k in (50, 500, 5000)]
    assert ceilings == sorted(ceilings) and ceilings[0] < 3 < ceilings[-1]
    assert epsilon_lb_from_errors(3, 500, 1, 500, 0.05 / 12) < ceilings[1]


# --------------------------------------------------------------------------- the CLI


def test_worst_case_reaches_nine_tenths_of_epsilon_4() -> None:
    """K = 10,000 (the default): dummy gradient or gradient flip, white-box, proves ≥ 0.9·4 and never more than 4.

    In process (``audit ldp --epsilon 4 --adversary dummy_gradient,gradient_flip --distinguisher white_box``)."""
    rep, stdout, report = inproc.audit(
        "ldp", epsilons=(4.0,), adversaries=("dummy_gradient", "gradient_flip"), distinguishers=("white_box",)
    )
    assert report.exit_code == 0, stdout
    assert rep["schema_version"] == 1 and rep["kind"] == "ldp" and rep["verdict"] == "pass"
    assert rep["claimed_epsilon"] == 4 and rep["cells"] == 2 and rep["trials"] == 10_000
    dummy, flip = _cell(rep, "dummy_gradient", "white_box"), _cell(rep, "gradient_flip", "white_box")
    assert dummy["trials"] == 10_000 and dummy["trials_g1"] == dummy["trials_g2"] == 5000
    assert max(dummy["epsilon_lb"], flip["epsilon_lb"]) >= 0.9 * 4
    assert dummy["epsilon_lb"] <= 4 and flip["epsilon_lb"] <= 4
    assert dummy["epsilon_lb"] < dummy["epsilon_empirical"]  # the point value is reported, the bound is below it
    assert rep["max_epsilon_lb"] == max(dummy["epsilon_lb"], flip["epsilon_lb"])
    assert "PASS: claimed ε = 4" in stdout and "does not prove" in stdout


def test_sweep_every_bound_below_its_epsilon() -> None:
    """The built-in mechanism at ε ∈ {0.5, 1, 2, 4}, all 6 × 2 cells: no bound above its ε; Figure 2 in the HTML.

    In process (``audit ldp --epsilon 0.5,1,2,4 --trials 1500 --json … --html …``), the HTML as the CLI writes it."""
    rep, stdout, report = inproc.audit("ldp", epsilons=(0.5, 1.0, 2.0, 4.0), trials=1500)
    assert report.exit_code == 0, stdout
    assert rep["claimed_epsilon"] == [0.5, 1, 2, 4] and rep["cells"] == 48 and len(rep["results"]) == 48
    assert rep["cell_confidence"] == pytest.approx(1 - 0.05 / 48)
    for cell in rep["results"]:
        assert 0 <= cell["epsilon_lb"] <= cell["claimed_epsilon"], cell
        assert cell["fp"] == pytest.approx(cell["fp_count"] / cell["trials_g1"])
    assert [c["status"] for c in rep["claims"]] == ["pass"] * 4
    assert (
        _cell(rep, "dummy_gradient", "white_box", 4)["epsilon_lb"] > _cell(rep, "benign", "white_box", 4)["epsilon_lb"]
    )
    page = inproc.render(report, "html")["html"]
    assert "id='figure-white_box'" in page and "id='figure-black_box'" in page and page.count("<svg") == 2
    assert "<script" not in page and "http" not in page.replace("http://www.w3.org/2000/svg", "").replace(
        "http-equiv", ""
    )
    assert "Figure 2" in stdout


def test_a_randomiser_weaker_than_its_claim_is_caught(tmp_path: Path) -> None:
    """e^{3ε}/(1+e^{3ε}) while claiming ε = 1: exit 1, a bound above 1 for the worst-case cell."""
    (tmp_path / "mech.py").write_text(CHEAT)
    out = tmp_path / "cheat.json"
    r = run_cli(
        "audit",
        "ldp",
        "--epsilon",
        "1",
        "--mechanism",
        "mech:cheat",
        "--trials",
        "4000",
        "--adversary",
        "dummy_gradient,gradient_flip",
        "--json",
        str(out),
        cwd=tmp_path,
    )
    assert r.returncode == 1, r.stdout + r.stderr
    rep = _json(out)
    assert rep["verdict"] == "fail" and rep["mechanism"] == {"name": "mech:cheat", "builtin": False}
    dummy = _cell(rep, "dummy_gradient", "white_box")
    assert 1 < dummy["epsilon_lb"] <= 3 and dummy["status"] == "fail"
    assert "FAIL" in r.stdout and "does not deliver its claim" in r.stdout


def test_too_few_trials_is_inconclusive_with_the_largest_provable_epsilon(tmp_path: Path) -> None:
    out = tmp_path / "few.json"
    r = run_cli(
        "audit",
        "ldp",
        "--epsilon",
        "4",
        "--trials",
        "100",
        "--adversary",
        "dummy_gradient",
        "--json",
        str(out),
        cwd=tmp_path,
    )
    assert r.returncode == 3, r.stdout + r.stderr
    rep = _json(out)
    assert rep["verdict"] == "inconclusive" and rep["max_provable_epsilon"] < 4
    assert f"could prove more than ε = {rep['max_provable_epsilon']:.3f}" in r.stdout


def test_user_recipe_and_data(tmp_path: Path) -> None:
    """θ_t from the user's recipe on the user's data (3 classes, 12 features)."""
    (tmp_path / "small.py").write_text(
        textwrap.dedent(
            """
        from torch import nn
        from privgate.recipe import Recipe

        def model():
            return nn.Sequential(nn.Linear(12, 16), nn.ReLU(), nn.Linear(16, 3))

        RECIPE = Recipe(model_factory=model, epochs=2, batch_size=32, lr=1e-2, name="small-mlp")
        """
        )
    )
    rng = np.random.default_rng(0)
    y = rng.integers(0, 3, 300)
    x = (rng.normal(size=(300, 12)) + y[:, None]).astype(np.float32)
    np.savez(tmp_path / "data.npz", x=x, y=y)
    out = tmp_path / "user.json"
    r = run_cli(
        "audit",
        "ldp",
        "--epsilon",
        "2",
        "--recipe",
        "small:RECIPE",
        "--data",
        "data.npz",
        "--trials",
        "1000",
        "--adversary",
        "benign,collusion,dummy_gradient",
        "--json",
        str(out),
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    rep = _json(out)
    assert "small-mlp" in rep["source"]["description"] and rep["source"]["parameters"] == 12 * 16 + 16 + 16 * 3 + 3
    assert rep["source"]["rows"] == 300 and len(rep["results"]) == 6
    assert all(c["epsilon_lb"] <= 2 for c in rep["results"])


def test_bad_input_is_one_sentence_and_exit_2(tmp_path: Path) -> None:
    (tmp_path / "mech.py").write_text(CHEAT)
    cases = [
        (
            ["--mechanism", "mech:wrong_shape", "--trials", "100", "--adversary", "dummy_gradient"],
            "returned shape (100, 3)",
        ),
        (["--mechanism", "os:getcwd"], "standard library"),
        (["--adversary", "dumy_gradient"], "did you mean 'dummy_gradient'"),
        (["--recipe", "small:RECIPE"], "--recipe and --data go together"),
        (["--json", "mech.py", "--mechanism", "mech:cheat"], "mech.py"),
    ]
    for extra, phrase in cases:
        r = run_cli("audit", "ldp", "--epsilon", "1", *extra, cwd=tmp_path)
        assert r.returncode == 2, (extra, r.stdout + r.stderr)
        assert phrase in r.stderr and "Traceback" not in r.stderr, (extra, r.stderr)
    assert (tmp_path / "mech.py").read_text() == CHEAT  # an input is never overwritten
    r = run_cli("audit", "ldp", "--epsilon", "-1", cwd=tmp_path)
    assert r.returncode == 2 and "positive" in r.stderr
