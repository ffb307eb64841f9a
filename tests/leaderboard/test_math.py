"""Win rates, ranks, macro averages and the bootstrap on small tables worked out by hand."""

from __future__ import annotations

import numpy as np
import pytest

from medhelm.store.bootstrap import cell_estimates, stratum_replicates, stream_seed
from medhelm.store.intervals import percentile as interval
from medhelm.store.leaderboard import head_to_head, macro_average, ranks, win_rates
from medhelm.store.tables import CellTable, Column, leaderboard

nan = np.nan


def test_win_rate_with_ties_and_missing_values_by_hand() -> None:
    #            b1   b2   b3
    table = [[0.9, 0.5, nan],   # A
             [0.8, 0.5, 0.3],   # B
             [0.7, 0.2, 0.6]]   # C
    # b1: A beats 2 -> 1, B beats 1 -> .5, C 0.  b2: A,B tie above C -> (1 + 1/2)/2 = .75 each, C 0.
    # b3 (only B, C): B 0, C 1.   A: (1 + .75)/2; B: (.5 + .75 + 0)/3; C: (0 + 0 + 1)/3
    assert win_rates(np.array(table)) == pytest.approx([0.875, 1.25 / 3, 1 / 3])


def test_columns_with_fewer_than_two_models_are_skipped() -> None:
    table = np.array([[1.0, nan], [0.0, 0.4]])  # b2 has one value: it counts for nobody
    assert win_rates(table) == pytest.approx([1.0, 0.0])
    assert np.isnan(win_rates(np.array([[nan], [0.3]]))).all()  # no column with 2 values: no win rate


def test_all_tied_is_one_half_and_lower_is_better_flips() -> None:
    assert win_rates(np.array([[0.5], [0.5], [0.5]])) == pytest.approx([0.5, 0.5, 0.5])
    table = np.array([[1.0, 3.0],
                      [2.0, 1.0]])
    # higher is better on both: model 2 takes b1, model 1 takes b2
    assert win_rates(table, [False, False]) == pytest.approx([0.5, 0.5])
    # b2 lower is better: model 2's 1.0 now wins it too
    assert win_rates(table, [False, True]) == pytest.approx([0.0, 1.0])


def test_batched_win_rates_equal_one_by_one() -> None:
    rng = np.random.default_rng(3)
    batch = rng.random((5, 4, 6))
    batch[batch < 0.15] = nan
    assert win_rates(batch) == pytest.approx(np.stack([win_rates(t) for t in batch]), nan_ok=True)


def test_ranks_share_the_better_rank_on_ties() -> None:
    assert ranks(np.array([0.2, 0.9, 0.5, 0.9, nan])).tolist()[:4] == [4.0, 1.0, 3.0, 1.0]
    assert np.isnan(ranks(np.array([0.2, nan]))[1])


def test_macro_average_per_group_skips_missing_and_lower_is_better() -> None:
    table = np.array([[0.2, 0.4, 0.9, 5.0],
                      [nan, 0.6, 0.3, 1.0]])
    groups = ["Clinical", "Clinical", "Research", "Research"]
    out = macro_average(table, groups, [False, False, False, True])
    mean, count = out["Clinical"]
    assert mean == pytest.approx([0.3, 0.6]) and count.tolist() == [2, 1]
    mean, count = out["Research"]  # the lower-is-better column does not average with a 0-1 score
    assert mean == pytest.approx([0.9, 0.3]) and count.tolist() == [1, 1]


def test_stratum_replicates_equal_a_naive_resample_with_the_same_draws() -> None:
    values = np.array([[1.0, 0.0, 1.0, 1.0, nan],
                       [0.0, 0.0, 1.0, 0.5, 1.0]])
    reps = stratum_replicates(values, 50, np.random.default_rng(7))
    draws = np.random.default_rng(7).integers(0, 5, size=(50, 5))  # the same stream, in the same order
    for b in range(50):
        for m in range(2):
            picked = values[m, draws[b]]
            expected = np.nanmean(picked) if (~np.isnan(picked)).any() else nan
            assert reps[b, m] == pytest.approx(expected, nan_ok=True)


def test_bootstrap_is_paired_seeded_and_brackets_the_mean() -> None:
    rng = np.random.default_rng(0)
    a = (rng.random(400) < 0.7).astype(float)
    values = np.stack([a, a])  # two models with identical answers
    point, reps = cell_estimates([values], 1000, [stream_seed(0, "bench", "s")])
    assert point == pytest.approx([a.mean(), a.mean()])
    assert np.array_equal(reps[:, 0], reps[:, 1])  # same draws for every model
    low, high = interval(reps)
    se = np.sqrt(a.mean() * (1 - a.mean()) / 400)
    assert low[0] < a.mean() < high[0]
    assert high[0] - low[0] == pytest.approx(2 * 1.96 * se, rel=0.15)  # the textbook width for a proportion
    _, again = cell_estimates([values], 1000, [stream_seed(0, "bench", "s")])
    assert np.array_equal(reps, again)
    _, other = cell_estimates([values], 1000, [stream_seed(1, "bench", "s")])
    assert not np.array_equal(reps, other)


