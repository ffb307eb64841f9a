"""Paired statistics: two evaluations of the same instances compared, and how many instances a
comparison needs.

* ``mcnemar_exact(b, c)`` — McNemar's exact (conditional) test for 0/1 scores: under H0 the ``b`` pairs
  where only the first is right are Binomial(b + c, 1/2) among the ``b + c`` discordant pairs; the two-sided
  p-value is ``binomtest`` 's (for p = 1/2: ``min(1, 2 * P(X <= min(b, c)))``). Worked examples in the tests:
  Armitage & Berry (1994, p. 127; b = 12, c = 2 -> 0.0129) and Fagerland, Lydersen & Laake (2013, BMC Med
  Res Methodol 13:91; b = 1, c = 7 -> 0.070).
* ``paired_bootstrap`` — replicates of the mean paired difference: instances resampled within each
  stratum (a seeded generator per stratum, ``bootstrap.stream_seed``, as the leaderboard's) and the stratum
  means averaged, as the leaderboard's point value is; percentile interval with ``leaderboard.interval``.
* Sample size, paired design, two-sided test at ``alpha`` with ``power``:
  - continuous scores: the paired t-test, exact through the noncentral t distribution (n such that
    P(|T| > t_crit) >= power with T ~ nct(n - 1, delta * sqrt(n) / sd_diff)); e.g. effect size 0.5,
    alpha .05, power .80 -> 34 pairs (G*Power's "difference between two dependent means");
  - 0/1 scores: Connor (1987, Biometrics 43:207-211) for McNemar's test, from the discordant proportion
    psi = p10 + p01 and the difference delta = p01 - p10:
    n = ((z_{1-a/2} sqrt(psi) + z_{1-b} sqrt(psi - delta^2)) / delta)^2.
  ``minimum_detectable_*`` invert them: the smallest difference ``n`` instances detect with that power.

Pure numpy/scipy (scipy is a core dependency for the jury's ICC intervals); nothing here reads a store or
raises on data: an input that admits no answer (no pairs, zero spread, a difference larger than the
discordant proportion allows) gives ``None``/NaN, which the callers show as "not testable".
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy import stats

from medhelm.store.bootstrap import _BLOCK_ELEMENTS
from medhelm.store.leaderboard import nanmean

MAX_PLAN_N = 10_000_000  # a plan beyond this is "not reachable" (None), not a loop that never ends


def is_binary(values: np.ndarray) -> bool:
    """Every value is 0 or 1 (and there is at least one)."""
    v = np.asarray(values, dtype=float)
    return v.size > 0 and bool(np.all((v == 0.0) | (v == 1.0)))


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value from the discordant counts (1.0 when there is none)."""
    if b < 0 or c < 0:
        raise ValueError("discordant counts must be >= 0")
    if b + c == 0:
        return 1.0
    return float(stats.binomtest(int(min(b, c)), int(b + c), 0.5, alternative="two-sided").pvalue)


def discordant(a: np.ndarray, b: np.ndarray) -> tuple[int, int]:
    """(pairs where only ``a`` is 1, pairs where only ``b`` is 1) of two 0/1 vectors."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    return int(np.sum((a == 1) & (b == 0))), int(np.sum((a == 0) & (b == 1)))


def paired_bootstrap(diffs: Sequence[np.ndarray], replicates: int, rngs: Sequence[np.random.Generator]
                     ) -> np.ndarray:
    """Replicates ``[replicates]`` of the macro mean (over strata) of the per-stratum mean difference.

    ``diffs[k]`` holds stratum k's paired differences (no NaN); each stratum is resampled with its own
    generator, so a stratum's draws do not depend on which other strata exist."""
    reps = [_resampled_means(np.asarray(d, dtype=float), replicates, rng) for d, rng in zip(diffs, rngs)]
    if not reps:
        return np.full(replicates, np.nan)
    return nanmean(np.stack(reps), axis=0)


