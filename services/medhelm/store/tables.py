"""The leaderboard's tables, computed from the per-benchmark cells (and their bootstrap replicates).

``summarize`` stores the unfiltered results; the dashboard calls the same functions on a filtered
``CellTable`` (a category, an access level, some suites), which takes milliseconds: the expensive part,
resampling instances, was done once at summarize time and stored with each cell.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from medhelm.baselines import is_baseline
from medhelm.store.intervals import average, percentile
from medhelm.store.leaderboard import head_to_head, macro_average, nanmean, ranks, win_rates

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
    lows: np.ndarray | None = None  # [rows, columns]: each cell's stored interval (store/intervals.py)
    highs: np.ndarray | None = None

    def select(self, *, columns: Sequence[bool] | None = None, rows: Sequence[bool] | None = None) -> CellTable:
        c = np.ones(len(self.columns), bool) if columns is None else np.asarray(columns, bool)
        r = np.ones(len(self.rows), bool) if rows is None else np.asarray(rows, bool)
        cut = (lambda a: None if a is None else a[np.ix_(r, c)])
        return CellTable(tuple(x for x, keep in zip(self.rows, r) if keep),
                         tuple(x for x, keep in zip(self.columns, c) if keep),
                         self.values[np.ix_(r, c)], self.replicates[:, r][:, :, c], cut(self.lows), cut(self.highs))

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
    baseline: bool = False  # a reference baseline (``medhelm.baselines``): marked, unranked unless asked
    # a model's standing against the reference baselines it shares a benchmark with (none: 0 of 0): how many
    # it beats head to head (``leaderboard.head_to_head`` > 0.5) and the 95% bootstrap interval of that count
    baselines_beaten: int | None = None
    baselines_beaten_low: float | None = None
    baselines_beaten_high: float | None = None
    baselines_compared: int = 0

    def vs_baselines(self) -> str:
        """"beats k of n baselines (95% CI low-high)"; "" for a baseline or a model that shares no benchmark
        with one. The CLI's summary and the dashboard show this same text."""
        if self.baselines_beaten is None:
            return ""
        ci = "" if self.baselines_beaten_low is None else \
            f" ({self.baselines_beaten_low:.0f}-{self.baselines_beaten_high:.0f})"
        return f"beats {self.baselines_beaten} of {self.baselines_compared}{ci}"


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


def leaderboard(table: CellTable, *, rank_baselines: bool = False) -> list[LeaderboardRow]:
    """Rows sorted by mean win rate (best first), with 95% percentile bootstrap intervals for win rate and rank.

    Reference baselines are kept out of the models' win rates and ranks: the models are compared among
    themselves, and each baseline's win rate is what it would score against those models alone (where it
    would stand), with no rank. ``rank_baselines``: everyone compared and ranked together."""
    lower = table.lower_is_better
    is_base = np.array([is_baseline(m) or is_baseline(d) for m, d in table.rows], bool)
    n_rows = len(table.rows)
    wr, wr_low, wr_high, rk, rk_low, rk_high = (np.full(n_rows, np.nan) for _ in range(6))
    groups = [np.arange(n_rows)] if rank_baselines or not is_base.any() else \
        [np.flatnonzero(~is_base)] + [np.append(np.flatnonzero(~is_base), b) for b in np.flatnonzero(is_base)]
    for index in groups:
        board = _compare(table.values[index], table.replicates[:, index], lower, n_rows=len(index))
        keep = slice(None) if len(groups) == 1 or index is groups[0] else slice(-1, None)  # a baseline: its own row
        for target, values in zip((wr, wr_low, wr_high, rk, rk_low, rk_high), board):
            target[index[keep]] = values[keep]
    if not rank_baselines:
        rk[is_base] = rk_low[is_base] = rk_high[is_base] = np.nan
    higher = ~np.asarray(lower, bool)
    mean = nanmean(table.values[:, higher], axis=1) if higher.any() else np.full(n_rows, np.nan)
    n = (~np.isnan(table.values)).sum(axis=1)
    beaten = _baselines_beaten(table, is_base)
    out = [LeaderboardRow(m, d, _f(wr[i]), _f(wr_low[i]), _f(wr_high[i]), None if np.isnan(rk[i]) else int(rk[i]),
                          _f(rk_low[i]), _f(rk_high[i]), _f(mean[i]), int(n[i]), bool(is_base[i]),
                          *beaten.get(i, (None, None, None, 0)))
           for i, (m, d) in enumerate(table.rows)]
    return sorted(out, key=lambda r: (r.win_rate is None, -(r.win_rate or 0.0), r.model, r.deployment))