def test_cell_is_the_mean_of_stratum_means() -> None:
    s1 = np.array([[1.0, 1.0, 0.0, 0.0]])  # mean .5 over 4 instances
    s2 = np.array([[1.0, 1.0]])  # mean 1 over 2: macro over strata -> .75, not the micro 4/6
    point, reps = cell_estimates([s1, s2], 20, [np.random.default_rng(1), np.random.default_rng(2)])
    assert point == pytest.approx([0.75])
    assert ((reps >= 0.5) & (reps <= 1.0)).all()


def test_interval_is_the_percentile_interval() -> None:
    reps = np.arange(1, 1001, dtype=float)[:, None]
    low, high = interval(reps)
    assert low[0] == pytest.approx(np.percentile(reps, 2.5)) and high[0] == pytest.approx(np.percentile(reps, 97.5))


def test_head_to_head_by_hand() -> None:
    #            b1   b2   b3 (lower is better)
    table = [[0.9, 0.2, 1.0],   # the model
             [0.5, 0.2, nan],   # baseline X: shares b1, b2 -> (1 + 1/2) / 2
             [nan, 0.9, 3.0],   # baseline Y: shares b2, b3 -> (0 + 1) / 2 (b3: 1.0 < 3.0 wins)
             [nan, nan, nan]]   # baseline Z: nothing shared
    got = head_to_head(np.array(table), 0, [1, 2, 3], [False, False, True])
    assert got[:2] == pytest.approx([0.75, 0.5]) and np.isnan(got[2])
    assert head_to_head(np.array(table), 0, [], [False, False, True]).shape == (0,)
    # a batch axis (bootstrap replicates): each replicate as on its own
    batch = np.array([table, [[0.1, 0.2, 5.0], *table[1:]]])
    assert head_to_head(batch, 0, [1, 2], [False, False, True]) == pytest.approx(np.array([[0.75, 0.5], [0.25, 0.0]]))


def _board(values: list[list[float]], rows: list[str], reps: np.ndarray | None = None, **kw) -> dict:
    cols = tuple(Column(f"b{j}", f"b{j}", "", "", "public", False) for j in range(len(values[0])))
    table = CellTable(tuple((r, r) for r in rows), cols, np.array(values, float),
                      np.empty((0, len(rows), len(cols))) if reps is None else reps)
    return {r.model: r for r in leaderboard(table, **kw)}


def test_one_model_stands_against_the_baselines() -> None:
    """One model: no win rate (nothing to win against), but how many baselines it beats head to head, the
    same fact as each baseline's own win rate against it (below 0.5: beaten), ranked or not."""
    rows = ["org/model", "baseline/random", "baseline/majority", "baseline/empty"]
    values = [[0.8, 0.3],
              [0.25, nan],   # beaten on b0
              [0.8, nan],    # tied on b0: not beaten
              [nan, 0.0]]    # beaten on b1
    board = _board(values, rows)
    model = board["org/model"]
    assert model.win_rate is None and model.rank is None
    assert (model.baselines_beaten, model.baselines_compared) == (2, 3)
    assert model.vs_baselines() == "beats 2 of 3"  # no replicates: no interval
    assert {b: board[b].win_rate for b in rows[1:]} == {"baseline/random": 0.0, "baseline/majority": 0.5,
                                                        "baseline/empty": 0.0}
    assert all(board[b].vs_baselines() == "" and board[b].baselines_beaten is None for b in rows[1:])
    ranked = _board(values, rows, rank_baselines=True)["org/model"]
    assert ranked.rank == 1 and ranked.vs_baselines() == "beats 2 of 3"
    # the interval is the bootstrap's: replicates where the model also beats majority, or beats none
    reps = np.array([values, [[0.9, 0.3], *values[1:]], [[0.1, nan], *values[1:]]] * 10, float)
    model = _board(values, rows, reps)["org/model"]
    assert (model.baselines_beaten_low, model.baselines_beaten_high) == (0.0, 3.0)
    assert model.vs_baselines() == "beats 2 of 3 (0-3)"
    # a model that shares no benchmark with a baseline, and a board without baselines: nothing to say
    assert _board([[0.5, nan], [nan, 0.1]], ["org/a", "baseline/empty"])["org/a"].vs_baselines() == ""
    assert _board([[0.5], [0.4]], ["org/a", "org/b"])["org/a"].baselines_compared == 0
