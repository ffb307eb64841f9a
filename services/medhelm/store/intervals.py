"""Confidence intervals: the one owner. Every interval the store computes — a leaderboard cell, a category's
macro average, a patient subgroup and the gap between two, the paired change between two releases, win rates
and ranks — comes from here.

* A mean of 0/1 values (accuracy, exact match): **Clopper–Pearson**, the exact binomial interval. Chosen over
  Wilson because its coverage is at least the nominal level at every n and every true accuracy, where Wilson's
  falls below it near the edges at small n (``bench/bench_intervals.py``, docs/benchmarks.md). The price is width (conservative), which a committee
  signing a model into use should prefer to an interval that is too short. Over several strata (a cell's
  subsets, each weighted equally, as its value is) the same interval at the effective sample size
  n* = p(1 - p) / var(p) (Korn & Graubard 1998, Survey Methodology 24:193-201; n* capped at the number of
  instances, and that number when the variance is 0), which is exactly Clopper–Pearson for one stratum.
* A mean of other values (ROUGE, a jury's 0-1 score): **BCa bootstrap** (Efron 1987) from the stored stratified
  replicates, the acceleration from the empirical influence values of the stratified mean (Davison & Hinkley
  1997, eq. 3.47/5.25), its quantiles expanded for small samples (``bca``). When the replicates have no spread
  (every value equal) and the values lie in [0, 1], the Korn–Graubard interval with the binomial variance bound
  (the widest any [0, 1] variable with that mean can have) stands in; outside [0, 1] there is no interval
  (None), never a zero-width one.
* A paired change (B - A on the same instances): the **MOVER** (Zou & Donner 2008; for 0/1 values with Wilson
  components it is Newcombe's 1998 method 10) from each side's interval above and the correlation of the two
  sides' estimates; for non-0/1 values the BCa interval of the paired bootstrap. When every pair agrees
  (all differences 0, values in [0, 1]) the difference is at most the share of pairs that could disagree:
  +/- the Clopper–Pearson upper bound of 0 disagreements in n.
* The gap between two subgroups (independent groups) and a category's mean over benchmarks (independent
  instance sets): MOVER sums of the components' intervals (one benchmark: exactly its interval).
* Win rates and ranks (functions of every cell at once, no sampling distribution of their own): the percentile
  bootstrap over the cells' joint replicates (``percentile``).

Nothing here reads a store; an input that admits no interval gives NaN (the callers store None).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence

import numpy as np
from scipy import stats

LEVEL = 0.95
# what the intervals are, in words, for every page and table that shows one
METHOD = ("95 % intervals: Clopper-Pearson for 0/1 metrics, BCa bootstrap for the others; win rates and ranks: "
          "percentile bootstrap")
PAIRED_METHOD = ("interval of the change: MOVER from Clopper-Pearson sides for 0/1 metrics, BCa of the paired "
                 "bootstrap for the others")


def percentile(replicates: np.ndarray, level: float = LEVEL) -> tuple[np.ndarray, np.ndarray]:
    """Percentile bootstrap interval over axis 0 (NaN where every replicate is NaN)."""
    reps = np.asarray(replicates, dtype=float)
    tail = (1.0 - level) / 2.0 * 100.0
    if reps.shape[0] == 0:
        nan = np.full(reps.shape[1:], np.nan)
        return nan, nan
    with warnings.catch_warnings():  # all-NaN slices are expected (a model without that benchmark)
        warnings.simplefilter("ignore", RuntimeWarning)
        low = np.nanpercentile(reps, tail, axis=0)
        high = np.nanpercentile(reps, 100.0 - tail, axis=0)
    return low, high


def clopper_pearson(x: float, n: float, level: float = LEVEL) -> tuple[float, float]:
    """Exact binomial interval of x successes in n (both may be fractional: beta quantiles)."""
    if not n > 0:
        return math.nan, math.nan
    x = min(max(x, 0.0), n)
    tail = (1.0 - level) / 2.0
    low = 0.0 if x <= 0 else float(stats.beta.ppf(tail, x, n - x + 1))
    high = 1.0 if x >= n else float(stats.beta.ppf(1.0 - tail, x + 1, n - x))
    return low, high


def is_binary(strata: Sequence[np.ndarray]) -> bool:
    v = np.concatenate([np.asarray(s, dtype=float) for s in strata]) if strata else np.empty(0)
    return v.size > 0 and bool(np.all((v == 0.0) | (v == 1.0)))


def _in_unit(strata: Sequence[np.ndarray]) -> bool:
    v = np.concatenate([np.asarray(s, dtype=float) for s in strata]) if strata else np.empty(0)
    return v.size > 0 and bool(np.all((v >= 0.0) & (v <= 1.0)))


def _strata(strata: Sequence[np.ndarray]) -> list[np.ndarray]:
    out = [np.asarray(s, dtype=float) for s in strata]
    return [s[~np.isnan(s)] for s in out if np.any(~np.isnan(s))]


def proportion(strata: Sequence[np.ndarray], level: float = LEVEL) -> tuple[float, float]:
    """Clopper–Pearson at the Korn–Graubard effective sample size of the equally weighted mean of the strata
    means (one stratum: exactly Clopper–Pearson). Values in [0, 1]; each stratum's variance is bounded by the
    binomial p(1 - p), its exact value for 0/1 data."""
    s = _strata(strata)
    if not s:
        return math.nan, math.nan
    w = 1.0 / len(s)
    means = np.array([x.mean() for x in s])
    sizes = np.array([len(x) for x in s], dtype=float)
    p = float(means.mean())
    var = float(np.sum(w * w * means * (1.0 - means) / sizes))
    total = float(sizes.sum())
    n_eff = total if var <= 0 else min(total, p * (1.0 - p) / var)
    return clopper_pearson(p * n_eff, n_eff, level)


def bca(point: float, replicates: np.ndarray, influence: np.ndarray, level: float = LEVEL,
        n: int | None = None) -> tuple[float, float]:
    """BCa interval from bootstrap replicates and the estimate's empirical influence values (already divided
    by their stratum's size); NaN when the replicates lie all on one side of the estimate or have no spread.

    With ``n`` (the sample size) the normal quantiles are *expanded* to sqrt(n / (n - 1)) t_{n-1} (Hesterberg
    2015, Am Stat 69:371-386): the bootstrap distribution of a mean is too narrow by about sqrt((n - 1) / n)
    and its tails are normal where a small sample's are Student's; without it BCa covers well below 95 % at
    n = 11."""
    r = np.asarray(replicates, dtype=float)
    r = r[~np.isnan(r)]
    if r.size < 2 or np.ptp(r) == 0 or math.isnan(point):
        return math.nan, math.nan
    below = (np.sum(r < point) + 0.5 * np.sum(r == point)) / r.size
    if not 0.0 < below < 1.0:
        return math.nan, math.nan
    z0 = float(stats.norm.ppf(below))
    u = np.asarray(influence, dtype=float)
    spread = float(np.sum(u * u))
    a = float(np.sum(u ** 3) / (6.0 * spread ** 1.5)) if spread > 0 else 0.0
    ends = []
    for q in ((1.0 - level) / 2.0, (1.0 + level) / 2.0):
        quantile = float(stats.norm.ppf(q)) if not n or n < 2 else \
            math.sqrt(n / (n - 1.0)) * float(stats.t.ppf(q, n - 1))
        z = z0 + quantile
        ends.append(float(stats.norm.cdf(z0 + z / (1.0 - a * z))))
    low, high = np.quantile(r, ends)
    return float(low), float(high)


def _influence(strata: Sequence[np.ndarray]) -> np.ndarray:
    """Empirical influence values of the equally weighted mean of stratum means, each over its stratum's size."""
    k = len(strata)
    return np.concatenate([(x - x.mean()) / (k * len(x)) for x in strata]) if k else np.empty(0)


