"""privgate.stats checked against known truths: intervals, ε from rates, AUC, known mechanisms, resolvability.

Each test compares the module with something known independently of it: scipy's
exact binomial intervals, closed forms, or the behaviour of mechanisms whose
privacy or distribution is known exactly (randomised response, the Laplace
mechanism, shifted Gaussians). The acceptance bands: ``stats_known``. Thresholds,
TPR at fixed FPR, accuracy and too little data: ``test_stats_thresholds.py``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as hst
from scipy import stats as st
from sklearn.metrics import roc_auc_score
from stats_known import binom_hi, binom_lo, rr_scores

from privgate import stats as S

# =========================================================================== 1. Clopper-Pearson


CP_GRID = sorted(
    {(k, n) for n in (1, 2, 3, 5, 10, 37, 100, 1000) for k in (0, 1, n // 3, n // 2, n - 1, n) if 0 <= k <= n}
)
LEVELS = (0.5, 0.8, 0.9, 0.95, 0.99, 0.999)


@pytest.mark.parametrize("c", LEVELS)
def test_clopper_pearson_matches_scipy_exact(c):
    for k, n in CP_GRID:
        ref = st.binomtest(k, n).proportion_ci(confidence_level=c, method="exact")
        lo, hi = S.clopper_pearson(k, n, c)
        assert lo == pytest.approx(ref.low, rel=1e-9, abs=1e-12), (k, n, c)
        assert hi == pytest.approx(ref.high, rel=1e-9, abs=1e-12), (k, n, c)
        if k == 0:
            assert lo == 0.0
        if k == n:
            assert hi == 1.0


@pytest.mark.parametrize("alpha", (0.001, 0.01, 0.025, 0.05, 0.2))
def test_one_sided_bounds_are_beta_quantiles_and_solve_the_tail_equation(alpha):
    for k, n in CP_GRID:
        lo, hi = S.cp_lower(k, n, alpha), S.cp_upper(k, n, alpha)
        if k == 0:
            assert lo == 0.0
        else:
            assert lo == pytest.approx(st.beta.ppf(alpha, k, n - k + 1), rel=1e-12)
            # defining property: the lower bound is the p with P(X >= k | p) = alpha
            assert st.binom.sf(k - 1, n, lo) == pytest.approx(alpha, rel=1e-6)
        if k == n:
            assert hi == 1.0
        else:
            assert hi == pytest.approx(st.beta.ppf(1 - alpha, k + 1, n - k), rel=1e-12)
            # the upper bound is the p with P(X <= k | p) = alpha
            assert st.binom.cdf(k, n, hi) == pytest.approx(alpha, rel=1e-6)
        # two-sided interval at 1-2α is the pair of one-sided bounds at α
        assert S.clopper_pearson(k, n, 1 - 2 * alpha) == pytest.approx((lo, hi), rel=1e-12, abs=1e-15)


@pytest.mark.parametrize("n", (1, 7, 50, 400))
def test_one_sided_closed_forms_at_the_extremes(n):
    for alpha in (0.001, 0.05, 0.3):
        assert S.cp_upper(0, n, alpha) == pytest.approx(1 - alpha ** (1 / n), rel=1e-10)
        assert S.cp_lower(n, n, alpha) == pytest.approx(alpha ** (1 / n), rel=1e-10)


def test_clopper_pearson_edge_cases():
    assert S.clopper_pearson(0, 0) == (0.0, 1.0)
    assert S.clopper_pearson(0, 0, 0.5) == (0.0, 1.0)
    assert S.cp_lower(0, 0, 0.05) == 0.0
    assert S.cp_upper(0, 0, 0.05) == 1.0
    assert S.cp_lower(0, 10, 0.05) == 0.0
    assert S.cp_upper(10, 10, 0.05) == 1.0
    # n = 1: Beta(1,1) is uniform, so the bounds are the tail probabilities themselves
    assert S.clopper_pearson(1, 1, 0.9) == pytest.approx((0.05, 1.0))
    assert S.clopper_pearson(0, 1, 0.9) == pytest.approx((0.0, 0.95))


@pytest.mark.parametrize("n", (10, 30, 100))
@pytest.mark.parametrize("c", (0.8, 0.95))
def test_clopper_pearson_exact_coverage_is_at_least_nominal(n, c):
    """Coverage computed exactly (sum of binomial pmf), not simulated, over a grid of p."""
    ks = np.arange(n + 1)
    lo, hi = np.array([S.clopper_pearson(int(k), n, c) for k in ks]).T
    ps = np.linspace(0.001, 0.999, 499)
    coverage = np.array([st.binom.pmf(ks, n, p)[(lo <= p) & (p <= hi)].sum() for p in ps])
    assert coverage.min() >= c - 1e-9
    # exact, not absurdly conservative: somewhere the coverage comes within a few points of c
    assert coverage.min() <= c + 0.03


def test_bonferroni_values():
    assert S.bonferroni(0.95, 1) == pytest.approx(0.95)
    assert S.bonferroni(0.95, 2) == pytest.approx(0.975)
    assert S.bonferroni(0.95, 5) == pytest.approx(0.99)
    assert S.bonferroni(0.9, 0) == pytest.approx(0.9)  # m < 1 is treated as one statement
    for m in (1, 3, 16, 100):
        assert (1 - S.bonferroni(0.95, m)) * m == pytest.approx(0.05)


# =========================================================================== 2. properties of rates and ε


@settings(max_examples=300, deadline=None)
@given(
    n=hst.integers(1, 500),
    kfrac=hst.floats(0, 1),
    c1=hst.floats(0.5, 0.999),
    c2=hst.floats(0.5, 0.999),
)
def test_clopper_pearson_properties(n, kfrac, c1, c2):
    k = int(round(kfrac * n))
    lo, hi = S.clopper_pearson(k, n, c1)
    assert 0.0 <= lo <= k / n <= hi <= 1.0
    if k > 0:
        assert lo < k / n
    if k < n:
        assert hi > k / n
    # a higher confidence gives a (weakly) wider interval
    c_lo, c_hi = sorted((c1, c2))
    lo_a, hi_a = S.clopper_pearson(k, n, c_lo)
    lo_b, hi_b = S.clopper_pearson(k, n, c_hi)
    assert lo_b <= lo_a + 1e-15
    assert hi_b >= hi_a - 1e-15


@settings(max_examples=300, deadline=None)
@given(tpr=hst.floats(0, 1), fpr=hst.floats(0, 1))
def test_epsilon_from_rates_is_zero_without_advantage(tpr, fpr):
    assume(tpr <= fpr)
    assert S.epsilon_from_rates(tpr, fpr, 0.0) == 0.0


@settings(max_examples=300, deadline=None)
@given(t1=hst.floats(0, 1), t2=hst.floats(0, 1), fpr=hst.floats(0, 1), delta=hst.sampled_from([0.0, 1e-5, 1e-2]))
def test_epsilon_from_rates_is_monotone(t1, t2, fpr, delta):
    lo_t, hi_t = sorted((t1, t2))
    assert S.epsilon_from_rates(lo_t, fpr, delta) <= S.epsilon_from_rates(hi_t, fpr, delta)
    # and antitone in the FPR (swap roles: fix a TPR, compare two FPRs)
    assert S.epsilon_from_rates(fpr, hi_t, delta) <= S.epsilon_from_rates(fpr, lo_t, delta)


@settings(max_examples=300, deadline=None)
@given(eps=hst.floats(0.0, 10.0), u=hst.floats(1e-6, 1.0))
def test_epsilon_from_rates_recovers_eps_on_the_dp_boundary(eps, u):
    """On TPR = e^ε·FPR the first inequality is tight; the second is slack iff FPR <= 1/(1+e^ε)."""
    fpr = u / (1 + math.exp(eps))
    tpr = math.exp(eps) * fpr
    assert S.epsilon_from_rates(tpr, fpr) == pytest.approx(eps, abs=1e-9)
    # the mirrored point (1-FPR = e^ε (1-TPR)) also gives ε, up to the rounding of 1 - x: recovering a
    # rate r from 1 - r loses up to one ulp of 1, a relative error of 2^-53 / r in r and so in the log
    rounding = 2 * 2.0**-53 * (1 / fpr + 1 / tpr)
    assert S.epsilon_from_rates(1 - fpr, 1 - tpr) == pytest.approx(eps, abs=1e-9 + rounding)


@settings(max_examples=200, deadline=None)
@given(eps=hst.floats(0.05, 6.0), v=hst.floats(1.01, 1.5))
def test_epsilon_from_rates_exceeds_eps_past_the_corner(eps, v):
    """Past FPR = 1/(1+e^ε) the point TPR = e^ε·FPR violates the second DP inequality."""
    fpr = v / (1 + math.exp(eps))
    tpr = math.exp(eps) * fpr
    assume(tpr < 1.0)
    assert S.epsilon_from_rates(tpr, fpr) > eps + 1e-9


@settings(max_examples=300, deadline=None)
@given(tpr=hst.floats(0, 1), fpr=hst.floats(1e-6, 1), delta=hst.sampled_from([0.0, 1e-5, 1e-3, 0.05]))
def test_accuracy_bound_dominates_accuracy_of_consistent_rates(tpr, fpr, delta):
    """(TPR, FPR) consistent with (ε, δ)-DP can reach balanced accuracy at most accuracy_bound(ε, δ)."""
    assume(tpr < 1.0 - 1e-6)
    eps = S.epsilon_from_rates(tpr, fpr, delta)
    assert (tpr + 1 - fpr) / 2 <= S.accuracy_bound(eps, delta) + 1e-12


@pytest.mark.parametrize("eps", (0.0, 0.3, 1.0, math.log(3), 2.0, 4.0, 8.0))
def test_accuracy_bound_is_attained_at_the_randomised_response_corner(eps):
    fpr = 1 / (1 + math.exp(eps))
    tpr = math.exp(eps) * fpr
    assert S.epsilon_from_rates(tpr, fpr) == pytest.approx(eps, abs=1e-12)
    assert S.accuracy_bound(eps) == pytest.approx((tpr + 1 - fpr) / 2, rel=1e-12)


def test_known_values():
    assert S.accuracy_bound(0.0) == 0.5
    assert S.accuracy_bound(math.log(3)) == pytest.approx(0.75)
    assert S.accuracy_bound(math.log(3), 0.1) == pytest.approx(3.1 / 4)
    assert S.accuracy_bound(1.0, 1.0) == 1.0  # clipped
    assert S.epsilon_from_rates(0.5, 0.1) == pytest.approx(math.log(5))
    assert S.epsilon_from_rates(0.9, 0.5) == pytest.approx(math.log(5))  # (1-0.5)/(1-0.9)
    assert S.epsilon_from_rates(0.5, 0.1, 0.05) == pytest.approx(math.log(4.5))
    assert S.epsilon_from_rates(0.5, 0.0) == math.inf
    assert S.epsilon_from_rates(1.0, 0.5) == math.inf
    assert S.epsilon_from_rates(0.0, 0.0) == 0.0
    assert S.epsilon_from_rates(1.0, 1.0) == 0.0


# =========================================================================== 3. AUC


def test_auc_value_and_delong_variance_against_brute_force():
    rng = np.random.default_rng(30)
    x = rng.integers(0, 8, 37).astype(float)  # ties on purpose
    y = rng.integers(0, 6, 23).astype(float)
    e = S.auc(x, y)
    kernel = (x[:, None] > y[None, :]) + 0.5 * (x[:, None] == y[None, :])
    assert e.value == pytest.approx(kernel.mean(), rel=1e-12)
    assert e.value == pytest.approx(roc_auc_score(np.r_[np.ones(37), np.zeros(23)], np.r_[x, y]), rel=1e-12)
    # DeLong (1988): structural components and their sample variances
    v10, v01 = kernel.mean(axis=1), kernel.mean(axis=0)
    se = math.sqrt(v10.var(ddof=1) / len(x) + v01.var(ddof=1) / len(y))
    assert e.details["se"] == pytest.approx(se, rel=1e-10)
    # logit-scale interval
    z = st.norm.ppf(0.975)
    a = e.value
    centre, half = math.log(a / (1 - a)), z * se / (a * (1 - a))
    assert e.lo == pytest.approx(1 / (1 + math.exp(-(centre - half))), rel=1e-10)
    assert e.hi == pytest.approx(1 / (1 + math.exp(-(centre + half))), rel=1e-10)
    assert 0 < e.lo < e.value < e.hi < 1


def test_auc_perfect_separation_falls_back_to_an_exact_bound():
    x, y = np.arange(30) + 100.0, np.arange(12, dtype=float)
    e = S.auc(x, y, 0.95)
    assert e.value == 1.0 and e.hi == 1.0
    assert e.lo == pytest.approx(0.025 ** (1 / 12))  # CP lower bound of 12/12 at α/2
    e = S.auc(y, x, 0.95)
    assert e.value == 0.0 and e.lo == 0.0
    assert e.hi == pytest.approx(1 - 0.025 ** (1 / 12))
    e = S.auc(np.ones(20), np.ones(20))
    assert e.value == 0.5 and e.lo < 0.5 < e.hi


def test_auc_places_each_score_by_binary_search_not_by_scipy_rankings(monkeypatch):
    """Every attack's every AUC check calls it, and the Monte-Carlo tests thousands of times: scipy's general
    ``rankdata`` (three rankings) and ``norm.ppf`` cost ~1 ms per call at 100 + 100 scores, two sorts a few µs."""
    from scipy import stats as scipy_stats

    def refuse(*a, **k):
        raise AssertionError("the AUC needs no scipy ranking or distribution object")

    monkeypatch.setattr(scipy_stats, "rankdata", refuse)
    monkeypatch.setattr(scipy_stats.norm, "ppf", refuse)
    rng = np.random.default_rng(33)
    x, y = rng.integers(0, 5, 40).astype(float), rng.integers(0, 4, 30).astype(float)  # ties across and within
    e = S.auc(x, y, 0.9)
    kernel = (x[:, None] > y[None, :]) + 0.5 * (x[:, None] == y[None, :])
    se = math.sqrt(kernel.mean(axis=1).var(ddof=1) / 40 + kernel.mean(axis=0).var(ddof=1) / 30)
    assert e.value == pytest.approx(kernel.mean(), rel=1e-12) and e.details["se"] == pytest.approx(se, rel=1e-10)


def _auc_coverage(rng, mu, reps, n, confidence):
    truth = st.norm.cdf(mu / math.sqrt(2))
    xs = rng.standard_normal((reps, n)) + mu
    ys = rng.standard_normal((reps, n))
    hits = 0
    for x, y in zip(xs, ys):
        e = S.auc(x, y, confidence)
        hits += e.lo <= truth <= e.hi
    return hits


@pytest.mark.parametrize("confidence", (0.95, 0.80))
def test_auc_interval_coverage_under_the_null(confidence):
    """Random guessing (i.i.d. N(0,1) scores, AUC = 0.5): the interval contains 0.5 at its stated rate."""
    reps = 1000
    hits = _auc_coverage(np.random.default_rng(31), 0.0, reps, 100, confidence)
    # DeLong is asymptotic, so the band is two-sided around the nominal rate
    assert binom_lo(reps, confidence) <= hits <= binom_hi(reps, confidence), hits / reps


@pytest.mark.parametrize("mu", (0.5, 1.0, 2.0))
def test_auc_interval_coverage_of_a_shifted_gaussian(mu):
    """Members N(μ,1), non-members N(0,1): true AUC = Φ(μ/√2)."""
    reps = 600
    hits = _auc_coverage(np.random.default_rng(32 + int(10 * mu)), mu, reps, 100, 0.95)
    assert binom_lo(reps, 0.95) <= hits <= binom_hi(reps, 0.95), hits / reps


# =========================================================================== 4. known ε-DP mechanisms


EPS_STRATEGIES = (S.Split(), S.Bonferroni())


@pytest.mark.parametrize("eps", (1.0, 2.0, 4.0))
def test_epsilon_lower_bound_is_valid_and_informative_on_randomised_response(eps):
    reps, n = 400, 1000
    membership = np.r_[np.ones(n, bool), np.zeros(n, bool)]
    scores = rr_scores(np.random.default_rng(40 + int(eps)), membership, eps, reps)
    for strategy in EPS_STRATEGIES:
        lbs = np.empty(reps)
        for r in range(reps):
            split = S.SplitScores.from_mask(scores[r], membership, S.calibration_mask(membership, seed=r))
            est = S.epsilon_lower_bound(split, delta=0.0, confidence=0.95, strategy=strategy)
            assert est.resolvable
            lbs[r] = est.value
        # validity: the bound exceeds the true ε in at most 5% of audits
        assert int(np.sum(lbs > eps)) <= binom_hi(reps, 0.05), (strategy, np.mean(lbs > eps))
        # not vacuous: most of ε is proven (measured: mean 0.72-0.87·ε for these sizes)
        assert lbs.mean() >= 0.65 * eps, (strategy, lbs.mean())
        if eps == 2.0:
            assert lbs.mean() >= 0.75 * eps, (strategy, lbs.mean())


@pytest.mark.parametrize("strategy", EPS_STRATEGIES, ids=("split", "bonferroni"))
def test_epsilon_lower_bound_is_valid_on_the_laplace_mechanism(strategy):
    """score = bit + Laplace(1/ε), rounded to 0.1 (post-processing keeps it ε-DP); continuous-ish scores."""
    eps, reps, n = 2.0, 150, 1000
    membership = np.r_[np.ones(n, bool), np.zeros(n, bool)]
    rng = np.random.default_rng(41)
    scores = np.round((membership + rng.laplace(scale=1 / eps, size=(reps, 2 * n))) * 10) / 10
    cal = S.calibration_mask(membership, seed=0)
    lbs = np.array(
        [S.epsilon_lower_bound(S.SplitScores.from_mask(s, membership, cal), 0.0, 0.95, strategy).value for s in scores]
    )
    assert int(np.sum(lbs > eps)) <= binom_hi(reps, 0.05)
    assert lbs.mean() >= 0.6 * eps  # measured ≈ 0.77·ε


# =========================================================================== 5. perfect attack and resolvability


@pytest.mark.parametrize("n", (20, 100, 1000))
@pytest.mark.parametrize("delta", (0.0, 1e-5))
def test_perfect_attack_reaches_max_provable_epsilon(n, delta):
    membership = np.r_[np.ones(n, bool), np.zeros(n, bool)]
    split = S.SplitScores.from_mask(membership.astype(float), membership, S.calibration_mask(membership, 0))
    n1, n0 = len(split.eval_in), len(split.eval_out)
    for strategy, m in ((S.Split(), 1), (S.Bonferroni(), 16), (S.Bonferroni(15), 15), (S.Bonferroni(1), 1)):
        est = S.epsilon_lower_bound(split, delta=delta, confidence=0.95, strategy=strategy)
        ceiling = S.max_provable_epsilon(n1, n0, delta, 0.95, m)
        assert est.value == pytest.approx(ceiling, rel=1e-12), strategy
        assert est.details["max_provable"] == pytest.approx(ceiling, rel=1e-12)
        assert (est.details["tp"], est.details["fp"]) == (n1, 0)
        if delta == 0.0:
            # closed form for n1 == n0: ln(q/(1-q)), q = (α/2m)^(1/n) the CP lower bound of n/n
            q = (0.05 / (2 * m)) ** (1 / n1)
            assert ceiling == pytest.approx(math.log(q / (1 - q)), rel=1e-9)


def test_perfect_attack_with_continuous_scores():
    n = 50
    # Split: every evaluation member is above the lowest calibration member
    split = S.SplitScores(np.linspace(10, 11, n), np.linspace(0, 1, n), np.linspace(10.2, 11, n), np.linspace(0, 1, n))
    est = S.epsilon_lower_bound(split, 0.0, 0.95, S.Split())
    assert est.value == pytest.approx(S.max_provable_epsilon(n, n, 0.0, 0.95), rel=1e-12)
    # Bonferroni with an odd number of thresholds puts the median between the classes
    est = S.epsilon_lower_bound(split, 0.0, 0.95, S.Bonferroni(15))
    assert est.value == pytest.approx(S.max_provable_epsilon(n, n, 0.0, 0.95, 15), rel=1e-12)


def test_max_provable_epsilon_grows_with_data_and_shrinks_with_confidence():
    values = [S.max_provable_epsilon(n, n, 1e-5, 0.95) for n in (10, 30, 100, 300, 1000, 3000)]
    assert all(a < b for a, b in zip(values, values[1:]))
    assert S.max_provable_epsilon(100, 100, 0.0, 0.99) < S.max_provable_epsilon(100, 100, 0.0, 0.95)
    assert S.max_provable_epsilon(100, 100, 0.0, 0.95, 16) < S.max_provable_epsilon(100, 100, 0.0, 0.95, 1)


@pytest.mark.parametrize("strategy", EPS_STRATEGIES, ids=("split", "bonferroni"))
def test_check_max_beyond_reach_is_unresolvable(strategy):
    n = 60
    membership = np.r_[np.ones(n, bool), np.zeros(n, bool)]
    split = S.SplitScores.from_mask(membership.astype(float), membership, S.calibration_mask(membership, 0))
    free = S.epsilon_lower_bound(split, 1e-5, 0.95, strategy)
    ceiling = free.details["max_provable"]
    for check in (ceiling, ceiling + 0.5, 10.0):
        est = S.epsilon_lower_bound(split, 1e-5, 0.95, strategy, check_max=check)
        assert not est.resolvable
        assert "30 members and 30 non-members" in est.reason
        assert f"{ceiling:.2f}" in est.reason
    est = S.epsilon_lower_bound(split, 1e-5, 0.95, strategy, check_max=ceiling - 1e-6)
    assert est.resolvable and est.reason is None
    assert est.value == pytest.approx(ceiling)
