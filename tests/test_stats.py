"""privgate.stats checked against known truths.

Each test compares the module with something known independently of it: scipy's
exact binomial intervals, closed forms, or the behaviour of mechanisms whose
privacy or distribution is known exactly (randomised response, the Laplace
mechanism, shifted Gaussians). Monte-Carlo tests use fixed seeds, so they are
deterministic. Their acceptance bands are binomial quantiles: an implementation
that meets its stated rate would fall outside one with probability about
``TAIL`` per side.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as hst
from scipy import stats as st
from sklearn.metrics import roc_auc_score

from privgate import stats as S

#: Per-side probability that a Monte-Carlo band rejects a correct implementation.
TAIL = 1e-3


def binom_hi(reps: int, p: float, tail: float = TAIL) -> int:
    """Largest count a Binomial(reps, p) exceeds with probability at most ``tail``."""
    return int(st.binom.ppf(1 - tail, reps, p))


def binom_lo(reps: int, p: float, tail: float = TAIL) -> int:
    """Smallest count a Binomial(reps, p) falls below with probability at most ``tail``."""
    return int(st.binom.ppf(tail, reps, p))


def rr_scores(rng: np.random.Generator, membership: np.ndarray, eps: float, reps: int) -> np.ndarray:
    """Randomised response: each score is the membership bit, kept with prob e^ε/(1+e^ε).

    Each example's output depends on its own bit only and the likelihood ratio of
    any output is e^{±ε}, so the mechanism is exactly ε-DP (δ = 0) and the ε
    bound from its optimal test is exactly ε.
    """
    keep = math.exp(eps) / (1 + math.exp(eps))
    flip = rng.random((reps, len(membership))) >= keep
    return (membership[None, :] ^ flip).astype(float)


def gauss_split(
    rng: np.random.Generator, n_in: int, n_out: int, mu: float, n_cal_out: int | None = None
) -> S.SplitScores:
    """Members N(mu, 1), non-members N(0, 1), in both splits."""
    return S.SplitScores(
        cal_in=rng.standard_normal(n_in) + mu,
        cal_out=rng.standard_normal(n_out if n_cal_out is None else n_cal_out),
        eval_in=rng.standard_normal(n_in) + mu,
        eval_out=rng.standard_normal(n_out),
    )


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


# =========================================================================== 6. best-of-m


def test_best_of_m_auc_attacks_does_not_inflate_false_alarms():
    """m independent random attacks on null data: a 'proven leak' is max_j lo_j > 0.5.

    Per attack that is the upper tail of a two-sided interval: α/2. With each
    interval at bonferroni(0.95, m) the family rate is ≈ 1-(1-α/2m)^m ≈ α/2;
    without it, 1-(1-α/2)^m ≈ m·α/2. Measured: 0.027 and 0.128 (2000 reps).
    """
    m, reps, n = 5, 800, 100
    rng = np.random.default_rng(60)
    corrected = uncorrected = 0
    for _ in range(reps):
        xs, ys = rng.standard_normal((m, n)), rng.standard_normal((m, n))
        corrected += max(S.auc(x, y, S.bonferroni(0.95, m)).lo for x, y in zip(xs, ys)) > 0.5
        uncorrected += max(S.auc(x, y, 0.95).lo for x, y in zip(xs, ys)) > 0.5
    p_corr = 1 - (1 - 0.05 / (2 * m)) ** m
    p_unc = 1 - (1 - 0.05 / 2) ** m
    assert binom_lo(reps, p_corr) <= corrected <= binom_hi(reps, p_corr), corrected / reps
    assert binom_lo(reps, p_unc) <= uncorrected <= binom_hi(reps, p_unc), uncorrected / reps


def test_best_of_m_epsilon_attacks_stays_valid_with_bonferroni():
    """m independent randomised-response audits (true ε = 4): claim max_j lb_j.

    With bonferroni(0.95, m) per audit the claim exceeds ε at most 5% of the
    time; without, the max over m audits demonstrably exceeds 5% (so the test
    has the power to see inflation). Measured: 0.010 vs 0.18.
    """
    m, reps, n, eps = 5, 300, 1000, 4.0
    membership = np.r_[np.ones(n, bool), np.zeros(n, bool)]
    cal = S.calibration_mask(membership, 0)
    rng = np.random.default_rng(61)
    corrected = uncorrected = 0
    for _ in range(reps):
        splits = [S.SplitScores.from_mask(s, membership, cal) for s in rr_scores(rng, membership, eps, m)]
        lb_c = max(S.epsilon_lower_bound(sp, 0.0, S.bonferroni(0.95, m)).value for sp in splits)
        lb_u = max(S.epsilon_lower_bound(sp, 0.0, 0.95).value for sp in splits)
        assert lb_c <= lb_u
        corrected += lb_c > eps
        uncorrected += lb_u > eps
    assert corrected <= binom_hi(reps, 0.05), corrected / reps
    assert uncorrected > binom_hi(reps, 0.05), uncorrected / reps


# =========================================================================== 7. TPR at fixed FPR


@pytest.mark.parametrize("fpr", (0.01, 0.05, 0.003))
def test_tpr_at_fpr_needs_ceil_inverse_fpr_nonmembers_per_split(fpr):
    need = math.ceil(1 / fpr)
    rng = np.random.default_rng(70)
    for n_cal, n_eval in ((need - 1, need), (need, need - 1), (need - 1, need - 1)):
        split = S.SplitScores(
            rng.standard_normal(50), rng.standard_normal(n_cal), rng.standard_normal(50), rng.standard_normal(n_eval)
        )
        est = S.tpr_at_fpr(split, fpr)
        assert not est.resolvable and math.isnan(est.value)
        assert f"at least {need} non-members" in est.reason
        assert f"has {n_cal} and {n_eval}" in est.reason
    split = S.SplitScores(
        rng.standard_normal(50), rng.standard_normal(need), rng.standard_normal(50), rng.standard_normal(need)
    )
    est = S.tpr_at_fpr(split, fpr)
    assert est.resolvable
    # the threshold lets through at most floor(fpr·n) calibration non-members
    assert np.sum(split.cal_out >= est.threshold) <= math.floor(fpr * need + 1e-9)


def test_tpr_at_fpr_counts_on_a_known_example():
    cal_out = np.arange(100, dtype=float)  # 0..99
    split = S.SplitScores(
        np.arange(10, dtype=float), cal_out, np.arange(90, 100, dtype=float), np.arange(100, dtype=float) + 0.5
    )
    est = S.tpr_at_fpr(split, 0.05)
    # 5 calibration non-members (95..99) may be above; the threshold sits just above 94
    assert 94 < est.threshold <= 95
    assert est.details["fp"] == 6  # evaluation non-members 94.5 .. 99.5
    assert est.details["fp"] == int(np.sum(split.eval_out >= est.threshold))
    assert est.details["tp"] == int(np.sum(split.eval_in >= est.threshold)) == 5
    assert est.value == 0.5
    assert est.details["tpr_ci_at_threshold"] == pytest.approx(S.clopper_pearson(5, 10, 0.95))
    assert est.lo <= est.value <= est.hi


@pytest.mark.parametrize("fpr, n_cal", ((0.01, 5000), (0.05, 2000)))
def test_tpr_at_fpr_operating_point_and_conditional_coverage(fpr, n_cal):
    """Gaussian scores, members N(1,1): the realised threshold t has true FPR 1-Φ(t) and TPR 1-Φ(t-1).

    * E[true FPR of t] is the order-statistic value (k+1)/(n_cal+1), k = floor(fpr·n_cal): close to fpr.
    * Given the calibration split, the evaluation counts are binomial, so the CP intervals cover
      the true TPR and FPR *at t* at least at the stated rate.
    """
    reps, mu = 400, 1.0
    rng = np.random.default_rng(71)
    achieved, tpr_hits, fpr_hits = np.empty(reps), 0, 0
    for r in range(reps):
        split = gauss_split(rng, n_cal, n_cal, mu)
        est = S.tpr_at_fpr(split, fpr)
        t = est.threshold
        achieved[r] = est.details["fpr_achieved"]
        tlo, thi = est.details["tpr_ci_at_threshold"]
        tpr_hits += tlo <= st.norm.sf(t - mu) <= thi
        flo, fhi = est.details["fpr_ci"]
        fpr_hits += flo <= st.norm.sf(t) <= fhi
    k = math.floor(fpr * n_cal)
    se = achieved.std(ddof=1) / math.sqrt(reps)
    assert abs(achieved.mean() - (k + 1) / (n_cal + 1)) <= 4 * se
    assert abs(achieved.mean() - fpr) <= 0.05 * fpr
    assert tpr_hits >= binom_lo(reps, 0.95), tpr_hits / reps
    assert fpr_hits >= binom_lo(reps, 0.95), fpr_hits / reps


@pytest.mark.parametrize("fpr, n", ((0.05, 2000), (0.01, 1000)))
def test_tpr_at_fpr_interval_covers_true_tpr_at_target_fpr(fpr, n):
    """True TPR at FPR f is 1-Φ(Φ⁻¹(1-f) - μ). The interval accounts for the estimated threshold
    (order-statistic thresholds on each side), so it covers the ROC curve's TPR at f at ≥ the
    stated rate even with equal calibration and evaluation splits — where an interval from the
    evaluation counts alone covers only ≈ 0.6–0.7 (measured before this design)."""
    mu, reps = 1.0, 300
    truth = st.norm.sf(st.norm.isf(fpr) - mu)
    rng = np.random.default_rng(72)
    hits = 0
    for _ in range(reps):
        est = S.tpr_at_fpr(gauss_split(rng, n, n, mu), fpr)
        hits += est.lo <= truth <= est.hi
    assert hits >= binom_lo(reps, 0.95), hits / reps


def test_bonferroni_ceiling_uses_reachable_counts():
    """With label-blind quantile thresholds, a perfect attack may not reach the all-correct
    counts; the resolvability ceiling must use what the thresholds can reach."""
    n = 50
    sp = S.SplitScores(np.linspace(10, 11, n), np.linspace(0, 1, n), np.linspace(10, 11, n), np.linspace(0, 1, n))
    e = S.epsilon_lower_bound(sp, 0.0, 0.95, S.Bonferroni(), check_max=1.9)
    assert e.details["max_provable"] == pytest.approx(e.value)
    assert not e.resolvable and "cannot be tested" in e.reason


def test_split_threshold_between_calibration_scores_keeps_power():
    sp = S.SplitScores(np.linspace(10.5, 11, 50), np.linspace(0, 1, 50), np.linspace(10, 11, 50), np.linspace(0, 1, 50))
    e = S.epsilon_lower_bound(sp, 0.0, 0.95)
    assert e.details["tp"] == 50 and e.details["fp"] == 0
    assert e.value == pytest.approx(e.details["max_provable"])


def test_accuracy_bound_large_epsilon():
    assert S.accuracy_bound(800.0) == 1.0


def test_empirical_tpr_at_fpr_known_value():
    out = np.arange(100, dtype=float)
    inn = np.arange(100, dtype=float) + 50.5
    # FPR <= 0.1 allows the 10 non-members 90..99: threshold 89.5 keeps members 89.5..149.5
    assert S.empirical_tpr_at_fpr(inn, out, 0.1) == pytest.approx(0.61)
    assert S.empirical_tpr_at_fpr(inn, out, 0.0) == pytest.approx(0.51)  # members 99.5..149.5
    assert S.empirical_tpr_at_fpr(inn, out, 1.0) == 1.0


# =========================================================================== 8. accuracy and advantage


def test_accuracy_and_advantage_intervals_cover_chance_under_the_null():
    reps = 400
    rng = np.random.default_rng(80)
    acc_hits = adv_hits = 0
    for _ in range(reps):
        split = gauss_split(rng, 100, 100, 0.0)
        acc, adv = S.balanced_accuracy(split), S.advantage(split)
        acc_hits += acc.lo <= 0.5 <= acc.hi
        adv_hits += adv.lo <= 0.0 <= adv.hi
    assert acc_hits >= binom_lo(reps, 0.95), acc_hits / reps
    assert adv_hits >= binom_lo(reps, 0.95), adv_hits / reps


def test_accuracy_interval_covers_the_true_accuracy_at_the_chosen_threshold():
    """Shifted Gaussian: at threshold t the true balanced accuracy is ½(Φ(μ-t) + Φ(t))."""
    reps, mu = 400, 1.0
    rng = np.random.default_rng(81)
    hits = 0
    for _ in range(reps):
        est = S.balanced_accuracy(gauss_split(rng, 150, 150, mu))
        t = est.threshold
        truth = 0.5 * (st.norm.sf(t - mu) + st.norm.cdf(t))
        hits += est.lo <= truth <= est.hi
    assert hits >= binom_lo(reps, 0.95), hits / reps


def test_the_calibrated_threshold_is_the_rocs_best_point_without_calling_sklearn(monkeypatch):
    """The ROC (every point, as sklearn's roc_curve gives it) and the threshold of accuracy and advantage (the highest
    of its points with the largest TPR − FPR) by binary search: sklearn's roc_curve validates its inputs for
    milliseconds a call (every attack's checks and report curve, and the Monte-Carlo tests thousands of times)."""
    import sklearn.metrics
    from sklearn.metrics import roc_curve

    rng = np.random.default_rng(34)
    cases = [(rng.integers(0, 5, 40).astype(float) + 0.5, rng.integers(0, 5, 30).astype(float)) for _ in range(20)]
    cases.append((rng.standard_normal(25) - 3, rng.standard_normal(25)))  # no cut beats calling no one: +inf
    expected = []
    for cal_in, cal_out in cases:
        labels = np.r_[np.ones(len(cal_in)), np.zeros(len(cal_out))]
        every = roc_curve(labels, np.r_[cal_in, cal_out], drop_intermediate=False)
        assert all(np.array_equal(a, b) for a, b in zip(S.roc(cal_in, cal_out), every))  # the curve itself
        fpr, tpr, thr = roc_curve(labels, np.r_[cal_in, cal_out])
        t = float(thr[int(np.argmax(tpr - fpr))])
        below = np.r_[cal_in, cal_out][np.r_[cal_in, cal_out] < t]
        expected.append((t + below.max()) / 2 if np.isfinite(t) and below.size else t)

    def refuse(*a, **k):
        raise AssertionError("the calibrated threshold needs no sklearn roc_curve")

    monkeypatch.setattr(sklearn.metrics, "roc_curve", refuse)
    for (cal_in, cal_out), t in zip(cases, expected):
        est = S.balanced_accuracy(S.SplitScores(cal_in, cal_out, cal_in, cal_out))
        assert est.threshold == t
    assert expected[-1] == math.inf


def test_advantage_is_twice_accuracy_minus_one():
    rng = np.random.default_rng(82)
    for mu in (0.0, 0.7, 2.0):
        split = gauss_split(rng, 80, 120, mu)
        acc, adv = S.balanced_accuracy(split), S.advantage(split)
        assert adv.threshold == acc.threshold
        for a, b in ((adv.value, acc.value), (adv.lo, acc.lo), (adv.hi, acc.hi)):
            assert a == pytest.approx(2 * b - 1, abs=1e-12)
        assert adv.value == pytest.approx(adv.details["tpr"] - adv.details["fpr"])


def test_threshold_is_chosen_on_calibration_only():
    cal_out = np.arange(10, dtype=float)  # 0..9
    cal_in = np.r_[3.0, np.arange(10, 19, dtype=float)]  # 3, 10..18
    # on calibration, t = 10 gives TPR .9, FPR 0: the unique maximum of TPR - FPR
    rng = np.random.default_rng(83)
    thresholds = set()
    for eval_in, eval_out in (
        (np.full(20, 20.0), np.full(20, 12.0)),  # evaluation shifted far away
        (rng.standard_normal(30), rng.standard_normal(40) + 5),  # reversed on evaluation
        (np.arange(10, 30, dtype=float), np.arange(20, dtype=float)),
    ):
        split = S.SplitScores(cal_in, cal_out, eval_in, eval_out)
        acc = S.balanced_accuracy(split)
        thresholds.add(acc.threshold)
        assert acc.details["tp"] == int(np.sum(eval_in >= acc.threshold))
        assert acc.details["fp"] == int(np.sum(eval_out >= acc.threshold))
    # the cut lies between calibration scores 9 and 10: privgate uses the midpoint
    assert thresholds == {9.5}
    # brute force on random calibration data: the returned threshold maximises calibration TPR - FPR
    for _ in range(20):
        split = gauss_split(rng, 40, 60, 0.8)
        t = S.advantage(split).threshold
        cands = np.unique(np.r_[split.cal_in, split.cal_out])
        best = max(np.mean(split.cal_in >= c) - np.mean(split.cal_out >= c) for c in cands)
        assert np.mean(split.cal_in >= t) - np.mean(split.cal_out >= t) == pytest.approx(best)
        # and is the same whatever the evaluation split holds
        other = S.SplitScores(split.cal_in, split.cal_out, split.eval_in * 3 + 1, -split.eval_out)
        assert S.advantage(other).threshold == t


# =========================================================================== 9. calibration mask


@pytest.mark.parametrize("n_in, n_out", ((100, 100), (7, 13), (1, 0), (0, 5), (501, 250)))
@pytest.mark.parametrize("fraction", (0.5, 0.3))
def test_calibration_mask_is_stratified(n_in, n_out, fraction):
    rng = np.random.default_rng(90)
    membership = rng.permutation(np.r_[np.ones(n_in, bool), np.zeros(n_out, bool)])
    mask = S.calibration_mask(membership, seed=3, fraction=fraction)
    assert mask.dtype == bool and mask.shape == membership.shape
    assert abs(int(np.sum(mask & membership)) - fraction * n_in) <= 0.5
    assert abs(int(np.sum(mask & ~membership)) - fraction * n_out) <= 0.5


def test_calibration_mask_is_seeded():
    membership = np.random.default_rng(91).random(400) < 0.4
    a = S.calibration_mask(membership, seed=5)
    assert np.array_equal(a, S.calibration_mask(membership, seed=5))
    assert np.array_equal(a, S.calibration_mask(list(membership), seed=5))
    b = S.calibration_mask(membership, seed=6)
    assert not np.array_equal(a, b)
    assert np.sum(a & membership) == np.sum(b & membership)
    # from_mask puts every example in exactly one of the four groups
    scores = np.arange(400, dtype=float)
    split = S.SplitScores.from_mask(scores, membership, a)
    assert np.array_equal(np.sort(np.r_[split.cal_in, split.cal_out, split.eval_in, split.eval_out]), scores)
    assert np.array_equal(split.cal_in, scores[a & membership])
    assert np.array_equal(split.eval_out, scores[~a & ~membership])


# =========================================================================== 10. class-wise normalisation


def _classwise_data(rng, n=3000):
    groups = rng.integers(0, 3, n)
    shift, scale = np.array([-3.0, 0.0, 5.0]), np.array([0.5, 1.0, 3.0])
    membership = rng.random(n) < 0.5
    mu = 1.0
    scores = shift[groups] + scale[groups] * (rng.standard_normal(n) + mu * membership)
    reference = ~membership & (rng.random(n) < 0.5)  # "calibration non-members"
    return scores, groups, membership, reference, mu


def test_classwise_normalise_removes_per_class_shifts():
    rng = np.random.default_rng(100)
    scores, groups, membership, reference, mu = _classwise_data(rng)
    z = S.classwise_normalise(scores, groups, reference)
    for c in range(3):
        r = (groups == c) & reference
        assert z[r].mean() == pytest.approx(0.0, abs=1e-10)
        assert z[r].std() == pytest.approx(1.0, rel=1e-10)
        # held-out non-members and members of every class land on the same scale
        ho = (groups == c) & ~reference & ~membership
        assert z[ho].mean() == pytest.approx(0.0, abs=0.15)
        assert z[(groups == c) & membership].mean() == pytest.approx(mu, abs=0.15)
    # a single global threshold now works: AUC near Φ(μ/√2), far above the raw AUC
    ev = ~reference
    auc_norm = S.auc(z[ev & membership], z[ev & ~membership])
    auc_raw = S.auc(scores[ev & membership], scores[ev & ~membership])
    truth = st.norm.cdf(mu / math.sqrt(2))
    assert auc_norm.lo <= truth <= auc_norm.hi
    assert auc_raw.hi < auc_norm.lo


def test_classwise_normalise_never_fits_on_non_reference_examples():
    rng = np.random.default_rng(101)
    scores, groups, _, reference, _ = _classwise_data(rng, 600)
    z = S.classwise_normalise(scores, groups, reference)
    for i in np.flatnonzero(~reference)[:25]:
        changed = scores.copy()
        changed[i] = 1e6
        z2 = S.classwise_normalise(changed, groups, reference)
        others = np.arange(len(scores)) != i
        assert np.array_equal(z[others], z2[others])
        assert z2[i] != z[i]
    # changing a reference score of class 0 changes class 0 only
    j = np.flatnonzero(reference & (groups == 0))[0]
    changed = scores.copy()
    changed[j] += 10
    z2 = S.classwise_normalise(changed, groups, reference)
    assert np.array_equal(z[groups != 0], z2[groups != 0])
    assert not np.allclose(z[groups == 0], z2[groups == 0])


def test_classwise_normalise_fallbacks():
    scores = np.array([1.0, 3.0, 5.0, 7.0, 10.0, 20.0, 4.0, 4.0, 9.0])
    groups = np.array([0, 0, 0, 0, 1, 1, 2, 2, 2])
    reference = np.array([True, True, True, False, True, False, True, True, False])
    z = S.classwise_normalise(scores, groups, reference)
    ref = scores[reference]
    gm, gs = ref.mean(), ref.std()
    # class 0: own fit (mean 3, std sqrt(8/3))
    assert z[:4] == pytest.approx((scores[:4] - 3.0) / math.sqrt(8 / 3))
    # class 1: a single reference example -> global standardisation
    assert z[4:6] == pytest.approx((scores[4:6] - gm) / gs)
    # class 2: constant reference scores -> own mean, global scale
    assert z[6:] == pytest.approx((scores[6:] - 4.0) / gs)


# =========================================================================== 11. too little data


GROUPS = ("cal_in", "cal_out", "eval_in", "eval_out")
METRICS = {
    "accuracy": lambda sp: S.balanced_accuracy(sp),
    "advantage": lambda sp: S.advantage(sp),
    "tpr_at_fpr": lambda sp: S.tpr_at_fpr(sp, 0.1),
    "epsilon_split": lambda sp: S.epsilon_lower_bound(sp, 1e-5, 0.95, S.Split()),
    "epsilon_bonferroni": lambda sp: S.epsilon_lower_bound(sp, 1e-5, 0.95, S.Bonferroni()),
}


@pytest.mark.parametrize("metric", sorted(METRICS))
@pytest.mark.parametrize("small", GROUPS)
def test_every_metric_is_unresolvable_below_min_group(metric, small):
    rng = np.random.default_rng(110)
    sizes = {g: S.MIN_GROUP for g in GROUPS}
    ok = S.SplitScores(**{g: rng.standard_normal(sizes[g]) + 3 * g.endswith("in") for g in GROUPS})
    assert METRICS[metric](ok).resolvable
    sizes[small] = S.MIN_GROUP - 1
    split = S.SplitScores(**{g: rng.standard_normal(sizes[g]) + 3 * g.endswith("in") for g in GROUPS})
    est = METRICS[metric](split)
    assert not est.resolvable
    assert math.isnan(est.value) and math.isnan(est.lo) and math.isnan(est.hi)
    assert f"need at least {S.MIN_GROUP} in each group" in est.reason
    words = {
        "cal_in": "calibration members",
        "cal_out": "calibration nonmembers",
        "eval_in": "evaluation members",
        "eval_out": "evaluation nonmembers",
    }
    assert f"{S.MIN_GROUP - 1} {words[small]}" in est.reason


@pytest.mark.parametrize("n1, n0", ((S.MIN_GROUP - 1, 50), (50, S.MIN_GROUP - 1), (0, 0)))
def test_auc_is_unresolvable_below_min_group(n1, n0):
    rng = np.random.default_rng(111)
    est = S.auc(rng.standard_normal(n1) + 5, rng.standard_normal(n0))
    assert not est.resolvable and math.isnan(est.value)
    assert f"({n1} members, {n0} non-members; need {S.MIN_GROUP} each)" in est.reason
    assert S.auc(rng.standard_normal(S.MIN_GROUP) + 5, rng.standard_normal(S.MIN_GROUP)).resolvable