def _resampled_means(d: np.ndarray, replicates: int, rng: np.random.Generator) -> np.ndarray:
    """Means of ``replicates`` resamples (with replacement) of one vector. Kept apart from the leaderboard's
    ``bootstrap.stratum_replicates`` on purpose: that one resamples many models at once through a count
    matrix; for the single vector of paired differences, indexing is faster (docs/design-notes.md), and the draws are the same kind (uniform
    indices from the stratum's own seeded generator)."""
    n = len(d)
    out = np.full(replicates, np.nan)
    if n == 0:
        return out
    block = max(1, _BLOCK_ELEMENTS // n)
    for start in range(0, replicates, block):
        b = min(block, replicates - start)
        idx = rng.integers(0, n, size=(b, n), dtype=np.int32 if n < 2**31 else np.int64)
        out[start:start + b] = d[idx].mean(axis=1)
    return out


def bootstrap_p(replicates: np.ndarray) -> float:
    """Two-sided percentile-bootstrap p-value for "the mean difference is 0": twice the smaller share of
    replicates on either side of 0 (so p < alpha exactly when the (1 - alpha) percentile interval excludes 0,
    up to ties at 0)."""
    r = np.asarray(replicates, dtype=float)
    r = r[~np.isnan(r)]
    if r.size == 0:
        return math.nan
    return float(min(1.0, 2.0 * min(np.mean(r <= 0.0), np.mean(r >= 0.0))))


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values (NaN stays NaN and is not counted)."""
    p = np.asarray(pvalues, dtype=float)
    out = np.full(p.shape, np.nan)
    idx = np.flatnonzero(~np.isnan(p))
    order = idx[np.argsort(p[idx], kind="stable")]
    m, running = len(order), 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p[i]))
        out[i] = running
    return out.tolist()


# ---- sample size and minimum detectable difference (paired design, two-sided) ----

def _z(q: float) -> float:
    return float(stats.norm.ppf(q))


def power_paired_t(n: int, delta: float, sd: float, alpha: float = 0.05) -> float:
    """Power of the two-sided paired t-test on ``n`` pairs for a true mean difference ``delta``."""
    if n < 2 or sd <= 0:
        return math.nan
    df = n - 1
    nc = abs(delta) * math.sqrt(n) / sd
    t = float(stats.t.ppf(1.0 - alpha / 2.0, df))
    exact = float(stats.nct.sf(t, df, nc) + stats.nct.cdf(-t, df, nc))
    if math.isnan(exact):  # scipy's noncentral t fails for some (df, nc) with df of 1 or 2: the normal
        # approximation of the noncentral t (Johnson & Welch 1940) stands in, continuous and increasing in nc
        exact = float(stats.norm.cdf((nc - t) / math.sqrt(1.0 + t * t / (2.0 * df))))
    return exact


def n_paired_t(delta: float, sd: float, alpha: float = 0.05, power: float = 0.8) -> int | None:
    """Fewest pairs whose paired t-test detects ``delta`` with ``power`` (None: sd or delta is 0/NaN)."""
    if not (sd > 0 and abs(delta) > 0) or math.isnan(sd) or math.isnan(delta):
        return None
    z = (_z(1 - alpha / 2) + _z(power)) * sd / abs(delta)
    n = max(2, math.ceil(z * z))  # the normal approximation: never above the t answer
    if n > MAX_PLAN_N:
        return None
    while power_paired_t(n, delta, sd, alpha) < power:
        n += 1
        if n > MAX_PLAN_N:
            return None
    while n > 2 and power_paired_t(n - 1, delta, sd, alpha) >= power:  # pragma: no cover - defensive
        n -= 1
    return n


def power_mcnemar(n: int, delta: float, psi: float, alpha: float = 0.05) -> float:
    """Connor (1987) power of McNemar's test on ``n`` pairs (discordant proportion ``psi``, difference
    ``delta``; the far tail, which is negligible, left out as in Connor's formula)."""
    if n < 1 or not 0 < abs(delta) <= psi <= 1 or psi - delta * delta <= 0:
        return math.nan
    return float(stats.norm.cdf((abs(delta) * math.sqrt(n) - _z(1 - alpha / 2) * math.sqrt(psi))
                                / math.sqrt(psi - delta * delta)))


def n_mcnemar(delta: float, psi: float, alpha: float = 0.05, power: float = 0.8) -> int | None:
    """Connor (1987) pairs for McNemar's test (None when ``delta`` is 0 or larger than ``psi`` allows)."""
    if math.isnan(delta) or math.isnan(psi) or not 0 < abs(delta) <= psi <= 1 or psi - delta * delta <= 0:
        return None
    root = (_z(1 - alpha / 2) * math.sqrt(psi) + _z(power) * math.sqrt(psi - delta * delta)) / abs(delta)
    n = math.ceil(root * root - 1e-9)  # 1e-9: a product that is an integer up to rounding stays that integer
    return n if n <= MAX_PLAN_N else None


def _smallest(detects_by, lo: float, hi: float) -> float | None:
    """Smallest x in (lo, hi] where ``detects_by(x)`` (power minus the target, increasing in x) reaches 0,
    by Brent's method (a handful of power evaluations: the dashboard computes one per cell); None if even
    ``hi`` falls short."""
    from scipy.optimize import brentq

    top = detects_by(hi)
    if math.isnan(top) or top < 0:
        return None
    bottom = detects_by(lo)
    if not math.isnan(bottom) and bottom >= 0:
        return lo
    return float(brentq(lambda x: _nan_low(detects_by(x)), lo, hi, xtol=1e-7, rtol=1e-9))


def _nan_low(x: float) -> float:
    return -1.0 if math.isnan(x) else x


def minimum_detectable_t(n: int, sd: float, alpha: float = 0.05, power: float = 0.8) -> float | None:
    """The smallest mean difference ``n`` pairs detect with ``power`` (paired t-test; None below 3 pairs, where
    the t-test has almost no power and scipy's noncentral t is unreliable)."""
    if n < 3 or not sd > 0:
        return None
    low = (_z(1 - alpha / 2) + _z(power)) * sd / math.sqrt(n)  # the normal approximation: a lower bound
    df = n - 1  # the central-t approximation, close above the exact answer; the bracket's top is well past it
    high = 1.5 * float(stats.t.ppf(1 - alpha / 2, df) + stats.t.ppf(power, df)) * sd / math.sqrt(n)
    return _smallest(lambda d: power_paired_t(n, d, sd, alpha) - power, low * 0.999, max(high, low * 1.5))


def minimum_detectable_mcnemar(n: int, psi: float, alpha: float = 0.05, power: float = 0.8) -> float | None:
    """The smallest difference in proportions ``n`` pairs with discordant proportion ``psi`` detect. A
    difference larger than ``psi`` makes at least that share of pairs discordant, so it is tested with
    discordance ``max(psi, d)`` (otherwise a suite whose models rarely disagree would have no answer)."""
    if n < 1 or not 0 < psi <= 1:
        return None
    return _smallest(lambda d: _nan_low(power_mcnemar(n, d, min(1.0, max(psi, d)), alpha)) - power,
                     1e-9, 1.0 - 1e-9)


def independent_discordance(p: float, delta: float) -> float:
    """Discordant proportion of two 0/1 scorers with accuracies p and p -/+ delta scoring independently
    (the larger of the two: a conservative guess when only one model's pilot is known)."""
    best = math.nan
    for q in (p - delta, p + delta):
        if 0.0 <= q <= 1.0:
            psi = p * (1.0 - q) + q * (1.0 - p)
            best = psi if math.isnan(best) else max(best, psi)
    return best
