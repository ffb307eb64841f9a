"""Agreement statistics between raters (judges, clinicians): numpy, plus scipy's F quantiles.

* ICC — Shrout & Fleiss (1979), from the two-way ANOVA mean squares of an n targets x k raters
  matrix (complete rows only): ICC(1,1), ICC(2,1), ICC(3,1) and their k-rater means.
  95 % intervals from the F distribution (McGraw & Wong 1996; Shrout & Fleiss 1979), the formulas of
  pingouin's ``intraclass_corr`` and R psych's ``ICC``: exact F for ICC(1,·) and ICC(3,·), the
  Satterthwaite approximation for ICC(2,1) and its Spearman-Brown step-up for ICC(2,k). For ICC(2,·)
  we give more than the reference: the hull of that F interval and a generalized confidence interval
  (generalized pivots, seeded), since the F one alone under-covers with many targets and few judges (coverage
  table in docs/jury.md, bench/bench_icc_coverage.py). A percentile
  bootstrap over targets keeps the judges fixed, so it leaves out the between-judge variance ICC(2) is
  about (it under-covers the truth: docs/jury.md).
* Krippendorff's alpha — coincidence-matrix form (Krippendorff 2011), any number of raters, missing
  values allowed; nominal, ordinal, interval or ratio distance (``alpha_level`` picks the one that fits a
  rubric's scale).
* Spearman's rho with average ranks for ties.
* Percentile bootstrap confidence intervals that resample targets (units), for alpha, Spearman, means.

Every function returns None (never 0) where the statistic is undefined (too few targets, no variance).
Where the data cannot support an interval (too few targets, no residual variance, bounds that leave
the statistic's range) the estimate carries no interval and a one-line ``reason`` instead.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

DEFAULT_BOOTSTRAP = 1000
LEVELS = ("nominal", "ordinal", "interval", "ratio")


@dataclass(frozen=True)
class ICC:
    n: int  # targets used (complete rows)
    k: int  # raters
    bms: float  # between-targets mean square
    wms: float  # within-target mean square
    jms: float  # between-raters (judges) mean square
    ems: float  # residual mean square

    def _ratio(self, num: float, den: float) -> float | None:
        return num / den if den > 0 else None

    @property
    def icc1_1(self) -> float | None:
        return self._ratio(self.bms - self.wms, self.bms + (self.k - 1) * self.wms)

    @property
    def icc2_1(self) -> float | None:
        return self._ratio(self.bms - self.ems,
                           self.bms + (self.k - 1) * self.ems + self.k * (self.jms - self.ems) / self.n)

    @property
    def icc3_1(self) -> float | None:
        return self._ratio(self.bms - self.ems, self.bms + (self.k - 1) * self.ems)

    @property
    def icc1_k(self) -> float | None:
        return self._ratio(self.bms - self.wms, self.bms)

    @property
    def icc2_k(self) -> float | None:
        return self._ratio(self.bms - self.ems, self.bms + (self.jms - self.ems) / self.n)

    @property
    def icc3_k(self) -> float | None:
        return self._ratio(self.bms - self.ems, self.bms)

    def get(self, form: str) -> float | None:
        """``form`` is one of "1,1", "2,1", "3,1", "1,k", "2,k", "3,k"."""
        return getattr(self, "icc" + form.replace(",", "_"))


ICC_FORMS = ("1,1", "2,1", "3,1", "1,k", "2,k", "3,k")


def complete_rows(matrix: np.ndarray) -> np.ndarray:
    m = np.asarray(matrix, dtype=float)
    return m[~np.isnan(m).any(axis=1)] if m.size else m.reshape(0, m.shape[1] if m.ndim == 2 else 0)


def icc(matrix: np.ndarray) -> ICC | None:
    """Shrout & Fleiss mean squares of a targets x raters matrix; rows with a missing value are dropped."""
    y = complete_rows(matrix)
    if y.ndim != 2 or y.shape[0] < 2 or y.shape[1] < 2:
        return None
    n, k = y.shape
    grand = y.mean()
    ss_total = float(((y - grand) ** 2).sum())
    ss_targets = float(k * ((y.mean(axis=1) - grand) ** 2).sum())
    ss_raters = float(n * ((y.mean(axis=0) - grand) ** 2).sum())
    ss_error = ss_total - ss_targets - ss_raters
    return ICC(n=n, k=k, bms=ss_targets / (n - 1), wms=(ss_total - ss_targets) / (n * (k - 1)),
               jms=ss_raters / (k - 1), ems=ss_error / ((n - 1) * (k - 1)))


def icc_value(matrix: np.ndarray, form: str) -> float | None:
    result = icc(matrix)
    return None if result is None else result.get(form)


def krippendorff_alpha(data: np.ndarray, level: str = "ordinal") -> float | None:
    """Alpha of a raters x units matrix (NaN = no rating). Units with fewer than 2 ratings are not pairable."""
    if level not in LEVELS:
        raise ValueError(f"level must be one of {LEVELS}")
    d = np.asarray(data, dtype=float)
    if d.ndim != 2 or d.size == 0:
        return None
    values = np.unique(d[~np.isnan(d)])
    if values.size < 2:
        return None
    # counts[u, c]: how many raters gave unit u the value c
    index = np.searchsorted(values, np.where(np.isnan(d), values[0], d))
    counts = np.zeros((d.shape[1], values.size))
    for r in range(d.shape[0]):
        rated = ~np.isnan(d[r])
        np.add.at(counts, (np.nonzero(rated)[0], index[r, rated]), 1)
    m = counts.sum(axis=1)
    counts, m = counts[m >= 2], m[m >= 2]
    if counts.shape[0] == 0:
        return None
    # coincidence matrix o[c, k] = sum_u n_uc (n_uk - [c == k]) / (m_u - 1)
    weighted = counts / (m - 1)[:, None]
    o = weighted.T @ counts - np.diag(weighted.sum(axis=0))
    n_c = o.sum(axis=1)
    n = n_c.sum()
    delta = _distance(values, n_c, level)
    observed = (o * delta).sum() / n
    expected = (np.outer(n_c, n_c) * delta).sum() / (n * (n - 1))
    return None if expected == 0 else float(1.0 - observed / expected)


def _distance(values: np.ndarray, n_c: np.ndarray, level: str) -> np.ndarray:
    if level == "nominal":
        return 1.0 - np.eye(values.size)
    if level == "interval":
        return (values[:, None] - values[None, :]) ** 2
    if level == "ratio":
        s = values[:, None] + values[None, :]
        with np.errstate(invalid="ignore", divide="ignore"):
            r = ((values[:, None] - values[None, :]) / s) ** 2
        return np.nan_to_num(r)
    # ordinal: (sum of n_g for g from c to k, minus half of n_c and n_k)^2
    cum = np.concatenate(([0.0], np.cumsum(n_c)))
    lo = np.minimum.outer(np.arange(values.size), np.arange(values.size))
    hi = np.maximum.outer(np.arange(values.size), np.arange(values.size))
    between = cum[hi + 1] - cum[lo]
    return (between - (n_c[:, None] + n_c[None, :]) / 2.0) ** 2


def rank_average(x: np.ndarray) -> np.ndarray:
    """Ranks 1..n with ties given their average rank."""
    x = np.asarray(x, dtype=float)
    order = np.argsort(x, kind="mergesort")
    ranks = np.empty(x.size)
    ranks[order] = np.arange(1, x.size + 1)
    uniq, inverse = np.unique(x, return_inverse=True)
    sums = np.bincount(inverse, weights=ranks)
    counts = np.bincount(inverse)
    return (sums / counts)[inverse]


def spearman(x: np.ndarray, y: np.ndarray) -> float | None:
    """Spearman's rho over pairs where both are present."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    keep = ~(np.isnan(x) | np.isnan(y))
    x, y = x[keep], y[keep]
    if x.size < 3:
        return None
    rx, ry = rank_average(x), rank_average(y)
    rx, ry = rx - rx.mean(), ry - ry.mean()
    den = float(np.sqrt((rx**2).sum() * (ry**2).sum()))
    return None if den == 0 else float((rx * ry).sum() / den)


