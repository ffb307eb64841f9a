"""Two evaluations compared instance by instance: per model and benchmark, the paired difference on the
instances both scored, its bootstrap CI, McNemar's exact test for 0/1 metrics, drops and gains flagged.

An evaluation (``Side``) is read from a release of the results store (SQLite | PostgreSQL; the runs'
stored leaderboard values, as the leaderboard's bootstrap reads them) or straight from a suite folder
(``<output-path>/runs/<suite>``, the run records ``summarize`` would ingest). Runs are matched by
(model, deployment), else by model name when it is unique on both sides (a new deployment of the same
model), or by explicit ``pairs``; instances by (stratum, instance id). Only instances both sides scored
count (an unscored or missing value on either side leaves the pair out, and is counted).

Per (model, benchmark): ``diff`` = B - A (macro over strata of the per-stratum mean difference, like the
leaderboard value); its CI from ``intervals.paired_difference`` (0/1 values: the MOVER from each side's
Clopper-Pearson interval and their correlation; other values: BCa from the paired bootstrap, instances
resampled within strata, seeded per stratum; never zero-width: pairs that all agree give +/- the bound on
how many could disagree);
the test is McNemar's exact test when every paired value is 0 or 1, else the percentile-bootstrap test
(CI excludes 0). The p-values are adjusted by the one multiplicity rule, Holm over every model x benchmark
compared (``MULTIPLICITY``, why Holm beside it); a change is significant when its adjusted p is below
``alpha``. A significant change is a ``drop`` when it makes the benchmark worse (lower, or higher where lower
is better) and a ``gain`` otherwise; ``gate`` marks drops larger than ``threshold``.

A release summarized before the multiple-choice columns were renamed (``read.legacy_names``) stored the lenient
rule as its ``exact_match`` leaderboard values; its side takes the letter rule (``exact_match_strict``, today's
``exact_match``) from each instance's stored stats instead, so a release from before and one from after compare
the same rule, never a rename as a drop (from a record kept whole only that one number is taken; nothing else of
it is kept). Without stored per-instance stats it is a one-line error.

Failure semantics: unreadable sources raise ``ConfigError`` (one line, no data in it); a pair that cannot
be tested (fewer than 2 pairs, nothing in common) is reported as ``untestable``, never as no change.
Reads only numbers and names: no instance text (so it needs no analyst role).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from medhelm.errors import ConfigError, escape
from medhelm.store.backends import Store
from medhelm.store.bootstrap import stream_seed
from medhelm.store.intervals import paired_difference
from medhelm.store.paired import bootstrap_p, discordant, holm, is_binary, mcnemar_exact, paired_bootstrap

Row = tuple[str, str]  # (model, deployment)


@dataclass(frozen=True)
class BenchInfo:
    display_name: str
    category: str
    subcategory: str
    lower_is_better: bool


@dataclass(frozen=True)
class Side:
    """One evaluation: per (model, deployment, benchmark, stratum) the instance ids and values (NaN = unscored)."""

    label: str
    benchmarks: dict[str, BenchInfo]
    values: dict[tuple[str, str, str, str], tuple[tuple[str, ...], np.ndarray]]

    @property
    def rows(self) -> list[Row]:
        return sorted({(m, d) for m, d, _, _ in self.values})


# The one multiplicity rule of the gate, the report, the trends page and the subgroup changes. Holm rather than
# Benjamini-Hochberg: the gate fails on ANY flagged drop, so the error that matters is the chance of failing a
# release in which nothing changed (the family-wise error, which Holm keeps <= alpha), not the share of false
# flags among many (BH's false discovery rate lets that chance grow when some changes are real); and Holm is
# valid under any dependence between the tests, which overlap here (the same patients are in a benchmark's
# overall result and in each of its age and sex groups), where BH needs positive dependence. Its cost, power,
# is met by listing every change with its estimate and interval, significant or not.
MULTIPLICITY = "holm"
MULTIPLICITY_RULE = ("p-values Holm-adjusted (step-down; the chance of flagging any change when nothing changed "
                     "stays below alpha, whatever the dependence between the tests) over every {family} compared; "
                     "the gate, the report and the dashboard use this one rule")


@dataclass(frozen=True)
class CompareOptions:
    replicates: int = 2000
    seed: int = 0
    alpha: float = 0.05  # test level; the CI is the (1 - alpha) interval
    threshold: float = 0.0  # a significant drop larger than this (metric units) fails the gate
    adjust: str = MULTIPLICITY  # "holm" over every tested model x benchmark (MULTIPLICITY); "none" for a part
    # of a family that is adjusted as a whole afterwards (``decide``: the subgroup changes)
    pairs: tuple[tuple[str, str], ...] = ()  # explicit (A model or deployment, B model or deployment)


@dataclass(frozen=True)
class PairResult:
    model_a: str
    deployment_a: str
    model_b: str
    deployment_b: str
    benchmark: str
    display_name: str
    category: str
    subcategory: str
    lower_is_better: bool
    n_pairs: int  # instances both scored
    n_only_a: int  # scored by A only (missing or unscored in B)
    n_only_b: int
    score_a: float | None  # on the paired instances
    score_b: float | None
    diff: float | None  # B - A
    ci_low: float | None
    ci_high: float | None
    test: str  # "mcnemar-exact" | "bootstrap" | "none"
    a_only_right: int | None  # McNemar's discordant counts (0/1 metrics)
    b_only_right: int | None
    p_value: float | None
    p_adjusted: float | None
    significant: bool
    change: str  # "drop" | "gain" | "no change" | "untestable"
    gate: bool  # a significant drop larger than the threshold
    sd_diff: float | None  # SD of the paired differences (for planning)

    def to_json(self) -> dict:
        return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in asdict(self).items()}


@dataclass(frozen=True)
class Comparison:
    a: str
    b: str
    options: CompareOptions
    results: tuple[PairResult, ...]
    only_in_a: tuple[str, ...] = ()  # "model [deployment] benchmark" evaluated in A only
    only_in_b: tuple[str, ...] = ()
    unmatched: tuple[str, ...] = field(default=())  # models of A without a counterpart in B

    @property
    def gate_failed(self) -> bool:
        return any(r.gate for r in self.results)

    def to_json(self) -> dict:
        o = self.options
        return {"a": self.a, "b": self.b,
                "options": {"replicates": o.replicates, "seed": o.seed, "alpha": o.alpha, "threshold": o.threshold,
                            "adjust": o.adjust, "pairs": [list(p) for p in o.pairs]},
                "gate_failed": self.gate_failed,
                "drops": sum(r.change == "drop" for r in self.results),
                "gains": sum(r.change == "gain" for r in self.results),
                "results": [r.to_json() for r in self.results],
                "only_in_a": list(self.only_in_a), "only_in_b": list(self.only_in_b),
                "unmatched_models": list(self.unmatched)}


# ---- reading a side ----

def side_from_release(store: Store, release: str) -> Side:
    """A release's per-instance leaderboard values (``runs.value_ids``/``value_blob``)."""
    from medhelm.store.read import legacy_names, resolve_release

    release = resolve_release(store, release)
    benches = {b: BenchInfo(dn or b, cat or "", sub or "", bool(lower)) for b, dn, cat, sub, lower in store.query(
        "SELECT benchmark, display_name, category, subcategory, lower_is_better FROM benchmarks WHERE release = ?",
        (release,))}
    renamed = {b for (b, m) in store.query("SELECT benchmark, main_metric FROM benchmarks WHERE release = ?",
                                           (release,)) if m == "exact_match"} if legacy_names(store, release) else set()
    values: dict = {}
    for run_id, model, dep, bench, stratum, ids, blob in store.query(
            "SELECT run_id, model, deployment, benchmark, stratum, value_ids, value_blob FROM runs WHERE release = ? "
            "ORDER BY run_id", (release,)):
        if ids is None or blob is None:
            continue  # a redacted export without per-instance values
        where = f"release '{escape(release)}'"
        checked = _checked(ids, blob, where)
        values[(model, dep, bench, stratum)] = _strict(store, run_id, checked[0], where) if bench in renamed \
            else checked
    if not values:
        raise ConfigError(f"release '{escape(release)}' holds no per-instance values (a redacted export?): "
                          "nothing to compare")
    return Side(f"release {release}", benches, values)


