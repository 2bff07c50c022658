"""privgate.stats checked against known truths: best-of-m, TPR at fixed FPR, accuracy and advantage, calibration.

The same kind of tests as ``test_stats.py`` (its second half): Monte-Carlo runs with fixed seeds against binomial
acceptance bands (``stats_known``), closed forms and sklearn's curves; then the calibration mask, class-wise
normalisation and the metrics' refusal below the minimum group size.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as st
from stats_known import binom_hi, binom_lo, gauss_split, rr_scores

from privgate import stats as S

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
