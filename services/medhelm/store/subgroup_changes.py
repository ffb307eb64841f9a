"""Change by patient subgroup between two releases (``medhelm compare --subgroups``, the report's ``--against``).

``store/compare.py``'s paired comparison run on each subgroup's instances alone (an instance's label is the
patient's, read from either release's ``subgroup_labels``), Holm-adjusted over every model x benchmark x
attribute x group together, so a drop confined to one group is flagged even when the overall score holds.
Small-cell suppression as in ``store/subgroups.py``, on the number of paired instances of each group: a hidden
group's result is never returned, only how many were hidden.

Failure semantics: releases without labels give no results (never an error); the sides' own errors are
``compare``'s (one line).
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, replace

import numpy as np

from medhelm.store.backends import Store
from medhelm.store.compare import CompareOptions, PairResult, Side, compare, decide
from medhelm.store.subgroups import LABELS, MIN_CELL, has_tables, shown_groups


@dataclass(frozen=True)
class SubgroupChange:
    attribute: str
    group: str
    result: PairResult

    def to_json(self) -> dict:
        return {"attribute": self.attribute, "group": self.group, **self.result.to_json()}


Labels = dict[tuple[str, str], dict[str, dict[str, str]]]  # (benchmark, stratum) -> attribute -> id -> label


def instance_labels(store: Store, release: str, into: Labels | None = None) -> Labels:
    """Every labelled instance of a release (added to ``into``, whose labels win)."""
    out: Labels = {} if into is None else into
    if not has_tables(store):
        return out
    for bench, stratum, ids, attr, text in store.query(
            f"SELECT r.benchmark, r.stratum, r.value_ids, l.attribute, l.labels FROM runs r JOIN {LABELS} l ON "
            "l.run_id = r.run_id WHERE r.release = ? ORDER BY r.run_id", (release,)):
        per = out.setdefault((bench, stratum), {}).setdefault(attr, {})
        for iid, label in zip(json.loads(ids or "[]"), json.loads(text)):
            if label is not None:
                per.setdefault(str(iid), str(label))
    return out


def _only(side: Side, labels: Labels, attr: str, group: str) -> Side:
    values = {}
    for key, (ids, vals) in side.values.items():
        lab = labels.get((key[2], key[3]), {}).get(attr, {})
        keep = np.array([lab.get(i) == group for i in ids], dtype=bool)
        if keep.any():
            values[key] = (tuple(i for i, k in zip(ids, keep) if k), vals[keep])
    return Side(f"{side.label} ({attr}={group})", side.benchmarks, values)


def subgroup_changes(a: Side, b: Side, labels: Labels, options: CompareOptions,
                     min_cell: int = MIN_CELL) -> tuple[list[SubgroupChange], int]:
    """(paired changes per shown subgroup, Holm-adjusted over all of them; how many groups were suppressed)."""
    attrs = sorted({attr for per in labels.values() for attr in per})
    found: list[tuple[str, str, PairResult]] = []
    for attr in attrs:
        for group in sorted({g for per in labels.values() for g in per.get(attr, {}).values()}):
            found += [(attr, group, r) for r in compare(_only(a, labels, attr, group), _only(b, labels, attr, group),
                                                        replace(options, adjust="none")).results]
    families: dict[tuple, dict[str, int]] = defaultdict(dict)
    for attr, group, r in found:
        families[(r.model_a, r.deployment_a, r.model_b, r.deployment_b, r.benchmark, attr)][group] = r.n_pairs
    shown: set[tuple] = set()
    hidden = 0
    for family, counts in families.items():
        groups, n_hidden = shown_groups(counts, min_cell)
        shown |= {(*family, g) for g in groups}
        hidden += n_hidden
    kept = [(attr, group, r) for attr, group, r in found
            if (r.model_a, r.deployment_a, r.model_b, r.deployment_b, r.benchmark, attr, group) in shown]
    decided = decide([r for _, _, r in kept], replace(options, adjust="holm"))
    return [SubgroupChange(attr, group, r) for (attr, group, _), r in zip(kept, decided)], hidden