def _checked(ids_json: str, blob: bytes, where: str) -> tuple[tuple[str, ...], np.ndarray]:
    import json

    try:
        ids = json.loads(ids_json)
        vals = np.frombuffer(blob, dtype=np.float64)
    except (ValueError, TypeError):
        raise ConfigError(f"{where}: a run's stored values are damaged (re-run `medhelm summarize`)") from None
    if not isinstance(ids, list) or len(ids) != len(vals):
        raise ConfigError(f"{where}: a run's stored ids and values differ in length (re-run `medhelm summarize`)")
    return tuple(str(i) for i in ids), vals.astype(float)


def _strict(store: Store, run_id: int, ids: tuple[str, ...], where: str) -> tuple[tuple[str, ...], np.ndarray]:
    """A pre-rename multiple-choice run's values under today's ``exact_match`` (its ``exact_match_strict``)."""
    import json

    from medhelm.store.sources import LEGACY_CHOICE_MARK

    found: dict[str, float] = {}
    for iid, stats_json, record_json in store.query(
            "SELECT instance_id, stats_json, record_json FROM instances WHERE run_id = ?", (int(run_id),)):
        try:
            stats = json.loads(stats_json) if stats_json else (json.loads(record_json or "{}").get("stats") or {})
        except (ValueError, TypeError, AttributeError, RecursionError):  # a crafted record: no value read
            stats = {}
        value = stats.get(LEGACY_CHOICE_MARK) if isinstance(stats, dict) else None
        if type(value) in (int, float):
            found[iid] = float(value)
    missing = sum(1 for i in ids if i not in found)
    if missing == len(ids) and ids:
        raise ConfigError(f"{where} was summarized before the multiple-choice columns were renamed and keeps no "
                          "per-instance stats to read HELM's exact_match from: re-run `medhelm summarize` on it")
    return ids, np.array([found.get(i, math.nan) for i in ids], dtype=float)


