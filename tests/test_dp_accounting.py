"""Accounting for the ε search (privgate.dpsgd.accounting, privgate.dp.selection, privgate.dp.search).

Known truths: composing k identical runs is Opacus' accountant on k× the steps;
the random-stopping bound is Papernot & Steinke 2022 (arXiv 2110.03620),
Theorem 2, computed by hand on a worked example; the released ε is never below
a run's own training ε; a budget stops the search before the run that would
exceed it. No model is trained here (the search gets a fake trainer).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opacus.accountants import PRVAccountant, RDPAccountant

from privgate.dp.search import compose_search, random_stopping_bound, released
from privgate.dp.selection import Trials, random_stopping_epsilon, repeat_and_select_rdp, tnb_gamma, tnb_mean
from privgate.dpsgd.accounting import Run, compose, epsilon_from_rdp, rdp_curve, sampling
from privgate.dpsgd.records import DPSettings

DELTA = 1e-5


def _opacus(history: list[tuple[float, float, int]], accountant: str) -> float:
    acc = RDPAccountant() if accountant == "rdp" else PRVAccountant()
    acc.history = history
    return float(acc.get_epsilon(delta=DELTA))


def test_composing_k_identical_runs_is_opacus_on_k_times_the_steps():
    run = Run(noise_multiplier=1.1, sample_rate=0.01, steps=500)
    for k in (1, 4):
        comp = compose([run] * k, DELTA, "prv")
        assert comp.runs == k
        assert comp.rdp_epsilon == pytest.approx(_opacus([(1.1, 0.01, 500 * k)], "rdp"), rel=1e-9)
        assert comp.prv_epsilon == pytest.approx(_opacus([(1.1, 0.01, 500 * k)], "prv"), rel=1e-3)
        assert comp.epsilon == min(comp.rdp_epsilon, comp.prv_epsilon) and comp.accountant == "prv"
    # composing the RDP curves is far tighter than adding up the runs' ε (basic composition)
    one = compose([run], DELTA, "rdp").epsilon
    ten = compose([run] * 10, DELTA, "rdp").epsilon
    assert one < ten < 0.5 * 10 * one


def test_sampling_matches_what_opacus_trains():
    # train_dp: q = 1/⌈N/min(B, N)⌉ and that many Poisson steps per epoch
    assert sampling(897, 256, 30) == (0.25, 120)
    assert sampling(300, 100, 8) == (pytest.approx(1 / 3), 24)
    assert sampling(50, 256, 2) == (1.0, 2)  # a batch larger than the data: every row every step


def test_random_stopping_bound_matches_the_papers_formula_on_a_worked_example():
    """Theorem 2 of Papernot & Steinke 2022 by hand: Q the Gaussian mechanism with σ = 2 (ρ(λ) = λ/8),
    K geometric with mean 10 (η = 1, γ = 0.1), orders {2, 4, 8, 16}."""
    orders = [2.0, 4.0, 8.0, 16.0]
    rho = np.array([a / 8 for a in orders])
    trials = Trials("geometric", mean=10.0)
    assert trials.eta == 1 and trials.gamma == pytest.approx(0.1)
    # ε′(λ) = ρ(λ) + (1 + η)·min_λ̂ [(1 − 1/λ̂)·ρ(λ̂) + log(1/γ)/λ̂] + log E[K] / (λ − 1)
    inner = {2: 1 / 8 + math.log(10) / 2, 4: 3 / 8 + math.log(10) / 4, 8: 7 / 8 + math.log(10) / 8}
    inner[16] = 15 / 8 + math.log(10) / 16
    const = 2 * min(inner.values())
    assert const == pytest.approx(2 * (3 / 8 + math.log(10) / 4))  # λ̂ = 4 is the best
    raw = [a / 8 + const + math.log(10) / (a - 1) for a in orders]  # 4.4539, 3.1688, 3.2302, 4.0548
    expected = [min(raw[i:]) for i in range(4)]  # RDP grows with the order: a lower order inherits a smaller bound
    got = repeat_and_select_rdp(rho, trials, orders)
    assert got == pytest.approx(expected, rel=1e-12)
    assert got[0] == pytest.approx(3.16882, abs=1e-4) and got[3] == pytest.approx(4.05480, abs=1e-4)
    # the logarithmic distribution (η = 0) pays less for the same mean than the geometric
    log_trials = Trials("logarithmic", mean=10.0)
    assert np.all(repeat_and_select_rdp(rho, log_trials, orders) < got)


def test_trial_distributions_have_the_mean_they_are_given():
    for t in (Trials("geometric", 3), Trials("logarithmic", 3), Trials("negative_binomial", 3, 0.5)):
        assert tnb_mean(t.gamma, t.eta) == pytest.approx(3, rel=1e-6)
        draws = [t.draw(np.random.default_rng(np.random.SeedSequence([7, i]))) for i in range(4000)]
        assert min(draws) >= 1  # truncated: at least one trial
        se = np.std(draws) / math.sqrt(len(draws))
        assert abs(np.mean(draws) - 3) < 4 * se
    assert tnb_gamma(1.0, 0.5) == 1.0 and Trials("geometric", 1).draw(np.random.default_rng(0)) == 1
    pois = Trials("poisson", 2.0)
    assert pois.gamma is None and pois.eta == math.inf


def test_random_stopping_costs_a_constant_factor_not_the_number_of_trials():
    q, steps = sampling(897, 256, 30)
    # σ of one run of ε ≈ 20 and ≈ 50: what calibrate(20.0 / 50.0, δ, q, 30, "rdp") returns, given here because
    # Opacus' σ search costs seconds (calibration: test_remediation.py's test_train_dp_meets_and_records_its_epsilon)
    sigma, sigma50 = 1.068115234375, 0.648651123046875
    curve = rdp_curve([Run(sigma, q, steps)])
    one, _ = epsilon_from_rdp(curve, DELTA)
    assert 19.5 < one <= 20.0 and 49 < epsilon_from_rdp(rdp_curve([Run(sigma50, q, steps)]), DELTA)[0] <= 50.0
    rs = random_stopping_epsilon([curve], DELTA, Trials("geometric", 5))
    assert rs.per_run_epsilon == pytest.approx(one)
    assert one < rs.epsilon < 2 * one  # five trials on average, well under twice one run
    five = compose([Run(sigma, q, steps)] * 5, DELTA, "rdp").epsilon
    assert rs.epsilon < five  # composing five runs costs more
    # the schedule's runs are one mechanism Q drawn at random: never cheaper than its most private-costly run
    mixed = random_stopping_epsilon([curve, rdp_curve([Run(sigma50, q, steps)])], DELTA, Trials("geometric", 5))
    assert (
        mixed.epsilon
        > random_stopping_epsilon([rdp_curve([Run(sigma50, q, steps)])], DELTA, Trials("geometric", 1)).epsilon
    )


@settings(max_examples=12, deadline=None)
@given(
    sigmas=st.lists(st.floats(0.5, 8.0), min_size=1, max_size=3),
    q=st.floats(0.01, 1.0),
    steps=st.integers(1, 300),
    mean=st.floats(1.0, 20.0),
    distribution=st.sampled_from(["geometric", "logarithmic", "poisson"]),
)
def test_released_epsilon_is_never_below_a_training_epsilon(sigmas, q, steps, mean, distribution):
    curves = [rdp_curve([Run(s, q, steps)]) for s in sigmas]
    each = [epsilon_from_rdp(c, DELTA)[0] for c in curves]
    both, _ = epsilon_from_rdp(np.sum(curves, axis=0), DELTA)  # compose() is this sum (tested above)
    assert both >= max(each) - 1e-9
    rs = random_stopping_epsilon(curves, DELTA, Trials(distribution, mean))
    assert rs.epsilon >= max(each) - 1e-9


# --------------------------------------------------------------------------- the searches, with a fake trainer


@dataclass
class _Training:
    epsilon: float
    noise_multiplier: float
    sample_rate: float
    steps: int


@dataclass
class _Cand:
    epsilon: float
    training: _Training
    accepted: bool = False
    utility: float = 0.9
    utility_ok: bool = True
    privacy: str = "fail"
    trial: int | None = None
    report: object = field(default_factory=lambda: type("R", (), {"checks": []})())

    @property
    def score(self) -> float:  # as privgate.dp.candidates.Candidate: utility, higher is better
        return self.utility


def _trainer(accept_at: float | None, trained: list[float]):
    q, steps = sampling(300, 100, 8)

    def train(eps: float, sigma: float, trial: int | None) -> _Cand:
        trained.append(eps)
        spent = compose([Run(sigma, q, steps)], 1 / 3000, "rdp").epsilon
        ok = accept_at is not None and eps <= accept_at
        return _Cand(eps, _Training(spent, sigma, q, steps), ok, privacy="pass" if ok else "fail", trial=trial)

    return train


SETTINGS = DPSettings(epochs=8, batch_size=100, max_grad_norm=1.0, delta=1 / 3000, accountant="rdp")
#: The searches' ε ladders: small ε, whose σ Opacus calibrates in a fraction of a second (ε = 8 at these settings,
#: σ ≈ 1.17, takes seconds); the tests assert what the searches count and stop at, not the σ
LADDER, PAIR = [2, 1, 0.5, 0.25], [2, 1]


def test_the_composed_search_counts_every_candidate_and_stops_before_exceeding_the_budget():
    from privgate.dpsgd.accounting import _step_rdp

    _step_rdp.cache_clear()
    trained: list[float] = []
    seen: list[float] = []
    found = compose_search(
        _trainer(0.5, trained), LADDER, "ladder", SETTINGS, 300, on_candidate=lambda c, e: seen.append(e)
    )
    # each run's RDP is computed once, though the search composes every run so far after each candidate
    assert _step_rdp.cache_info().misses == len({Run.of(c.training) for c in found.candidates}) == 3
    assert trained == [2, 1, 0.5] and found.chosen.epsilon == 0.5 and found.stopped is None
    assert seen == sorted(seen) and seen[0] == pytest.approx(found.candidates[0].training.epsilon)  # grows per run
    assert seen[-1] == pytest.approx(released(found.composition, found.candidates)) and seen[-1] > 2
    # a budget between one run and two: ε = 2 trains, ε = 1 is never trained, nothing is chosen
    trained.clear()
    limit = (seen[0] + seen[1]) / 2
    stopped = compose_search(_trainer(0.5, trained), LADDER, "ladder", SETTINGS, 300, max_total_epsilon=limit)
    assert trained == [2] and stopped.chosen is None and stopped.stopped is not None
    assert (
        stopped.stopped.epsilon == 1 and stopped.stopped.released > limit and "over the policy's" in stopped.stopped.why
    )
    assert stopped.best.epsilon == 2  # the best candidate trained, which the caller does not hand out


def test_the_random_stopping_search_knows_its_cost_before_training():
    trials = Trials("geometric", 2.0)
    bound, sigmas = random_stopping_bound(PAIR, SETTINGS, 300, trials)
    trained: list[float] = []
    from privgate.dp.search import random_stopping_search

    found = random_stopping_search(_trainer(1.0, trained), PAIR, SETTINGS, 300, trials, seed=3)
    assert found.drawn == len(trained) >= 1 and found.random_stopping.epsilon == bound.epsilon
    assert all(c.trial == i + 1 for i, c in enumerate(found.candidates))
    assert set(trained) <= {2.0, 1.0} and set(sigmas) == {2.0, 1.0}
    assert bound.epsilon >= max(c.training.epsilon for c in found.candidates)
    # the same seed draws the same trials; a budget below the bound trains nothing
    again: list[float] = []
    random_stopping_search(_trainer(1.0, again), PAIR, SETTINGS, 300, trials, seed=3)
    assert again == trained
    none: list[float] = []
    assert bound.epsilon > 2.0  # the budget below is under the bound (which is never below a run's ε)
    stopped = random_stopping_search(_trainer(1.0, none), PAIR, SETTINGS, 300, trials, 3, max_total_epsilon=2.0)
    assert none == [] and stopped.stopped is not None and "nothing was trained" in stopped.stopped.why
