"""The leaderboard's cells, computed once per release at summarize time.

A cell is one benchmark's main metric for one (model, deployment): the mean over strata (run-name
groups such as ``med_dialog,subset=icliniq``) of the mean over instances. Values come from each run's
stored value vector (``runs.value_blob``), one benchmark at a time; the paired bootstrap replicates are
stored with the cell so filtered win rates and their intervals never need the instances again.
"""

from __future__ import annotations

import json
from collections import defaultdict

import numpy as np

from medhelm.store.backends import Store
from medhelm.store.bootstrap import cell_estimates, stream_seed
from medhelm.store.intervals import mean as interval_of_mean


def write_cells(store: Store, release: str, replicates: int, seed: int) -> None:
    """One row per benchmark x (model, deployment): value, 95% interval and the bootstrap replicates."""
    rows = [(m, d) for m, d in store.query("SELECT DISTINCT model, deployment FROM runs WHERE release = ? "
                                           "ORDER BY model, deployment", (release,))]
    index = {row: i for i, row in enumerate(rows)}
    for (benchmark,) in store.query("SELECT benchmark FROM benchmarks WHERE release = ? ORDER BY benchmark",
                                    (release,)):
        strata: dict[str, dict[str, int]] = defaultdict(dict)  # stratum -> instance id -> column
        values: dict[str, list[tuple[int, np.ndarray, np.ndarray]]] = defaultdict(list)
        unscored = np.zeros(len(rows), int)
        for stratum, model, dep, value_ids, blob in store.query(
                "SELECT stratum, model, deployment, value_ids, value_blob FROM runs WHERE release = ? AND "
                "benchmark = ?", (release, benchmark)):
            row, ids = index[(model, dep)], strata[stratum]
            run_values = np.frombuffer(blob, dtype=np.float64) if blob else np.empty(0)
            cols = np.array([ids.setdefault(iid, len(ids)) for iid in json.loads(value_ids or "[]")], dtype=int)
            unscored[row] += int(np.isnan(run_values).sum())
            values[stratum].append((row, cols, run_values))
        names = sorted(strata)
        matrices = []
        for s in names:
            mat = np.full((len(rows), len(strata[s])), np.nan)
            for i, cols, v in values[s]:
                mat[i, cols] = v
            matrices.append(mat)
        if matrices:
            point, reps = cell_estimates(matrices, replicates,
                                         [stream_seed(seed, benchmark, s) for s in names])
        else:
            point, reps = np.full(len(rows), np.nan), np.full((replicates, len(rows)), np.nan)
        point, reps, from_stats = _fill_from_run_stats(store, release, benchmark, index, point, reps)
        low, high = np.full(len(rows), np.nan), np.full(len(rows), np.nan)
        for i in range(len(rows)):  # Clopper-Pearson for 0/1 values, else BCa (store/intervals.py)
            if not from_stats[i] and not np.isnan(point[i]):
                low[i], high[i] = interval_of_mean([m[i] for m in matrices], reps[:, i])
        counts = [(~np.isnan(m)).sum(axis=1) for m in matrices]
        n_inst = np.sum(counts, axis=0) if counts else np.zeros(len(rows), int)
        run_info = _runs_per_row(store, release, benchmark)
        out = []
        for row, i in index.items():
            if row not in run_info:
                continue
            n_runs, suites = run_info[row]
            exact = from_stats[i]
            out.append((release, benchmark, row[0], row[1], suites, _f(point[i]), None if exact else _f(low[i]),
                        None if exact else _f(high[i]), int(n_inst[i]), int(unscored[i]), n_runs,
                        None if exact or np.isnan(point[i]) else reps[:, i].astype(np.float64).tobytes()))
        store.insert_many("cells", ("release", "benchmark", "model", "deployment", "suites", "value", "ci_low",
                                    "ci_high", "n_instances", "n_unscored", "n_runs", "boot"), out)


def _fill_from_run_stats(store: Store, release: str, benchmark: str, index: dict, point: np.ndarray,
                         reps: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Runs imported without per-instance values still get their cell (the run mean), without an interval."""
    from_stats = np.zeros(len(point), bool)
    missing = [(r, i) for r, i in index.items() if np.isnan(point[i])]
    if not missing:
        return point, reps, from_stats
    means: dict[tuple[str, str], list[float]] = defaultdict(list)
    for model, dep, total, count in store.query(
            "SELECT r.model, r.deployment, s.sum, s.count FROM runs r JOIN benchmarks b ON b.release = r.release "
            "AND b.benchmark = r.benchmark JOIN run_stats s ON s.release = r.release AND s.suite = r.suite "
            "AND s.run_name = r.run_name AND s.stat = b.main_metric WHERE r.release = ? AND r.benchmark = ?",
            (release, benchmark)):
        if count:
            means[(model, dep)].append(total / count)
    for row, i in missing:
        if means.get(row):
            point[i] = float(np.mean(means[row]))
            reps[:, i] = point[i]
            from_stats[i] = True
    return point, reps, from_stats


def _runs_per_row(store: Store, release: str, benchmark: str) -> dict[tuple[str, str], tuple[int, str]]:
    acc: dict[tuple[str, str], tuple[int, set[str]]] = {}
    for model, dep, suite in store.query("SELECT model, deployment, suite FROM runs WHERE release = ? AND "
                                         "benchmark = ?", (release, benchmark)):
        n, suites = acc.get((model, dep), (0, set()))
        acc[(model, dep)] = (n + 1, suites | {suite})
    return {k: (n, ",".join(sorted(s))) for k, (n, s) in acc.items()}


def _f(x: float) -> float | None:
    return None if np.isnan(x) else float(x)