def side_from_suite(output_path: Path, suite: str) -> Side:
    """A suite folder's complete runs, read as ``summarize`` reads them (a later run of the same
    benchmark/stratum/model in the folder is skipped as there)."""
    from medhelm.files import plain_name
    from medhelm.store.ingest import suite_sources

    plain_name(suite, what="--suite")
    benches: dict[str, BenchInfo] = {}
    values: dict = {}
    for src in suite_sources(Path(output_path), [suite]):
        key = (src.model, src.deployment, src.benchmark.name, src.stratum)
        if not src.complete or key in values:
            continue
        b = src.benchmark
        benches.setdefault(b.name, BenchInfo(b.display_name or b.name, b.category or "", b.subcategory or "",
                                             bool(b.lower_is_better)))
        seen: dict[str, float] = {}
        for r in src.rows(False):
            seen.setdefault(r.instance_id, math.nan if r.main_value is None else float(r.main_value))
        values[key] = (tuple(seen), np.fromiter(seen.values(), dtype=float, count=len(seen)))
    if not values:
        raise ConfigError(f"suite '{escape(suite)}' has no complete run", path=Path(output_path) / "runs" / suite)
    return Side(f"suite {suite}", benches, values)


# ---- matching ----

def match_rows(a: Side, b: Side, pairs: Sequence[tuple[str, str]] = ()) -> tuple[list[tuple[Row, Row]], list[Row]]:
    """(A row, B row) pairs and A's rows left without one. Explicit ``pairs`` name a model or deployment
    on each side; otherwise identical (model, deployment), then a model name unique on both sides."""
    ra, rb = a.rows, b.rows
    if pairs:
        out = []
        for left, right in pairs:
            out.append((_named(ra, left, a.label), _named(rb, right, b.label)))
        return out, [r for r in ra if r not in {x for x, _ in out}]
    same = [(r, r) for r in ra if r in set(rb)]
    left_a = [r for r in ra if r not in set(rb)]
    left_b = [r for r in rb if r not in set(ra)]
    by_model = []
    for r in left_a:
        cands = [x for x in left_b if x[0] == r[0]]
        if len(cands) == 1 and sum(x[0] == r[0] for x in left_a) == 1:
            by_model.append((r, cands[0]))
    matched = {x for x, _ in by_model}
    return same + by_model, [r for r in left_a if r not in matched]


def _named(rows: Sequence[Row], name: str, label: str) -> Row:
    found = [r for r in rows if name in r]
    if len(found) != 1:
        what = "no" if not found else f"{len(found)}"
        raise ConfigError(f"--pair: {what} model or deployment named '{escape(name)}' in {escape(label)}"
                          + (" (name the deployment)" if found else ""))
    return found[0]


# ---- the comparison ----

def compare(a: Side, b: Side, options: CompareOptions = CompareOptions()) -> Comparison:
    pairs, unmatched = match_rows(a, b, options.pairs)
    results: list[PairResult] = []
    only_a: list[str] = []
    only_b: list[str] = []
    for ra, rb in pairs:
        benches_a = {k[2] for k in a.values if k[:2] == ra}
        benches_b = {k[2] for k in b.values if k[:2] == rb}
        only_a += [f"{ra[0]} [{ra[1]}] {x}" for x in sorted(benches_a - benches_b)]
        only_b += [f"{rb[0]} [{rb[1]}] {x}" for x in sorted(benches_b - benches_a)]
        for bench in sorted(benches_a & benches_b):
            info = b.benchmarks.get(bench) or a.benchmarks.get(bench) or BenchInfo(bench, "", "", False)
            results.append(_one(a, b, ra, rb, bench, info, options))
    results = decide(results, options)
    return Comparison(a.label, b.label, options, tuple(results), tuple(only_a), tuple(only_b),
                      tuple(f"{m} [{d}]" for m, d in unmatched))