F_METHOD = "F distribution (McGraw & Wong 1996; as pingouin / R psych)"
ICC2_METHOD = ("generalized confidence interval (generalized pivots, 4,000 seeded draws) joined with the F "
              "interval (McGraw & Wong 1996); bench/bench_icc_coverage.py")
ICC_METHOD = f"ICC(2,·): {ICC2_METHOD}; ICC(1,·), ICC(3,·): {F_METHOD}"
BOOTSTRAP_METHOD = "percentile bootstrap over targets"
MIN_BOOTSTRAP_TARGETS = 5  # fewer distinct resamples than this gives no usable percentile interval


@dataclass(frozen=True)
class Estimate:
    """A statistic with its 95% CI (None where undefined), the method that gave it, or why there is none."""

    value: float | None
    low: float | None = None
    high: float | None = None
    n: int = 0  # targets / units the statistic was computed on
    method: str = ""  # how the interval was computed ("" when there is none)
    reason: str | None = None  # why there is no interval, when the value exists but the interval does not

    def to_json(self) -> dict[str, float | int | str | None]:
        return {"value": self.value, "low": self.low, "high": self.high, "n": self.n, "method": self.method,
                "reason": self.reason}

    @classmethod
    def from_json(cls, d: dict) -> Estimate:
        return cls(d["value"], d.get("low"), d.get("high"), d.get("n", 0), d.get("method") or "", d.get("reason"))

    def __str__(self) -> str:
        if self.value is None:
            return "n/a"
        if self.low is not None and self.high is not None:
            return f"{self.value:.3f} [{self.low:.3f}, {self.high:.3f}]"
        return f"{self.value:.3f} (no CI: {self.reason})" if self.reason else f"{self.value:.3f}"