def mean(strata: Sequence[np.ndarray], replicates: np.ndarray | None, level: float = LEVEL) -> tuple[float, float]:
    """The interval of the equally weighted mean of the strata means (a leaderboard cell, a subgroup): see the
    module docstring for which interval. ``replicates``: the stratified bootstrap replicates of that mean; none
    (``--bootstrap 0``) means no interval of any kind, as everywhere."""
    s = _strata(strata)
    if not s or replicates is None or not len(replicates):
        return math.nan, math.nan
    if is_binary(s):
        return proportion(s, level)
    point = float(np.mean([x.mean() for x in s]))
    low, high = bca(point, replicates, _influence(s), level, n=sum(len(x) for x in s))
    if not math.isnan(low) and high > low:
        return low, high
    return proportion(s, level) if _in_unit(s) else (math.nan, math.nan)


def paired_difference(pairs: Sequence[tuple[np.ndarray, np.ndarray]], replicates: np.ndarray | None,
                      level: float = LEVEL) -> tuple[float, float]:
    """The interval of mean(B) - mean(A) over paired strata ``(A values, B values)`` (equally weighted strata
    means, as the estimate): see the module docstring. ``replicates``: paired bootstrap replicates of it."""
    pairs = [(np.asarray(x, dtype=float), np.asarray(y, dtype=float)) for x, y in pairs if len(x)]
    if not pairs or replicates is None or not len(replicates):
        return math.nan, math.nan
    xs, ys = [x for x, _ in pairs], [y for _, y in pairs]
    diffs = [y - x for x, y in pairs]
    unit = _in_unit(xs) and _in_unit(ys)
    if all(not np.any(d) for d in diffs):  # every pair agrees
        if not unit:
            return math.nan, math.nan
        bound = clopper_pearson(0.0, float(sum(len(d) for d in diffs)), level)[1]
        return -bound, bound
    if is_binary(xs + ys):
        return _mover(xs, ys, level)
    point = float(np.mean([d.mean() for d in diffs]))
    low, high = bca(point, replicates, _influence(diffs), level, n=sum(len(d) for d in diffs))
    if not math.isnan(low) and high > low:
        return low, high
    return _mover(xs, ys, level) if unit else (math.nan, math.nan)


