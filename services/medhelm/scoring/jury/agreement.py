"""Agreement statistics between raters (judges, clinicians), pure numpy.

* ICC — Shrout & Fleiss (1979), from the two-way ANOVA mean squares of an n targets x k raters
  matrix (complete rows only): ICC(1,1), ICC(2,1), ICC(3,1) and their k-rater means.
* Krippendorff's alpha — coincidence-matrix form (Krippendorff 2011), any number of raters, missing
  values allowed; nominal, ordinal, interval or ratio distance.
* Spearman's rho with average ranks for ties.
* Percentile bootstrap confidence intervals that resample targets (units).

Every function returns None (never 0) where the statistic is undefined (too few targets, no variance).
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


@dataclass(frozen=True)
class Estimate:
    """A statistic with its percentile bootstrap 95% CI (None where undefined)."""

    value: float | None
    low: float | None = None
    high: float | None = None
    n: int = 0  # targets / units the statistic was computed on

    def to_json(self) -> dict[str, float | int | None]:
        return {"value": self.value, "low": self.low, "high": self.high, "n": self.n}

    def __str__(self) -> str:
        if self.value is None:
            return "n/a"
        ci = f" [{self.low:.3f}, {self.high:.3f}]" if self.low is not None and self.high is not None else ""
        return f"{self.value:.3f}{ci}"


def bootstrap(statistic: Callable[[np.ndarray], float | None], rows: np.ndarray, *,
              n_boot: int = DEFAULT_BOOTSTRAP, seed: int = 0, level: float = 0.95) -> Estimate:
    """``statistic`` on ``rows`` plus a percentile CI from resampling rows (targets) with replacement."""
    rows = np.asarray(rows, dtype=float)
    value = statistic(rows) if rows.shape[0] else None
    if value is None or n_boot <= 0 or rows.shape[0] < 2:
        return Estimate(value, n=int(rows.shape[0]))
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, rows.shape[0], size=(n_boot, rows.shape[0]))
    samples = [statistic(rows[idx]) for idx in draws]
    kept = np.array([s for s in samples if s is not None and np.isfinite(s)])
    if kept.size < n_boot / 2:  # the statistic is mostly undefined on resamples: no honest interval
        return Estimate(value, n=int(rows.shape[0]))
    tail = (1.0 - level) / 2.0
    low, high = np.quantile(kept, [tail, 1.0 - tail])
    return Estimate(float(value), float(low), float(high), n=int(rows.shape[0]))


def mean_or_none(rows: np.ndarray) -> float | None:
    return float(np.mean(rows)) if rows.size else None