def _no_interval(value: float | None, n: int, reason: str) -> Estimate:
    return Estimate(value, n=n, reason=None if value is None else reason)


def icc_estimate(matrix: np.ndarray, form: str, level: float = 0.95) -> Estimate:
    """ICC ``form`` of a targets x raters matrix with its F-distribution interval (or the reason for none)."""
    result = icc(matrix)
    if result is None:
        return Estimate(None, n=int(complete_rows(matrix).shape[0]) if np.asarray(matrix).ndim == 2 else 0)
    value = result.get(form)
    if value is None:
        return Estimate(None, n=result.n)
    low, high, reason = icc_interval(result, form, level)
    if reason is not None:
        return Estimate(float(value), n=result.n, reason=reason)
    return Estimate(float(value), low, high, n=result.n, method=ICC2_METHOD if form[0] == "2" else F_METHOD)


def icc_interval(r: ICC, form: str, level: float = 0.95) -> tuple[float | None, float | None, str | None]:
    """(low, high, None) or (None, None, reason). ICC(1,·), ICC(3,·): the exact F intervals (McGraw & Wong 1996
    Table 7, cases 1 and 3C; as pingouin and R psych). ICC(2,·): the hull of the generalized confidence
    interval (``icc2_gci``) and the F interval with the Satterthwaite df (case 2A, pingouin's); the F interval alone
    under-covers the true ICC(2,1) with many targets and few judges (docs/jury.md,
    bench/bench_icc_coverage.py)."""
    low, high, reason = _f_interval(r, form, level)
    if form[0] != "2" or reason == "the ICC is undefined" or r.n < 3:
        return low, high, reason
    bounds = icc2_gci(r, level)
    if bounds is None:
        return low, high, reason
    m_low, m_high = bounds
    if form.endswith(",k"):  # Spearman-Brown step-up: monotone, so the bounds step up too
        k = r.k
        m_low, m_high = (m_low * k / (1 + m_low * (k - 1)) if m_low > -1 / (k - 1) else -1.0,
                         m_high * k / (1 + m_high * (k - 1)))
    if reason is None:
        m_low, m_high = min(m_low, low), max(m_high, high)  # type: ignore[type-var]
    value = float(r.get(form) or 0.0)
    # the pivots' variance components are >= 0, so their ICC is too: a negative estimate stays inside the hull
    m_low, m_high = max(min(m_low, value), -1.0), min(max(m_high, value), 1.0)
    if not m_low - 1e-9 <= value <= m_high + 1e-9:
        return low, high, reason
    return m_low, m_high, None


GCI_DRAWS = 4000  # Monte Carlo draws of the generalized pivot: quantiles within ~0.005 of their limit


def icc2_gci(r: ICC, level: float = 0.95, draws: int = GCI_DRAWS) -> tuple[float, float] | None:
    """Generalized confidence interval of ICC(2,1) (Weerahandi's generalized pivotal quantities; for this ICC
    Ionan et al. 2014, BMC Med Res Methodol 14:121): each expected mean square is its sum of squares over a
    chi-square draw with its own degrees of freedom, the variance components follow, and the interval is the
    percentiles of the ICC they give. The judges' mean square keeps its k-1 degrees of freedom, so a few judges'
    spread is not averaged away as the targets grow (what the Satterthwaite F interval does). Seeded: the same
    ratings give the same interval."""
    n, k = r.n, r.k
    if n < 3 or r.ems <= 0 or r.bms <= 0:
        return None
    rng = np.random.default_rng(0)
    e = r.ems * (n - 1) * (k - 1) / rng.chisquare((n - 1) * (k - 1), draws)
    targets = np.maximum((r.bms * (n - 1) / rng.chisquare(n - 1, draws) - e) / k, 0.0)
    judges = np.maximum((max(r.jms, 0.0) * (k - 1) / rng.chisquare(k - 1, draws) - e) / n, 0.0)
    rho = targets / (targets + judges + e)
    tail = (1.0 - level) / 2.0
    low, high = np.quantile(rho, [tail, 1.0 - tail])
    return float(low), float(high)