def paired_values(a: Side, b: Side, ra: Row, rb: Row, bench: str
                  ) -> tuple[list[tuple[str, np.ndarray, np.ndarray]], int, int]:
    """Per common stratum: (stratum, A values, B values) on the instances both scored; and the counts of
    instances scored by one side only."""
    strata_a = {k[3] for k in a.values if k[:3] == (*ra, bench)}
    strata_b = {k[3] for k in b.values if k[:3] == (*rb, bench)}
    out, only_a, only_b = [], 0, 0
    for stratum in sorted(strata_a | strata_b):
        ids_a, va = a.values.get((*ra, bench, stratum), ((), np.empty(0)))
        ids_b, vb = b.values.get((*rb, bench, stratum), ((), np.empty(0)))
        sa = {i: v for i, v in zip(ids_a, va) if not math.isnan(v)}
        sb = {i: v for i, v in zip(ids_b, vb) if not math.isnan(v)}
        common = [i for i in sa if i in sb]  # A's order
        only_a += len(sa) - len(common)
        only_b += len(sb) - len(common)
        if common:
            out.append((stratum, np.array([sa[i] for i in common]), np.array([sb[i] for i in common])))
    return out, only_a, only_b


def _one(a: Side, b: Side, ra: Row, rb: Row, bench: str, info: BenchInfo, o: CompareOptions) -> PairResult:
    strata, only_a, only_b = paired_values(a, b, ra, rb, bench)
    n = sum(len(x) for _, x, _ in strata)
    base = dict(model_a=ra[0], deployment_a=ra[1], model_b=rb[0], deployment_b=rb[1], benchmark=bench,
                display_name=info.display_name, category=info.category, subcategory=info.subcategory,
                lower_is_better=info.lower_is_better, n_pairs=n, n_only_a=only_a, n_only_b=only_b)
    if n == 0:
        return PairResult(**base, score_a=None, score_b=None, diff=None, ci_low=None, ci_high=None, test="none",
                          a_only_right=None, b_only_right=None, p_value=None, p_adjusted=None, significant=False,
                          change="untestable", gate=False, sd_diff=None)
    score_a = float(np.mean([x.mean() for _, x, _ in strata]))
    score_b = float(np.mean([y.mean() for _, _, y in strata]))
    diffs = [y - x for _, x, y in strata]
    all_d = np.concatenate(diffs)
    rngs = [stream_seed(o.seed, "compare", bench, stratum) for stratum, _, _ in strata]
    reps = paired_bootstrap(diffs, o.replicates, rngs)
    low, high = paired_difference([(x, y) for _, x, y in strata], reps, 1.0 - o.alpha)
    binary = is_binary(np.concatenate([x for _, x, _ in strata] + [y for _, _, y in strata]))
    a_right = b_right = None
    if n < 2:
        test, p = "none", math.nan
    elif binary:
        a_right, b_right = map(sum, zip(*(discordant(x, y) for _, x, y in strata)))
        test, p = "mcnemar-exact", mcnemar_exact(a_right, b_right)
    else:
        test, p = "bootstrap", bootstrap_p(reps) if o.replicates else math.nan
    return PairResult(**base, score_a=score_a, score_b=score_b, diff=score_b - score_a,
                      ci_low=_f(low), ci_high=_f(high), test=test, a_only_right=a_right, b_only_right=b_right,
                      p_value=_f(p), p_adjusted=None, significant=False, change="untestable",
                      gate=False, sd_diff=_f(float(np.std(all_d, ddof=1))) if n >= 2 else None)


def decide(results: list[PairResult], o: CompareOptions) -> list[PairResult]:
    """Adjusted p-values, significance, drop/gain and the gate, once every test is known."""
    raw = [math.nan if r.p_value is None else r.p_value for r in results]
    adjusted = holm(raw) if o.adjust == "holm" else raw
    out = []
    for r, p in zip(results, adjusted):
        if r.diff is None or math.isnan(p):
            out.append(_replace(r, p_adjusted=_f(p), change="untestable"))
            continue
        significant = p < o.alpha
        better = -r.diff if r.lower_is_better else r.diff  # > 0: B is better
        change = "no change" if not significant or better == 0 else ("gain" if better > 0 else "drop")
        out.append(_replace(r, p_adjusted=_f(p), significant=significant, change=change,
                            gate=change == "drop" and -better > o.threshold))
    return out


def _replace(r: PairResult, **kw: object) -> PairResult:
    from dataclasses import replace

    return replace(r, **kw)


def _f(x: float | None) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else float(x)

