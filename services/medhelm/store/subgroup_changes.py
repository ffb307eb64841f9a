"""Change by patient subgroup between two releases (``medhelm compare --subgroups``, the report's ``--against``).

``store/compare.py``'s paired comparison run on each subgroup's instances alone (an instance's label is the
patient's, read from either release's ``subgroup_labels``; blank or absent is ``not recorded``), adjusted by
the comparison's one multiplicity rule (``compare.MULTIPLICITY``) over every model x benchmark x attribute x
group together, so a drop confined to one group is flagged even when the overall score holds. Every cell's
change is returned, significant or not, with its estimate and interval.

Which cells exist is decided as everywhere else (``subgroups.cells``), on the populations of the two releases'
data, never on how many pairs were scored: a group pooled or hidden in either release is pooled or hidden here,
so a run where some requests failed cannot change which groups are shown, and neither release's tables, the
comparison, nor their differences single out a group below the threshold.

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
from medhelm.store.subgroups import LABELS, MIN_CELL, has_tables, label_of, merged_cells, release_cells


@dataclass(frozen=True)
class SubgroupChange:
    attribute: str
    group: str
    result: PairResult

    def to_json(self) -> dict:
        return {"attribute": self.attribute, "group": self.group, **self.result.to_json()}


Labels = dict[tuple[str, str], dict[str, dict[str, str]]]  # (benchmark, stratum) -> attribute -> id -> label
Cells = dict[tuple[str, str], tuple[dict[str, str], int]]  # (benchmark, attribute) -> label -> cell, not shown alone


def instance_labels(store: Store, release: str, into: Labels | None = None) -> Labels:
    """Every labelled instance of a release (added to ``into``, whose labels win); a blank or absent label is
    ``not recorded``."""
    out: Labels = {} if into is None else into
    if not has_tables(store):
        return out
    for bench, stratum, ids, attr, text in store.query(
            f"SELECT r.benchmark, r.stratum, r.value_ids, l.attribute, l.labels FROM runs r JOIN {LABELS} l ON "
            "l.run_id = r.run_id WHERE r.release = ? ORDER BY r.run_id", (release,)):
        per = out.setdefault((bench, stratum), {}).setdefault(attr, {})
        for iid, label in zip(json.loads(ids or "[]"), json.loads(text)):
            per.setdefault(str(iid), label_of(label))
    return out


def common_cells(store: Store, releases: tuple[str, ...], min_cell: int = MIN_CELL) -> Cells:
    """The cells both releases show (``subgroups.merged_cells`` of each one's ``release_cells``): a group pooled
    or hidden in either is pooled or hidden in the comparison, so it shows nothing the releases do not."""
    per = [release_cells(store, r, min_cell) for r in releases]
    keys = sorted(set().union(*per))
    return {k: merged_cells(*(p[k] for p in per if k in p)) for k in keys}


def _only(side: Side, labels: Labels, bench: str, attr: str, members: frozenset[str], name: str) -> Side:
    values = {}
    for key, (ids, vals) in side.values.items():
        if key[2] != bench:
            continue
        lab = labels.get((key[2], key[3]), {}).get(attr, {})
        keep = np.array([lab.get(i) in members for i in ids], dtype=bool)
        if keep.any():
            values[key] = (tuple(i for i, k in zip(ids, keep) if k), vals[keep])
    return Side(f"{side.label} ({attr}={name})", side.benchmarks, values)


def subgroup_changes(a: Side, b: Side, labels: Labels, options: CompareOptions,
                     cells: Cells) -> tuple[list[SubgroupChange], int]:
    """(paired changes per shown cell, every one of them, adjusted together by ``options.adjust``; how many
    groups were not shown on their own). ``cells`` (``common_cells``) decide what is shown, per benchmark."""
    found: list[tuple[str, str, PairResult]] = []
    hidden = 0
    for (bench, attr), (shown, n_hidden) in sorted(cells.items()):
        hidden += n_hidden
        members: dict[str, set[str]] = defaultdict(set)
        for label, cell in shown.items():
            members[cell].add(label)
        for name, group in sorted(members.items()):
            only = [_only(side, labels, bench, attr, frozenset(group), name) for side in (a, b)]
            found += [(attr, name, r) for r in compare(*only, replace(options, adjust="none")).results]
    decided = decide([r for _, _, r in found], options)
    return [SubgroupChange(attr, group, r) for (attr, group, _), r in zip(found, decided)], hidden