def _f_interval(r: ICC, form: str, level: float = 0.95) -> tuple[float | None, float | None, str | None]:
    """The F intervals: formulas as pingouin 0.5-0.7 ``intraclass_corr`` and R psych ``ICC``: McGraw & Wong
    (1996) Table 7 (cases 1, 2A, 3C) with the Satterthwaite df for ICC(2,1)."""
    from scipy.stats import f as f_dist  # a well-kept F quantile; the incomplete-beta inverse is not ours to write

    n, k = r.n, r.k
    value = r.get(form)
    if value is None:
        return None, None, "the ICC is undefined"
    if n < 3:
        return None, None, f"{n} targets: too few for an interval"
    q = 1.0 - (1.0 - level) / 2.0
    df1 = n - 1
    kind, single = form[0], form.endswith(",1")
    if kind == "1":
        if r.wms <= 0:
            return None, None, "no variance within targets (every rater agrees exactly)"
        f_obs, df2 = r.bms / r.wms, n * (k - 1)
    else:
        if r.ems <= 0:
            return None, None, "no residual variance (raters agree exactly, up to a constant)"
        f_obs, df2 = r.bms / r.ems, (n - 1) * (k - 1)
    with np.errstate(all="ignore"):
        if kind in "13":
            f_low = f_obs / f_dist.ppf(q, df1, df2)
            f_high = f_obs * f_dist.ppf(q, df2, df1)
            if single:
                low, high = (f_low - 1) / (f_low + k - 1), (f_high - 1) / (f_high + k - 1)
            else:
                low, high = 1 - 1 / f_low, 1 - 1 / f_high
        else:
            icc2, fj = float(r.icc2_1 or 0.0), r.jms / r.ems
            a = n * (1 + (k - 1) * icc2) - k * icc2
            v = (n - 1) * (k - 1) * (k * icc2 * fj + a) ** 2 / ((n - 1) * k**2 * icc2**2 * fj**2 + a**2)
            if not np.isfinite(v) or v <= 0:
                return None, None, "the Satterthwaite degrees of freedom are undefined for these ratings"
            f_up, f_lo = f_dist.ppf(q, n - 1, v), f_dist.ppf(q, v, n - 1)
            c = k * r.jms + (k * n - k - n) * r.ems
            low = n * (r.bms - f_up * r.ems) / (f_up * c + n * r.bms)
            high = n * (f_lo * r.bms - r.ems) / (c + n * f_lo * r.bms)
            if not single:
                low, high = low * k / (1 + low * (k - 1)), high * k / (1 + high * (k - 1))
    low, high = float(low), float(high)
    if not (np.isfinite(low) and np.isfinite(high)) or low < -1.0 or high > 1.0 + 1e-12:
        return None, None, f"{n} targets x {k} raters: the F bounds leave [-1, 1] (too few targets)"
    if not low - 1e-9 <= float(value) <= high + 1e-9:
        return None, None, "the F interval does not contain the estimate"
    return low, min(high, 1.0), None


def bootstrap(statistic: Callable[[np.ndarray], float | None], rows: np.ndarray, *,
              n_boot: int = DEFAULT_BOOTSTRAP, seed: int = 0, level: float = 0.95,
              bounds: tuple[float, float] | None = None) -> Estimate:
    """``statistic`` on ``rows`` plus a percentile CI from resampling rows (targets) with replacement.

    ``bounds``: the statistic's range (agreement coefficients: [-1, 1]); an interval leaving it comes from
    resamples where the statistic is nearly undefined (a near-zero denominator) and is not reported."""
    rows = np.asarray(rows, dtype=float)
    n = int(rows.shape[0])
    value = statistic(rows) if n else None
    if value is None or n_boot <= 0:
        return Estimate(value, n=n)
    if n < MIN_BOOTSTRAP_TARGETS:
        return _no_interval(float(value), n, f"{n} targets: too few for a bootstrap interval")
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, n, size=(n_boot, n))
    samples = [statistic(rows[idx]) for idx in draws]
    kept = np.array([s for s in samples if s is not None and np.isfinite(s)])
    if kept.size < n_boot / 2:  # the statistic is mostly undefined on resamples: no honest interval
        return _no_interval(float(value), n, "undefined on most bootstrap resamples")
    tail = (1.0 - level) / 2.0
    low, high = (float(x) for x in np.quantile(kept, [tail, 1.0 - tail]))
    if bounds is not None and (low < bounds[0] - 1e-9 or high > bounds[1] + 1e-9):
        return _no_interval(float(value), n, f"{n} targets: bootstrap resamples leave [{bounds[0]:g}, {bounds[1]:g}]")
    return Estimate(float(value), low, high, n=n, method=BOOTSTRAP_METHOD)


def alpha_level(min_score: float, max_score: float) -> str:
    """The Krippendorff level that fits an integer rubric scale: two points are categories (nominal), up to
    eleven points are ordered categories (ordinal, Likert), wider scales are treated as interval."""
    points = int(round(max_score - min_score)) + 1
    return "nominal" if points <= 2 else "ordinal" if points <= 11 else "interval"


def mean_or_none(rows: np.ndarray) -> float | None:
    return float(np.mean(rows)) if rows.size else None