def _mover(xs: list[np.ndarray], ys: list[np.ndarray], level: float) -> tuple[float, float]:
    """MOVER for B - A from each side's ``proportion`` interval and the correlation of the two estimates."""
    w = 1.0 / len(xs)
    px, py = float(np.mean([x.mean() for x in xs])), float(np.mean([y.mean() for y in ys]))
    lx, ux = proportion(xs, level)
    ly, uy = proportion(ys, level)
    cov = sum(w * w * float(np.mean((x - x.mean()) * (y - y.mean()))) / len(x) for x, y in zip(xs, ys))
    vx = sum(w * w * float(x.var()) / len(x) for x in xs)
    vy = sum(w * w * float(y.var()) / len(y) for y in ys)
    r = cov / math.sqrt(vx * vy) if vx > 0 and vy > 0 else 0.0
    d = py - px
    low = d - math.sqrt(max(0.0, (py - ly) ** 2 + (ux - px) ** 2 - 2 * r * (py - ly) * (ux - px)))
    high = d + math.sqrt(max(0.0, (uy - py) ** 2 + (px - lx) ** 2 - 2 * r * (uy - py) * (px - lx)))
    return max(-1.0, low), min(1.0, high)


def independent_difference(high_group: tuple[float, float, float], low_group: tuple[float, float, float]
                           ) -> tuple[float, float]:
    """MOVER interval of the difference of two independent estimates, each (value, low, high)."""
    (a, la, ua), (b, lb, ub) = high_group, low_group
    if any(math.isnan(v) for v in (a, la, ua, b, lb, ub)):
        return math.nan, math.nan
    d = a - b
    return d - math.hypot(a - la, ub - b), d + math.hypot(ua - a, b - lb)


def average(values: np.ndarray, lows: np.ndarray, highs: np.ndarray, axis: int = -1
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """MOVER interval of the mean of independent estimates along ``axis`` (NaN values left out; a value
    without an interval, e.g. a cell from run statistics only, counts as exact): (mean, low, high)."""
    v = np.asarray(values, dtype=float)
    present = ~np.isnan(v)
    count = present.sum(axis=axis)
    below = np.where(present, np.nan_to_num(v - np.asarray(lows, dtype=float)), 0.0)
    above = np.where(present, np.nan_to_num(np.asarray(highs, dtype=float) - v), 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        m = np.where(count > 0, np.nansum(v, axis=axis) / np.maximum(count, 1), np.nan)
        low = m - np.sqrt(np.sum(below ** 2, axis=axis)) / np.maximum(count, 1)
        high = m + np.sqrt(np.sum(above ** 2, axis=axis)) / np.maximum(count, 1)
    return m, np.where(count > 0, low, np.nan), np.where(count > 0, high, np.nan)
