"""The store's confidence intervals (store/intervals.py, issue 51 item 3) against independent references: scipy's
exact binomial interval and its BCa bootstrap; coverage computed exactly from the binomial and multinomial
distributions (no simulation, so deterministic and fast) at n = 11, 20, 50 and accuracies 0.5-0.99; and no
zero-width interval from a sample. The simulated coverage, also of continuous scores, is bench/bench_intervals.py's
(docs/benchmarks.md)."""

from __future__ import annotations

import math
from itertools import product

import numpy as np
import pytest
from scipy import stats

from medhelm.store import intervals
from medhelm.store.bootstrap import stratum_replicates, stream_seed
from medhelm.store.paired import paired_bootstrap

ONE = np.zeros(1)  # a non-empty replicate array: 0/1 intervals do not read the replicates, only that there are some
SIZES, ACCURACIES = (11, 20, 50), (0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99)


@pytest.mark.parametrize("k,n", [(0, 11), (1, 11), (10, 11), (11, 11), (7, 20), (20, 20), (25, 50), (49, 50)])
def test_clopper_pearson_is_scipys_exact_interval(k: int, n: int) -> None:
    ref = stats.binomtest(k, n).proportion_ci(0.95, method="exact")
    assert intervals.clopper_pearson(k, n) == pytest.approx((ref.low, ref.high), abs=1e-12)
    x = np.r_[np.ones(k), np.zeros(n - k)]
    assert intervals.mean([x], ONE) == pytest.approx((ref.low, ref.high), abs=1e-12)


def _coverage(n: int, p: float, interval) -> float:  # noqa: ANN001
    pmf = stats.binom.pmf(np.arange(n + 1), n, p)
    ends = [interval(k) for k in range(n + 1)]
    return float(sum(pmf[k] for k, (lo, hi) in enumerate(ends) if lo <= p <= hi))


@pytest.mark.parametrize("n", SIZES)
def test_accuracy_intervals_cover_at_every_n_and_accuracy(n: int) -> None:
    """The issue: percentile bootstraps covered 41-88 % at n = 11-20 and accuracy 0.90-0.95. Ours >= 0.95 exactly
    (the floor asked is 0.93); the ideal percentile bootstrap (its quantiles from the exact resampling
    distribution, Binomial(n, k/n) / n) is the old interval's limit, and it does not."""
    ours = {k: intervals.mean([np.r_[np.ones(k), np.zeros(n - k)]], ONE) for k in range(n + 1)}
    old = {k: (stats.binom.ppf(0.025, n, k / n) / n, stats.binom.ppf(0.975, n, k / n) / n) for k in range(n + 1)}
    for p in ACCURACIES:
        assert _coverage(n, p, ours.__getitem__) >= 0.95, p
    assert min(_coverage(n, p, old.__getitem__) for p in ACCURACIES) < 0.5  # at p = 0.99


def test_no_zero_width_interval_from_a_sample() -> None:
    all_right = np.ones(11)
    reps = stratum_replicates(all_right[None, :], 200, stream_seed(0, "x"))[:, 0]
    assert np.ptp(reps) == 0  # the percentile bootstrap's [1.000, 1.000]
    low, high = intervals.mean([all_right], reps)
    assert high == 1.0 and low == pytest.approx(0.025 ** (1 / 11)) and low < 0.75
    # a continuous score with no spread (every ROUGE-L 0.8): the [0, 1] bound, never zero width
    low, high = intervals.mean([np.full(20, 0.8)], np.full(200, 0.8))
    assert low < 0.8 < high and high - low > 0.05
    # two releases that agree on every pair: the change is bounded by how many pairs could disagree
    same = np.r_[np.ones(15), np.zeros(5)]
    low, high = intervals.paired_difference([(same, same)], ONE)
    assert -low == high == pytest.approx(1 - 0.025 ** (1 / 20))
    # on an unknown scale (a 1-5 rating with no spread) there is no interval rather than a zero-width one
    assert all(math.isnan(v) for v in intervals.mean([np.full(20, 4.0)], np.full(200, 4.0)))


def test_no_replicates_means_no_interval() -> None:
    assert all(math.isnan(v) for v in intervals.mean([np.ones(20)], np.empty(0)))
    assert all(math.isnan(v) for v in intervals.paired_difference([(np.ones(5), np.zeros(5))], np.empty(0)))


