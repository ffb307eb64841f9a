"""Performance by patient subgroup: every benchmark's main metric per subgroup (age band, sex, ...), with
95 % intervals, the largest gap between groups and a test of it that accounts for the many
pairs compared, computed at ``summarize`` time into the store.

Where the labels come from: an instance's ``subgroups`` (attribute -> label), written in its record only by a
benchmark that names subgroup columns (``subgroups: [...]`` in a configurable benchmark's YAML). ``summarize``
keeps them per run as one vector per attribute aligned with ``runs.value_ids`` (``subgroup_labels``: labels
only, never instance text, kept also for redacted runs: they are what the equity analysis needs).

The math, per benchmark x (model, deployment) x attribute, over the instances with a value (unscored
instances are in no group), pooled over the benchmark's runs (strata) of that model:

* a group's value: the mean; its interval: ``intervals.mean``'s, as a leaderboard cell's (Clopper-Pearson for
  0/1 values, else BCa from the group's bootstrap: its instances resampled ``replicates`` times, seeded by the
  group's name, as the cells are: ``bootstrap.stream_seed``);
* which groups are shown (``cells``): decided on the benchmark's *population* in the release (every instance
  of its data, by stratum and id, over all models, scored, unscored or failed alike: ``population``), never on
  scored counts, so the same data gives the same cells in every run, release, model and surface. A blank or
  absent label is the group ``not recorded`` (``label_of``). A group below ``min_cell`` (default 11) is never
  shown alone: the small groups are pooled, with the next smallest until the pool reaches ``min_cell``, and
  the pool is shown as one group named by its members (``F + not recorded``). Every shown cell then holds at
  least ``min_cell`` patients and the cells cover the population, so the benchmark's total minus the shown
  cells leaves nothing to recover; a population below ``min_cell`` as a whole shows nothing. Only how many
  groups are not shown alone is kept (``n_suppressed``);
* the gap: the highest minus the lowest group mean among the shown groups, its interval (the MOVER of the two
  independent groups' intervals: ``intervals.independent_difference``), the ratio lowest / highest (when the
  highest is positive), and
  ``p_holm``: a two-sided permutation test of the difference in means for every pair of shown groups
  (``replicates`` permutations each), Holm-adjusted over the attribute's pairs, reported for the largest gap.

``SUPPRESSION`` says the rule in words; the report, the dashboard and ``medhelm compare`` print it.

Change by subgroup between two releases (paired, per group): ``store/subgroup_changes.py``.

Failure semantics: a benchmark without labels gets no rows; an attribute with fewer than two shown groups
gets a gap row without a gap (and says how many were suppressed); with 0 replicates there are no intervals
and no p-value (None), never a made-up one. The tables are made with the store (schema v2, ``schema.SUBGROUP_DDL``);
an older store gets them from its migration, inside summarize's transaction, so a failed summarize leaves
it as it was.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from medhelm.store.backends import Store
from medhelm.store.bootstrap import stratum_replicates, stream_seed
from medhelm.store.intervals import independent_difference
from medhelm.store.intervals import mean as interval_of_mean
from medhelm.store.paired import holm
from medhelm.specs import BLANK_SUBGROUP
from medhelm.store.schema import SUBGROUP_DDL, SUBGROUP_GAPS, SUBGROUP_LABELS, SUBGROUP_SCORES

MIN_CELL = 11  # the smallest group shown (a common small-cell rule for health statistics: 1-10 are hidden)
NOT_RECORDED = "not recorded"  # the group of instances whose label is blank or absent
SUPPRESSION = ("Which groups are shown is decided on the benchmark's data (every patient of it, whether scored or "
               "not), the same in every release, report, export and page: a group of fewer than {min_cell} patients is "
               "never shown alone but pooled with the next smallest group(s) until the pool has {min_cell} (shown as "
               "'A + B'); a blank or missing value is the group 'not recorded'.")
_BLOCK_ELEMENTS = 2_000_000  # permutations x instances held at once (~16 MB)

LABELS, SCORES, GAPS = SUBGROUP_LABELS, SUBGROUP_SCORES, SUBGROUP_GAPS
DDL = SUBGROUP_DDL  # made with every other relation at creation or migration (schema v2); here for older stores


@dataclass(frozen=True)
class GroupResult:
    group: str
    n: int
    value: float
    ci_low: float | None
    ci_high: float | None


@dataclass(frozen=True)
class Gap:
    n_groups: int  # shown
    n_suppressed: int
    high_group: str | None
    low_group: str | None
    gap: float | None
    gap_low: float | None
    gap_high: float | None
    ratio: float | None
    p_holm: float | None
    n_pairs: int


# ---- which groups are shown: decided on the benchmark's population, never on scored counts ---------------

def label_of(raw: object) -> str:
    """The group an instance's label names: an empty cell (``specs.BLANK_SUBGROUP``) or no label at all is the
    group ``not recorded``, shown or pooled like any other."""
    text = "" if raw is None else str(raw).strip()
    return NOT_RECORDED if text in ("", BLANK_SUBGROUP) else text


def cells(population: Mapping[str, int], min_cell: int = MIN_CELL) -> tuple[dict[str, str], int]:
    """(label -> the cell it is shown in, how many labels are not shown on their own) from the benchmark's
    population per label (every instance of its data, scored or not: the same in every run and release of it).

    A label of at least ``min_cell`` instances is its own cell. The labels below it are pooled together, and
    with the next smallest labels until the pool reaches ``min_cell``; the pool is one cell named by its
    members, largest first (``F + not recorded``). So every cell shown holds at least ``min_cell`` patients and
    the shown cells cover the whole population: nothing is left over for total-minus-shown arithmetic to
    recover. Only when the whole population is below ``min_cell`` is nothing shown (an empty mapping)."""
    ordered = sorted(population, key=lambda g: (population[g], g))
    pool = [g for g in ordered if population[g] < min_cell]
    rest = [g for g in ordered if population[g] >= min_cell]
    out = {g: g for g in rest}
    if not pool:
        return out, 0
    while sum(population[g] for g in pool) < min_cell and rest:
        pool.append(rest.pop(0))
    if sum(population[g] for g in pool) < min_cell:
        return {}, len(population)
    name = " + ".join(sorted(pool, key=lambda g: (-population[g], g)))
    return {g: g for g in rest} | {g: name for g in pool}, len(pool)


def merged_cells(*maps: tuple[Mapping[str, str], int]) -> tuple[dict[str, str], int]:
    """The cells of several releases of a benchmark made common (a comparison of two releases): labels that
    share a cell in any of them share one here, and when any of them shows nothing, nothing is shown."""
    labels = set().union(*(m for m, _ in maps))
    hidden = set().union(*(labels for m, n in maps if n and not m))  # a release that shows none of them
    parent = {g: g for g in labels}

    def root(g: str) -> str:
        while parent[g] != g:
            g = parent[g]
        return g

    for m, _ in maps:
        members: dict[str, list[str]] = defaultdict(list)
        for g, cell in m.items():
            members[cell].append(g)
        for group in members.values():
            for g in group[1:]:
                parent[root(g)] = root(group[0])
    joined: dict[str, list[str]] = defaultdict(list)
    for g in labels:
        joined[root(g)].append(g)
    out = {}
    for group in joined.values():
        if any(g in hidden for g in group):
            continue
        named = [cell for m, _ in maps for cell in m.values() if set(g for g in m if m[g] == cell) == set(group)]
        name = named[0] if named else " + ".join(sorted(group))
        out |= {g: name for g in group}
    shown_alone = {g for g, cell in out.items() if cell == g}
    return out, len(labels) - len(shown_alone)


# ---- the math (no store) -------------------------------------------------------------------------------

def permutation_p(x: np.ndarray, y: np.ndarray, permutations: int, rng: np.random.Generator) -> float | None:
    """Two-sided permutation p-value of mean(x) - mean(y): (1 + #|permuted| >= |observed|) / (1 + permutations)."""
    if permutations <= 0 or not len(x) or not len(y):
        return None
    pooled = np.concatenate([x, y])
    n, nx = len(pooled), len(x)
    observed = abs(x.mean() - y.mean())
    tolerance = 1e-12 * max(1.0, observed)  # a permutation equal to the observed split counts (float sums)
    extreme = 0
    block = max(1, _BLOCK_ELEMENTS // n)
    for start in range(0, permutations, block):
        b = min(block, permutations - start)
        shuffled = rng.permuted(np.broadcast_to(pooled, (b, n)), axis=1)
        diff = shuffled[:, :nx].mean(axis=1) - shuffled[:, nx:].mean(axis=1)
        extreme += int((np.abs(diff) >= observed - tolerance).sum())
    return (1 + extreme) / (1 + permutations)


def analyse(values: np.ndarray, labels: Sequence[object], *, replicates: int, seed: int, keys: Sequence[str],
            min_cell: int = MIN_CELL, population: Mapping[str, int] | None = None) -> tuple[list[GroupResult], Gap]:
    """One (benchmark, model, attribute): ``values`` per instance (NaN = unscored), ``labels`` aligned (None or
    blank = not recorded). ``population``: the benchmark's instances per label, which decide the cells shown
    (``cells``); by default this vector's own labels, scored or not. ``keys`` name the analysis for the seeds
    (the same inputs always give the same intervals)."""
    values = np.asarray(values, dtype=float)
    labels = [label_of(g) for g in labels]
    if population is None:
        population = Counter(labels)
    shown, hidden = cells(population, min_cell)
    by_group: dict[str, list[float]] = defaultdict(list)
    for v, g in zip(values, labels):
        if g in shown and not np.isnan(v):
            by_group[shown[g]].append(v)
    names = sorted(by_group)
    results = []
    for g in names:
        x = np.asarray(by_group[g])
        r = stratum_replicates(x[None, :], replicates, stream_seed(seed, *keys, "group", g))[:, 0]
        low, high = interval_of_mean([x], r)
        results.append(GroupResult(g, len(x), float(x.mean()), _f(low), _f(high)))
    if len(results) < 2:
        return results, Gap(len(results), hidden, None, None, None, None, None, None, None, 0)
    best = max(results, key=lambda r: (r.value, r.group))
    worst = min(results, key=lambda r: (r.value, r.group))
    low, high = independent_difference(*((g.value, _nan(g.ci_low), _nan(g.ci_high))
                                                    for g in (best, worst)))
    pairs = [(a, b) for i, a in enumerate(names) for b in names[i + 1:]]
    raw = [permutation_p(np.asarray(by_group[a]), np.asarray(by_group[b]), replicates,
                         stream_seed(seed, *keys, "pair", a, b)) for a, b in pairs]
    p_holm = None
    if all(p is not None for p in raw):
        adjusted = holm(raw)  # type: ignore[arg-type]
        p_holm = float(adjusted[pairs.index(tuple(sorted((best.group, worst.group))))])
    ratio = worst.value / best.value if best.value > 0 else None
    return results, Gap(len(results), hidden, best.group, worst.group, best.value - worst.value, _f(low),
                        _f(high), ratio, p_holm, len(pairs))


# ---- the store ------------------------------------------------------------------------------------------

def has_tables(store: Store) -> bool:
    return store._has_relation(GAPS)


def delete_release(store: Store, release: str) -> None:
    """Inside summarize's transaction, before the release's runs are deleted (their run ids name the labels)."""
    if has_tables(store):
        store.execute(f"DELETE FROM {LABELS} WHERE run_id IN (SELECT run_id FROM runs WHERE release = ?)", (release,))
        for table in (SCORES, GAPS):
            store.execute(f"DELETE FROM {table} WHERE release = ?", (release,))


def write_labels(store: Store, run_id: int, labels: Mapping[str, Sequence[str | None]]) -> None:
    """One run's labels per attribute, aligned with its ``value_ids`` (inside summarize's transaction)."""
    if not labels:
        return
    if not getattr(store, "_subgroups_ready", False):
        if not has_tables(store):  # an older SQLite store read as it is (a v2 store has them: no DDL here)
            for stmt in DDL:
                store.execute(stmt)
        store._subgroups_ready = True  # type: ignore[attr-defined]
    _insert(store, LABELS, ("run_id", "attribute", "labels"),
            [(run_id, attr, json.dumps(list(v), ensure_ascii=False)) for attr, v in sorted(labels.items())])


def population(store: Store, release: str) -> dict[tuple[str, str], dict[str, int]]:
    """(benchmark, attribute) -> label -> how many of the benchmark's instances carry it: every instance of
    every run of the release (over models and strata, by (stratum, instance id); scored, unscored or failed
    alike), so a failed request or a model that scored fewer never changes which cells are shown."""
    seen: dict[tuple[str, str], dict[tuple[str, str], str]] = defaultdict(dict)
    if not has_tables(store):
        return {}
    for bench, stratum, ids, attr, text in store.query(
            f"SELECT r.benchmark, r.stratum, r.value_ids, l.attribute, l.labels FROM runs r JOIN {LABELS} l ON "
            "l.run_id = r.run_id WHERE r.release = ? ORDER BY r.run_id, l.attribute", (release,)):
        per = seen[(bench, attr)]
        for iid, label in zip(json.loads(ids or "[]"), json.loads(text)):
            per.setdefault((stratum, str(iid)), label_of(label))
    return {key: dict(Counter(per.values())) for key, per in seen.items()}


def release_cells(store: Store, release: str, min_cell: int) -> dict[tuple[str, str], tuple[dict[str, str], int]]:
    """(benchmark, attribute) -> ``cells`` of the release's population: what every surface shows of it."""
    return {key: cells(counts, min_cell) for key, counts in population(store, release).items()}


def write_subgroups(store: Store, release: str, replicates: int, seed: int, min_cell: int = MIN_CELL) -> int:
    """Every benchmark's subgroup scores and gaps for ``release``; returns how many gap rows were written."""
    if not has_tables(store):
        return 0
    benches = [b for (b,) in store.query(f"SELECT DISTINCT r.benchmark FROM runs r JOIN {LABELS} l ON l.run_id = "
                                         "r.run_id WHERE r.release = ? ORDER BY r.benchmark", (release,))]
    counts = population(store, release)
    written = 0
    for bench in benches:
        pooled: dict[tuple[str, str, str], tuple[list[np.ndarray], list[list]]] = {}
        for model, dep, blob, attr, text in store.query(
                f"SELECT r.model, r.deployment, r.value_blob, l.attribute, l.labels FROM runs r JOIN "
                f"{LABELS} l ON l.run_id = r.run_id WHERE r.release = ? AND r.benchmark = ? ORDER BY r.run_name, "
                "l.attribute", (release, bench)):
            values = np.frombuffer(blob, dtype=np.float64) if blob else np.empty(0)
            labels = json.loads(text)
            if len(labels) != len(values):  # our own write: a mismatch is a bug, not the user's input
                raise ValueError(f"subgroup labels of {bench} do not align with its values")
            vals, labs = pooled.setdefault((model, dep, attr), ([], []))
            vals.append(values)
            labs.append(labels)
        scores, gaps = [], []
        for (model, dep, attr), (vals, labs) in sorted(pooled.items()):
            groups, gap = analyse(np.concatenate(vals), [g for chunk in labs for g in chunk], replicates=replicates,
                                  seed=seed, keys=(bench, model, dep, attr), min_cell=min_cell,
                                  population=counts.get((bench, attr), {}))
            scores += [(release, bench, model, dep, attr, g.group, g.n, g.value, g.ci_low, g.ci_high) for g in groups]
            gaps.append((release, bench, model, dep, attr, gap.n_groups, gap.n_suppressed, min_cell, gap.high_group,
                         gap.low_group, gap.gap, gap.gap_low, gap.gap_high, gap.ratio, gap.p_holm, gap.n_pairs))
        _insert(store, SCORES, ("release", "benchmark", "model", "deployment", "attribute", "grp", "n", "value",
                                "ci_low", "ci_high"), scores)
        _insert(store, GAPS, ("release", "benchmark", "model", "deployment", "attribute", "n_groups", "n_suppressed",
                              "min_cell", "high_group", "low_group", "gap", "gap_low", "gap_high", "ratio", "p_holm",
                              "n_pairs"), gaps)
        written += len(gaps)
    return written


def copy_release(source: Store, target: Store, release: str, *, labels: bool) -> bool:
    """A release's subgroup rows into another store (an export bundle; inside its transaction): the scores and
    gaps (aggregates, suppressed groups already absent), and the labels only when ``labels`` (the bundle keeps
    instances). Whether the source had any."""
    if not has_tables(source):
        return False
    scores, gaps = read_subgroups(source, release)
    rows = source.query_dicts(f"SELECT l.run_id, l.attribute, l.labels FROM {LABELS} l JOIN runs r ON r.run_id = "
                              "l.run_id WHERE r.release = ?", (release,)) if labels else []
    if not (scores or gaps or rows):
        return False
    for stmt in DDL:
        target.execute(stmt)
    for table, part in ((SCORES, scores), (GAPS, gaps), (LABELS, rows)):
        if part:
            _insert(target, table, list(part[0]), [tuple(r.values()) for r in part])
    return True


def stored_min_cell(store: Store, release: str) -> int:
    """The small-cell threshold the release was summarised with (the default when it has no subgroups)."""
    if not has_tables(store):
        return MIN_CELL
    rows = store.query(f"SELECT MAX(min_cell) FROM {GAPS} WHERE release = ?", (release,))
    return int(rows[0][0]) if rows and rows[0][0] is not None else MIN_CELL


def read_subgroups(store: Store, release: str) -> tuple[list[dict], list[dict]]:
    """(scores, gaps) of a release as stored (only shown groups exist); empty when the store has none."""
    if not has_tables(store):
        return [], []
    order = "ORDER BY benchmark, attribute, model, deployment"
    return (store.query_dicts(f"SELECT * FROM {SCORES} WHERE release = ? {order}, grp", (release,)),
            store.query_dicts(f"SELECT * FROM {GAPS} WHERE release = ? {order}", (release,)))


def _insert(store: Store, table: str, columns: Sequence[str], rows: list[tuple]) -> None:
    sql = f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join('?' for _ in columns)})"
    for row in rows:
        store.execute(sql, row)


def _f(x: float) -> float | None:
    return None if x is None or np.isnan(x) else float(x)


def _nan(x: float | None) -> float:
    return np.nan if x is None else x
