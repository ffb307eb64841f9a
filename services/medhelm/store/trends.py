"""Scores across releases: per model x benchmark (and category) its score and CI in each release, the
paired change against the previous release that has that model and benchmark (``compare``), flagged drops
and gains (by ``compare``'s one multiplicity rule, Holm over the release pair's comparisons), and the minimum
detectable difference (MDD) at the cell's own n — what the dashboard's Trends page shows, so a stakeholder
sees whether a change is real or the suite too small to tell.

MDD: the smallest true difference a paired test on this many instances detects with 80 % power at
alpha 0.05 — from the paired differences with the previous release when there is one (their SD, or their
discordant share for 0/1 metrics), else from this release's values alone assuming independent errors
(SD x sqrt(2); discordance 2p(1 - p)).

Numbers and names only (no instance text): viewer-level. Failure semantics as ``compare``: releases without
per-instance values (redacted exports) still show their stored scores, without changes or MDD.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

from medhelm.errors import ConfigError
from medhelm.store import read
from medhelm.store.backends import Store
from medhelm.store.compare import CompareOptions, Side, compare, side_from_release
from medhelm.store.paired import is_binary, minimum_detectable_mcnemar, minimum_detectable_t

POWER, ALPHA = 0.8, 0.05


@dataclass(frozen=True)
class TrendCell:
    release: str
    order: int  # 0 = oldest shown
    model: str
    deployment: str
    benchmark: str
    display_name: str
    category: str
    value: float | None
    ci_low: float | None
    ci_high: float | None
    n_instances: int | None
    previous: str | None  # the release this cell is compared with
    change: float | None  # this - previous, on the instances both scored
    change_low: float | None
    change_high: float | None
    p_value: float | None
    p_adjusted: float | None  # Holm over the release pair's model x benchmark comparisons (compare.MULTIPLICITY)
    flag: str  # "drop" | "gain" | "no change" | "untestable" | "" (no previous)
    mdd: float | None
    mdd_basis: str

    def to_json(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class TrendGroup:
    release: str
    order: int
    category: str
    model: str
    deployment: str
    value: float | None
    ci_low: float | None
    ci_high: float | None
    n_benchmarks: int | None


def trends(store: Store, releases: Sequence[str], *, replicates: int = 1000, seed: int = 0
           ) -> tuple[list[TrendCell], list[TrendGroup]]:
    """``releases`` oldest first (each must exist)."""
    known = set(store.releases())
    for r in releases:
        if r not in known:
            raise ConfigError(f"unknown release '{r}'")
    sides: dict[str, Side | None] = {}
    for r in releases:
        try:
            sides[r] = side_from_release(store, r)
        except ConfigError:  # a redacted export: scores without per-instance values
            sides[r] = None
    cells: list[TrendCell] = []
    groups: list[TrendGroup] = []
    last_seen: dict[tuple[str, str, str], str] = {}  # (model, deployment, benchmark) -> latest release with it
    opts = CompareOptions(replicates=replicates, seed=seed, alpha=ALPHA)
    compared: dict[tuple[str, str], dict] = {}
    for order, rel in enumerate(releases):
        info = {b["benchmark"]: b for b in read.benchmarks(store, rel)}
        for c in read.cells(store, rel):
            key = (c["model"], c["deployment"], c["benchmark"])
            prev = last_seen.get(key)
            b = info.get(c["benchmark"], {})
            change = _change(sides, prev, rel, key, opts, compared) if prev else None
            mdd, basis = _mdd(sides.get(rel), key, change)
            cells.append(TrendCell(
                rel, order, c["model"], c["deployment"], c["benchmark"], b.get("display_name") or c["benchmark"],
                b.get("category") or "", c["value"], c["ci_low"], c["ci_high"], c["n_instances"], prev,
                None if change is None else change.diff, None if change is None else change.ci_low,
                None if change is None else change.ci_high, None if change is None else change.p_value,
                None if change is None else change.p_adjusted,
                "" if prev is None else ("untestable" if change is None else change.change), mdd, basis))
            last_seen[key] = rel
        for g in store.query_dicts("SELECT grp, model, deployment, value, ci_low, ci_high, n_benchmarks FROM "
                                   "group_scores WHERE release = ? AND level = 'category'", (rel,)):
            groups.append(TrendGroup(rel, order, g["grp"], g["model"], g["deployment"], g["value"], g["ci_low"],
                                     g["ci_high"], g["n_benchmarks"]))
    return cells, groups


def _change(sides: dict, prev: str, rel: str, key: tuple[str, str, str], opts: CompareOptions, cache: dict):
    a, b = sides.get(prev), sides.get(rel)
    if a is None or b is None:
        return None
    if (prev, rel) not in cache:
        cache[(prev, rel)] = {(r.model_b, r.deployment_b, r.benchmark): r for r in compare(a, b, opts).results
                              if (r.model_a, r.deployment_a) == (r.model_b, r.deployment_b)}
    return cache[(prev, rel)].get(key)


def _mdd(side: Side | None, key: tuple[str, str, str], change) -> tuple[float | None, str]:  # noqa: ANN001
    if change is not None and change.n_pairs >= 2:
        n = change.n_pairs
        if change.test == "mcnemar-exact":
            psi = ((change.a_only_right or 0) + (change.b_only_right or 0)) / n
            if psi > 0:
                return minimum_detectable_mcnemar(n, psi, ALPHA, POWER), "paired with the previous release"
        elif change.sd_diff:
            return minimum_detectable_t(n, change.sd_diff, ALPHA, POWER), "paired with the previous release"
    if side is None:
        return None, "no per-instance values"
    vals = [v[~np.isnan(v)] for k, (_, v) in side.values.items() if k[:3] == key]
    return single_mdd(np.concatenate(vals) if vals else np.empty(0))


def single_mdd(x: np.ndarray) -> tuple[float | None, str]:
    """MDD of a comparison with another model (or release) on as many instances as ``x`` (one cell's scored
    values), assuming independent errors: SD x sqrt(2) for continuous scores, discordance 2p(1 - p) for 0/1."""
    x = np.asarray(x, dtype=float)
    x = x[~np.isnan(x)]
    if len(x) < 2:
        return None, "fewer than 2 instances"
    if is_binary(x):
        p = float(x.mean())
        psi = 2 * p * (1 - p)
        if psi <= 0:
            return None, "every instance alike"
        return minimum_detectable_mcnemar(len(x), psi, ALPHA, POWER), "this release alone, independent errors"
    sd = float(np.std(x, ddof=1)) * math.sqrt(2.0)
    if sd <= 0:
        return None, "every instance alike"
    return minimum_detectable_t(len(x), sd, ALPHA, POWER), "this release alone, independent errors"
