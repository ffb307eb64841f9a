"""`medhelm compare` — two evaluations compared per model and benchmark on the instances both scored
(the difference's CI from ``store/intervals.py``, McNemar's exact test for 0/1 metrics); a release gate.

    medhelm compare --release accepted-2026-10 --release candidate-2026-11 --threshold 0.02
    medhelm compare --release accepted --suite nightly-2026-11-23 --json

Sources are given twice, in order A (the baseline) then B (the candidate): ``--release`` reads the
results store (``--store``/``MEDHELM_STORE_URL``, SQLite or PostgreSQL), ``--suite`` reads
``<output-path>/runs/<suite>/`` directly. Exit codes: 0 no significant drop beyond ``--threshold``;
3 (``GATE_EXIT``) at least one (the gate failed; significance is the Holm-adjusted p, the report's rule:
``compare.MULTIPLICITY``; with ``--fail-on-missing`` also a baseline model x benchmark
the candidate lacks); 2 a usage or input error. The statistics live in
``medhelm.store.compare`` / ``medhelm.store.paired``; this door parses, prints and optionally pushes the
gauges (``--pushgateway``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys

from medhelm.cli import SEED_MAX, float_in, int_in
from medhelm.cli.summarize import add_store_arguments, store_location
from medhelm.errors import ConfigError, escape

GATE_EXIT = 3  # a significant drop larger than --threshold: distinct from 2 (bad input) and 70 (a bug)


class _Source(argparse.Action):
    """--release / --suite appended in the order given: ("release"|"suite", name)."""

    def __call__(self, parser, namespace, values, option_string=None):  # noqa: ANN001
        items = list(getattr(namespace, self.dest) or [])
        items.append((option_string.lstrip("-"), values))
        setattr(namespace, self.dest, items)


def add_source_arguments(p: argparse.ArgumentParser, *, at_most: str) -> None:
    what = p.add_argument_group("what")
    what.add_argument("--release", dest="sources", action=_Source, metavar="RELEASE",
                      help=f"a release in the results store ({at_most})")
    what.add_argument("--suite", dest="sources", action=_Source, metavar="SUITE",
                      help=f"a suite folder under <output-path>/runs/ ({at_most})")
    add_store_arguments(p)


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_source_arguments(p, at_most="give two sources in all: A, the baseline, then B, the candidate")
    how = p.add_argument_group("how")
    how.add_argument("--threshold", type=float_in(0, 1e12), default=0.0,
                     help="fail (exit 3) on a significant drop larger than this, in metric units "
                          "(0.02 = 2 points of accuracy; default: %(default)s = any significant drop)")
    how.add_argument("--alpha", type=float_in(1e-6, 0.5), default=0.05,
                     help="test level; the CI is the (1 - alpha) interval (default: %(default)s)")
    how.add_argument("--bootstrap", type=int_in(0, 100_000), default=2000, metavar="N",
                     help="bootstrap replicates (default: %(default)s)")
    how.add_argument("--seed", type=int_in(0, SEED_MAX), default=0, help="bootstrap seed (default: %(default)s)")
    how.add_argument("--adjust", choices=("holm",), default="holm",
                     help="multiple-comparison adjustment of the p-values over every model x benchmark: Holm, the one "
                          "rule of the gate, the report and the dashboard (kept for scripts that name it; "
                          "docs/compare.md)")
    how.add_argument("--pair", action="append", default=[], metavar="A=B",
                     help="compare model (or deployment) A of the baseline with B of the candidate; repeatable; "
                          "default: the same model and deployment, else the same model name")
    how.add_argument("--fail-on-missing", action="store_true",
                     help="the gate also fails (exit 3) when a model x benchmark of the baseline has no "
                          "counterpart in the candidate (a benchmark dropped or a run that did not finish)")
    out = p.add_argument_group("output")
    how.add_argument("--subgroups", action="store_true",
                     help="also compare within each patient subgroup (two releases whose benchmarks name subgroups; "
                          "small groups pooled; docs/report.md): every group's change listed, Holm-adjusted over "
                          "all of them; flags drops, the gate follows the overall results")
    out.add_argument("--json", action="store_true", help="print the comparison as one JSON object")
    out.add_argument("--all", action="store_true", help="list every model x benchmark, not only changes")
    out.add_argument("--pushgateway", default=os.environ.get("MEDHELM_PUSHGATEWAY") or None, metavar="URL",
                     help="push the candidate's scores and the flags as Prometheus gauges "
                          "(docs/compare.md; env MEDHELM_PUSHGATEWAY)")


SUBGROUP_FAMILY = "model x benchmark x attribute x group"


def main(args: argparse.Namespace) -> int:
    from medhelm.store.compare import MULTIPLICITY_RULE, CompareOptions, compare

    sources = list(args.sources or [])
    if len(sources) != 2:
        raise ConfigError(f"give exactly two sources (A then B) with --release/--suite; got {len(sources)}")
    pairs = tuple(_pair(p) for p in args.pair)
    a, b = read_sides(args, sources)
    result = compare(a, b, CompareOptions(replicates=args.bootstrap, seed=args.seed, alpha=args.alpha,
                                          threshold=args.threshold, adjust=args.adjust, pairs=pairs))
    changes = _subgroups(args, sources, a, b, CompareOptions(replicates=args.bootstrap, seed=args.seed,
                                                             alpha=args.alpha, pairs=pairs)) \
        if args.subgroups else None
    if args.json:
        doc = result.to_json()
        doc["multiplicity"] = MULTIPLICITY_RULE.format(family="model x benchmark")
        if changes is not None:
            doc["subgroups"] = {"results": [c.to_json() for c in changes[0]], "suppressed_groups": changes[1],
                                "multiplicity": MULTIPLICITY_RULE.format(family=SUBGROUP_FAMILY)}
        print(json.dumps(doc, allow_nan=False))
    else:
        print_table(result, everything=args.all)
        if changes is not None:
            _print_subgroups(*changes)
    if args.pushgateway:
        from medhelm.store.gauges import comparison_registry, push

        problem = push(comparison_registry(result), args.pushgateway, "medhelm-compare")
        if problem:
            print(f"note: {problem}", file=sys.stderr)
    missing = args.fail_on_missing and bool(result.only_in_a or result.unmatched)
    if missing and not args.json:
        print(f"GATE FAILED (--fail-on-missing): {len(result.only_in_a) + len(result.unmatched)} baseline "
              f"evaluation(s) without a counterpart in the candidate; exit {GATE_EXIT}")
    return GATE_EXIT if result.gate_failed or missing else 0


def _subgroups(args, sources, a, b, options):  # noqa: ANN001, ANN202 - (list[SubgroupChange], suppressed)
    from medhelm.store import open_store
    from medhelm.store.subgroup_changes import common_cells, instance_labels, subgroup_changes
    from medhelm.store.subgroups import stored_min_cell

    if any(kind != "release" for kind, _ in sources):
        raise ConfigError("--subgroups compares two --release sources (the labels are in the results store)")
    with open_store(store_location(args)) as store:
        labels = instance_labels(store, sources[0][1], instance_labels(store, sources[1][1]))
        min_cell = max(stored_min_cell(store, name) for _, name in sources)
        cells = common_cells(store, (sources[0][1], sources[1][1]), min_cell)
    return subgroup_changes(a, b, labels, options, cells)


def _print_subgroups(changes, suppressed: int) -> None:  # noqa: ANN001
    from medhelm.store.compare import MULTIPLICITY_RULE

    flagged = [c for c in changes if c.result.change in ("drop", "gain")]
    print(f"by patient subgroup: {len(changes)} model x benchmark x group pairs, {len(flagged)} significant, "
          f"{suppressed} small group(s) not shown alone (pooled); every one listed, significant or not")
    print(f"  {MULTIPLICITY_RULE.format(family=SUBGROUP_FAMILY)}; a subgroup change flags, the gate follows the "
          "overall results")
    if changes:
        print(f"  {'change':<10} {'model':<28} {'benchmark':<24} {'group':<30} {'n':>6} {'B - A':>8} {'CI':<19} "
              f"{'p':>8}")
    for c in changes:
        r = c.result
        mark = r.change.upper() if r.change in ("drop", "gain") else r.change
        group = escape(f"{c.attribute}={c.group}", 30)
        print(f"  {mark:<10} {escape(r.model_b, 28):<28} {escape(r.benchmark, 24):<24} {group:<30} {r.n_pairs:>6} "
              f"{_num(r.diff, '+.3f'):>8} {'[' + _num(r.ci_low, '+.3f') + ', ' + _num(r.ci_high, '+.3f') + ']':<19} "
              f"{_p(r.p_adjusted):>8}")


def read_sides(args: argparse.Namespace, sources: list[tuple[str, str]]):  # noqa: ANN201 - list[Side]
    from medhelm.store import open_store
    from medhelm.store.compare import side_from_release, side_from_suite

    out, store = [], None
    try:
        for kind, name in sources:
            if kind == "release":
                store = store or open_store(store_location(args))
                out.append(side_from_release(store, name))
            else:
                out.append(side_from_suite(args.output_path, name))
    finally:
        if store is not None:
            store.close()
    return out


def _pair(text: str) -> tuple[str, str]:
    left, sep, right = text.partition("=")
    if not sep or not left.strip() or not right.strip():
        raise ConfigError(f"--pair expects A=B (a model or deployment of each side), got '{text[:80]}'")
    return left.strip(), right.strip()


def _num(x: float | None, fmt: str = ".3f") -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, fmt)


def _p(p: float | None) -> str:
    return "-" if p is None else "<0.0001" if p < 1e-4 else f"{p:.4f}"


def print_table(result, *, everything: bool = False) -> None:  # noqa: ANN001 - a Comparison
    o = result.options
    level = round(100 * (1 - o.alpha), 1)
    from medhelm.store.compare import MULTIPLICITY_RULE
    from medhelm.store.intervals import PAIRED_METHOD

    print(f"A = {escape(result.a)}   B = {escape(result.b)}   (difference B - A on the instances both scored; "
          f"{level:g}% CI; {PAIRED_METHOD}, {o.replicates} replicates, seed {o.seed})")
    if o.adjust == "holm":
        print(f"{MULTIPLICITY_RULE.format(family='model x benchmark')}; significant: adjusted p < {o.alpha:g}")
    rows = [r for r in result.results if everything or r.change != "no change"]
    if rows:
        print(f"  {'change':<10} {'model':<28} {'benchmark':<24} {'n':>6} {'A':>7} {'B':>7} {'B - A':>8} "
              f"{'CI':<19} {'test':<13} {'p':>8}")
    for r in rows:
        mark = "DROP*" if r.gate else r.change.upper() if r.change in ("drop", "gain") else r.change
        model = escape(r.model_b if (r.model_a, r.deployment_a) == (r.model_b, r.deployment_b) else
                       f"{r.model_a}->{r.model_b}", 200)  # names are data: no control characters on a terminal
        ci = f"[{_num(r.ci_low, '+.3f')}, {_num(r.ci_high, '+.3f')}]"
        p = r.p_adjusted if o.adjust == "holm" else r.p_value
        print(f"  {mark:<10} {model[:28]:<28} {escape(r.benchmark, 24):<24} {r.n_pairs:>6} {_num(r.score_a):>7} "
              f"{_num(r.score_b):>7} {_num(r.diff, '+.3f'):>8} {ci:<19} {r.test:<13} {_p(p):>8}")
    drops = [r for r in result.results if r.change == "drop"]
    gains = [r for r in result.results if r.change == "gain"]
    untestable = [r for r in result.results if r.change == "untestable"]
    print(f"{len(result.results)} model x benchmark pairs: {len(drops)} significant drop(s), {len(gains)} gain(s), "
          f"{len(untestable)} untestable; {len(result.results) - len(drops) - len(gains) - len(untestable)} without "
          f"a significant change" + ("" if everything else " (--all lists them)"))
    for label, items in (("only in A", result.only_in_a), ("only in B", result.only_in_b),
                         ("no counterpart in B", result.unmatched)):
        if items:
            print(f"  {label}: {', '.join(escape(i, 200) for i in items[:10])}{' ...' if len(items) > 10 else ''}")
    if result.gate_failed:
        worst = sorted((r for r in result.results if r.gate), key=lambda r: -abs(r.diff or 0))
        print(f"GATE FAILED: {len(worst)} significant drop(s) larger than {o.threshold:g} (marked DROP*); "
              f"exit {GATE_EXIT}")
    else:
        print(f"gate passed: no significant drop larger than {o.threshold:g}")