def test_strata_use_the_korn_graubard_effective_size() -> None:
    """Two subsets weighted equally (a cell's macro mean): n* = p(1 - p) / var(p) by hand, then Clopper-Pearson."""
    a, b = np.r_[np.ones(8), np.zeros(2)], np.r_[np.ones(15), np.zeros(15)]
    p = (0.8 + 0.5) / 2
    var = (0.8 * 0.2 / 10 + 0.5 * 0.5 / 30) / 4
    n_eff = p * (1 - p) / var
    want = (stats.beta.ppf(0.025, p * n_eff, n_eff - p * n_eff + 1), stats.beta.ppf(0.975, p * n_eff + 1,
                                                                                   n_eff - p * n_eff))
    assert intervals.mean([a, b], ONE) == pytest.approx(want, abs=1e-12)
    assert n_eff < 40  # unequal subsets weighted equally are worth fewer than their 40 instances


def test_bca_agrees_with_scipy() -> None:
    """A skewed continuous sample: our BCa (stratum_replicates' draws, influence-based acceleration, which for
    a mean equals the jackknife's) against scipy's BCa on its own draws: two Monte Carlo estimates of one interval."""
    x = np.random.default_rng(3).beta(5, 1.5, 40)
    reps = stratum_replicates(x[None, :], 20000, stream_seed(1, "bca"))[:, 0]
    ours = intervals.bca(float(x.mean()), reps, intervals._influence([x]))
    ref = stats.bootstrap((x,), np.mean, n_resamples=20000, method="BCa", random_state=2).confidence_interval
    assert ours == pytest.approx((ref.low, ref.high), abs=0.006)
    wider = intervals.bca(float(x.mean()), reps, intervals._influence([x]), n=len(x))  # expanded for small n
    assert wider[0] < ours[0] and wider[1] > ours[1]


@pytest.mark.parametrize("n", (11, 20))
def test_paired_change_intervals_cover(n: int) -> None:
    """Exact coverage over every 2x2 table of n pairs (multinomial), for changes between releases of the
    size the issue found hidden: A 0.9 -> B 0.8, 0.99 -> 0.95, 0.7 -> 0.6, and no change with disagreements."""
    for pa, p10, p01 in ((0.9, 0.1, 0.0), (0.99, 0.04, 0.0), (0.7, 0.15, 0.05), (0.9, 0.05, 0.05)):
        probs = (pa - p10, p10, p01, 1 - pa - p01)
        truth, covered = p01 - p10, 0.0
        for both, a_only, b_only in product(range(n + 1), repeat=3):
            neither = n - both - a_only - b_only
            if neither < 0:
                continue
            weight = stats.multinomial.pmf([both, a_only, b_only, neither], n, probs)
            if weight < 1e-12:
                continue
            x = np.r_[np.ones(both + a_only), np.zeros(b_only + neither)]
            y = np.r_[np.ones(both), np.zeros(a_only), np.ones(b_only), np.zeros(neither)]
            low, high = intervals.paired_difference([(x, y)], ONE)
            assert high > low
            covered += weight * (low <= truth <= high)
        assert covered >= 0.93, (pa, p10, p01, covered)


def test_a_continuous_paired_change_uses_bca() -> None:
    rng = np.random.default_rng(8)
    x = rng.beta(4, 2, 30)
    y = np.clip(x - 0.1 + rng.normal(0, 0.05, 30), 0, 1)
    reps = paired_bootstrap([y - x], 4000, [stream_seed(0, "c")])
    low, high = intervals.paired_difference([(x, y)], reps)
    assert low < (y - x).mean() < high < 0
    assert (low, high) == intervals.bca(float((y - x).mean()), reps, intervals._influence([y - x]), n=30)


def test_a_category_of_one_benchmark_has_its_interval_and_sums_widen() -> None:
    v, lo, hi = np.array([[0.7]]), np.array([[0.6]]), np.array([[0.78]])
    m, low, high = intervals.average(v, lo, hi)
    assert (m[0], low[0], high[0]) == pytest.approx((0.7, 0.6, 0.78))
    m, low, high = intervals.average(np.array([[0.7, 0.5]]), np.array([[0.6, 0.4]]), np.array([[0.8, 0.6]]))
    assert m[0] == pytest.approx(0.6) and high[0] - m[0] == pytest.approx(math.hypot(0.1, 0.1) / 2)
