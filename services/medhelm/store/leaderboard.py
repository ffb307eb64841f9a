"""Leaderboard math on a (models × benchmarks) table of main-metric values (NaN = no value).

Every function also accepts a leading batch axis (bootstrap replicates: ``(B, models, benchmarks)``),
so point estimates and their confidence intervals come from the same code.

* Win rate (as HELM's ``compute_aggregate_row_win_rates``): per benchmark with >= 2 values, a model
  scores (#models strictly worse + (#ties - 1) / 2) / (n - 1); its mean win rate is the mean over the
  benchmarks where it has a value.
* Rank: 1 + the number of models with a strictly higher mean win rate (ties share the better rank).
* Head to head (``head_to_head``): one row's win rate against each of some other rows alone, on the
  benchmarks the two share (1 = better on every one, 0.5 = even). A model "beats" a reference baseline when
  this is above 0.5: better on more of their shared benchmarks than worse, ties counting half. It needs no
  second model, so it says where a model alone stands against the baselines.
* Macro average per group (category, subcategory): the unweighted mean of the model's benchmark values
  in the group; benchmarks where lower is better are left out (their scale does not average).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def win_rates(table: np.ndarray, lower_is_better: Sequence[bool] | None = None) -> np.ndarray:
    """Mean win rate per model: ``table[..., models, benchmarks]`` -> ``[..., models]`` (NaN if no column)."""
    values = np.asarray(table, dtype=float)
    if lower_is_better is not None:
        flip = np.where(np.asarray(lower_is_better, dtype=bool), -1.0, 1.0)
        values = values * flip
    present = ~np.isnan(values)  # [..., m, k]
    n = present.sum(axis=-2, keepdims=True)  # models with a value, per benchmark: [..., 1, k]
    a = values[..., :, None, :]  # this model
    b = values[..., None, :, :]  # every other model
    both = present[..., :, None, :] & present[..., None, :, :]
    worse = ((b < a) & both).sum(axis=-2)  # [..., m, k]
    ties = ((b == a) & both).sum(axis=-2)  # includes the model itself
    counted = present & (n >= 2)
    with np.errstate(invalid="ignore", divide="ignore"):
        per_column = (worse + (ties - 1) / 2.0) / (n - 1)
        per_column = np.where(counted, per_column, 0.0)
        columns = counted.sum(axis=-1)
        return np.where(columns > 0, per_column.sum(axis=-1) / np.maximum(columns, 1), np.nan)


def head_to_head(table: np.ndarray, row: int, others: Sequence[int],
                 lower_is_better: Sequence[bool] | None = None) -> np.ndarray:
    """``table[..., rows, benchmarks]`` -> ``[..., len(others)]``: the win rate of ``row`` against each of
    ``others`` compared alone (NaN where the two share no benchmark)."""
    values = np.asarray(table, dtype=float)
    pairs = np.stack([np.stack([values[..., row, :], values[..., other, :]], axis=-2) for other in others], axis=-3) \
        if len(others) else np.empty((*values.shape[:-2], 0, 2, values.shape[-1]))
    return win_rates(pairs, lower_is_better)[..., 0]


def ranks(scores: np.ndarray) -> np.ndarray:
    """Competition rank (1 = best; ties share the better rank) of ``scores[..., models]``; NaN stays NaN."""
    s = np.asarray(scores, dtype=float)
    higher = (s[..., None, :] > s[..., :, None]) & ~np.isnan(s[..., None, :])
    r = 1.0 + higher.sum(axis=-1)
    return np.where(np.isnan(s), np.nan, r)


def macro_average(table: np.ndarray, groups: Sequence[str], lower_is_better: Sequence[bool] | None = None
                  ) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per group: (mean over the group's benchmarks with a value ``[..., models]``, count of those benchmarks)."""
    values = np.asarray(table, dtype=float)
    lower = np.zeros(len(groups), bool) if lower_is_better is None else np.asarray(lower_is_better, bool)
    out: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for group in sorted(set(g for g in groups if g)):
        cols = np.array([g == group for g in groups]) & ~lower
        if not cols.any():
            continue
        sub = values[..., cols]
        out[group] = (nanmean(sub, axis=-1), (~np.isnan(sub)).sum(axis=-1))
    return out


def nanmean(a: np.ndarray, axis: int) -> np.ndarray:
    """Mean over the non-NaN entries (NaN where there are none), without numpy's all-NaN warning."""
    a = np.asarray(a, dtype=float)
    count = (~np.isnan(a)).sum(axis=axis)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(count > 0, np.nansum(a, axis=axis) / np.maximum(count, 1), np.nan)