def _baselines_beaten(table: CellTable, is_base: np.ndarray) -> dict[int, tuple[int, float | None, float | None, int]]:
    """Per model row (not a baseline) sharing a benchmark with a baseline: (baselines it beats head to head,
    the 95% interval of that count over the bootstrap replicates, baselines compared)."""
    out = {}
    present = ~np.isnan(table.values)
    lower = table.lower_is_better
    for i in np.flatnonzero(~is_base):
        others = [int(b) for b in np.flatnonzero(is_base) if (present[i] & present[b]).any()]
        if not others:
            continue
        point = head_to_head(table.values, int(i), others, lower)
        low = high = None
        if table.replicates.shape[0]:
            reps = head_to_head(table.replicates, int(i), others, lower)
            low, high = (_f(x) for x in percentile((reps > 0.5).sum(axis=-1).astype(float)))
        out[int(i)] = (int((point > 0.5).sum()), low, high, len(others))
    return out


def _compare(values: np.ndarray, reps: np.ndarray, lower: Sequence[bool], n_rows: int) -> tuple[np.ndarray, ...]:
    """Win rate, its interval, rank and its interval of the rows of ``values`` compared among themselves."""
    wr = win_rates(values, lower)
    wr_reps = win_rates(reps, lower) if reps.shape[0] else np.empty((0, n_rows))
    wr_low, wr_high = percentile(wr_reps)
    rk_low, rk_high = percentile(ranks(wr_reps)) if reps.shape[0] else (wr_low, wr_high)
    return wr, wr_low, wr_high, ranks(wr), rk_low, rk_high


def group_scores(table: CellTable, level: str) -> list[GroupScore]:
    """Macro average per category or subcategory, its interval the MOVER sum of its benchmarks' intervals
    (``intervals.average``: independent instance sets; one benchmark: exactly its own interval). A table
    without the cells' intervals (``lows``) falls back to the percentile interval of the replicates."""
    groups = [c.category if level == "category" else c.subcategory for c in table.columns]
    point = macro_average(table.values, groups, table.lower_is_better)
    reps = macro_average(table.replicates, groups, table.lower_is_better) \
        if table.replicates.shape[0] and table.lows is None else {}
    lower = np.asarray(table.lower_is_better, bool) if table.columns else np.zeros(0, bool)
    out = []
    for group, (mean, count) in point.items():
        if table.lows is not None and table.replicates.shape[0]:
            cols = np.array([g == group for g in groups]) & ~lower
            _, low, high = average(table.values[:, cols], table.lows[:, cols], table.highs[:, cols])
        elif group in reps:
            low, high = percentile(reps[group][0])
        else:
            low, high = mean * np.nan, mean * np.nan
        out += [GroupScore(level, group, m, d, _f(mean[i]), _f(low[i]), _f(high[i]), int(count[i]))
                for i, (m, d) in enumerate(table.rows) if count[i] > 0]  # no run in the group: no row
    return out


def cell_intervals(table: CellTable) -> tuple[np.ndarray, np.ndarray]:
    """Each cell's interval: as stored (store/intervals.py), else the percentile interval of its replicates."""
    if table.lows is not None:
        return table.lows, table.highs
    return percentile(table.replicates)


def _f(x: float) -> float | None:
    return None if x is None or np.isnan(x) else float(x)
