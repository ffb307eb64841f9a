"""The leaderboard's tables, computed from the per-benchmark cells (and their bootstrap replicates).

``summarize`` stores the unfiltered results; the dashboard calls the same functions on a filtered
``CellTable`` (a category, an access level, some suites), which takes milliseconds: the expensive part,
resampling instances, was done once at summarize time and stored with each cell.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from medhelm.store.leaderboard import interval, macro_average, nanmean, ranks, win_rates

Row = tuple[str, str]  # (model, deployment)


@dataclass(frozen=True)
class Column:
    benchmark: str
    display_name: str
    category: str
    subcategory: str
    access: str
    lower_is_better: bool


@dataclass(frozen=True, eq=False)
class CellTable:
    rows: tuple[Row, ...]
    columns: tuple[Column, ...]
    values: np.ndarray  # [rows, columns], NaN = no value
    replicates: np.ndarray  # [B, rows, columns]

    def select(self, *, columns: Sequence[bool] | None = None, rows: Sequence[bool] | None = None) -> CellTable:
        c = np.ones(len(self.columns), bool) if columns is None else np.asarray(columns, bool)
        r = np.ones(len(self.rows), bool) if rows is None else np.asarray(rows, bool)
        return CellTable(tuple(x for x, keep in zip(self.rows, r) if keep),
                         tuple(x for x, keep in zip(self.columns, c) if keep),
                         self.values[np.ix_(r, c)], self.replicates[:, r][:, :, c])

    @property
    def lower_is_better(self) -> list[bool]:
        return [c.lower_is_better for c in self.columns]


@dataclass(frozen=True)
class LeaderboardRow:
    model: str
    deployment: str
    win_rate: float | None
    win_rate_low: float | None
    win_rate_high: float | None
    rank: int | None
    rank_low: float | None
    rank_high: float | None
    mean_score: float | None  # mean of the higher-is-better benchmark values the model has
    n_benchmarks: int


@dataclass(frozen=True)
class GroupScore:
    level: str  # "category" | "subcategory"
    group: str
    model: str
    deployment: str
    value: float | None
    ci_low: float | None
    ci_high: float | None
    n_benchmarks: int


def leaderboard(table: CellTable) -> list[LeaderboardRow]:
    """Rows sorted by mean win rate (best first), with 95% bootstrap intervals for win rate and rank."""
    lower = table.lower_is_better
    wr = win_rates(table.values, lower)
    rk = ranks(wr)
    reps = table.replicates
    wr_reps = win_rates(reps, lower) if reps.shape[0] else np.empty((0, len(table.rows)))
    wr_low, wr_high = interval(wr_reps)
    rk_low, rk_high = interval(ranks(wr_reps)) if reps.shape[0] else (wr_low, wr_high)
    higher = ~np.asarray(lower, bool)
    mean = nanmean(table.values[:, higher], axis=1) if higher.any() else np.full(len(table.rows), np.nan)
    n = (~np.isnan(table.values)).sum(axis=1)
    out = [LeaderboardRow(m, d, _f(wr[i]), _f(wr_low[i]), _f(wr_high[i]), None if np.isnan(rk[i]) else int(rk[i]),
                          _f(rk_low[i]), _f(rk_high[i]), _f(mean[i]), int(n[i]))
           for i, (m, d) in enumerate(table.rows)]
    return sorted(out, key=lambda r: (r.win_rate is None, -(r.win_rate or 0.0), r.model, r.deployment))


def group_scores(table: CellTable, level: str) -> list[GroupScore]:
    """Macro average per category or subcategory, with bootstrap intervals."""
    groups = [c.category if level == "category" else c.subcategory for c in table.columns]
    point = macro_average(table.values, groups, table.lower_is_better)
    reps = macro_average(table.replicates, groups, table.lower_is_better) if table.replicates.shape[0] else {}
    out = []
    for group, (mean, count) in point.items():
        low, high = interval(reps[group][0]) if group in reps else (mean * np.nan, mean * np.nan)
        out += [GroupScore(level, group, m, d, _f(mean[i]), _f(low[i]), _f(high[i]), int(count[i]))
                for i, (m, d) in enumerate(table.rows) if count[i] > 0]  # no run in the group: no row
    return out


def cell_intervals(table: CellTable) -> tuple[np.ndarray, np.ndarray]:
    return interval(table.replicates)


def _f(x: float) -> float | None:
    return None if x is None or np.isnan(x) else float(x)
