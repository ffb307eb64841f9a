"""`medhelm sample-size` (also `medhelm plan`, its first name) — instances per benchmark needed to detect a
difference between two models (paired design) and what evaluating them costs; the statistics are
``medhelm.store.sample_size``/``paired``. (Planning a run — validate everything, write nothing — is
``pipeline/plan.py``, another thing.)

    medhelm sample-size --release pilot --model org/a --model org/b --difference 0.05 --prices prod_env/prices.yaml
    medhelm sample-size --difference 0.1 --discordant 0.2          # no pilot: a stated discordant proportion
    medhelm sample-size --difference 0.05 --sd 0.25 --power 0.9    # no pilot: a stated SD of paired differences
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from medhelm.cli import float_in
from medhelm.cli.compare import add_source_arguments, read_sides
from medhelm.errors import ConfigError, escape


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_source_arguments(p, at_most="the pilot; at most one source")
    how = p.add_argument_group("how")
    how.add_argument("--model", action="append", default=[], metavar="NAME",
                     help="a pilot model (or deployment); give two for their paired differences, one to assume "
                          "independent errors (default: the pilot's only one or two models)")
    how.add_argument("--difference", type=float_in(1e-9, 1e12), required=True,
                     help="the smallest true difference to detect, in metric units (0.05 = 5 points of accuracy)")
    how.add_argument("--power", type=float_in(0.01, 0.9999), default=0.8, help="default: %(default)s")
    how.add_argument("--alpha", type=float_in(1e-6, 0.5), default=0.05, help="two-sided; default: %(default)s")
    how.add_argument("--sd", type=float_in(1e-12, 1e12),
                     help="stated SD of the paired differences (continuous metrics)")
    how.add_argument("--discordant", type=float_in(1e-9, 1.0),
                     help="stated share of instances exactly one model gets right (0/1 metrics)")
    how.add_argument("--prices", type=Path, help="prices YAML to price the pilot's tokens/GPU time (default: the "
                                                 "release's stored cost; for a suite <local-path>/prices.yaml)")
    how.add_argument("--local-path", type=Path, default=Path("prod_env"), help="where prices.yaml is looked up")
    p.add_argument("--json", action="store_true", help="print the plan as one JSON object")


def main(args: argparse.Namespace) -> int:
    from medhelm.store import open_store
    from medhelm.store.costs import PriceTable
    from medhelm.store.sample_size import PlanOptions, costs_from_release, costs_from_suite, pick_models, plan, stated

    options = PlanOptions(difference=args.difference, alpha=args.alpha, power=args.power, sd=args.sd,
                          discordant=args.discordant)
    sources = list(args.sources or [])
    if len(sources) > 1:
        raise ConfigError("plan reads one pilot: give --release or --suite once")
    prices_path = args.prices or (Path(args.local_path) / "prices.yaml")
    prices = PriceTable.load(prices_path) if args.prices or prices_path.is_file() else None
    if not sources:
        rows, label = stated(options), "no pilot"
    else:
        (side,) = read_sides(args, sources)
        models = pick_models(side, args.model)
        kind, name = sources[0]
        if kind == "release":
            from medhelm.cli.summarize import store_location
            from medhelm.store.read import resolve_release

            with open_store(store_location(args)) as store:
                costs = costs_from_release(store, resolve_release(store, name),
                                           PriceTable.load(args.prices) if args.prices else None)
        else:
            costs = costs_from_suite(args.output_path, name, prices or PriceTable.empty())
        rows = plan(side, models, options, costs)
        label = f"{side.label}; models {' vs '.join(f'{m} [{d}]' for m, d in models)}"
    if args.json:
        print(json.dumps({"pilot": label, "difference": options.difference, "alpha": options.alpha,
                          "power": options.power, "rows": [r.to_json() for r in rows],
                          "total_cost_usd": _total(rows)}, allow_nan=False))
        return 0
    print(f"pilot: {escape(label, 400)}; detect a difference of {options.difference:g} with power {options.power:g} at "
          f"alpha {options.alpha:g} (two-sided, paired)")
    print(f"  {'benchmark':<28} {'metric':<22} {'pilot n':>7} {'SD diff':>8} {'discord.':>8} {'needed n':>9} "
          f"{'MDD@pilot':>9} {'USD':>10}  basis")
    for r in rows:
        usd = _usd(r.cost_usd, r.n_required if r.pilot_n is not None else None)
        print(f"  {escape(r.benchmark, 28):<28} {r.metric:<22} {_n(r.pilot_n):>7} {_x(r.sd_diff):>8} "
              f"{_x(r.discordant):>8} {_n(r.n_required):>9} {_x(r.mdd_at_pilot_n):>9} {usd:>10}  {r.basis}"
              + (f" ({r.note})" if r.note else ""))
    total = _total(rows)
    if total is not None:
        print(f"total: {total:.2f} USD for both models on every benchmark at the needed n")
    return 0


def _total(rows) -> float | None:  # noqa: ANN001
    costs = [r.cost_usd for r in rows if r.n_required is not None]
    return None if not costs or any(c is None for c in costs) else float(sum(costs))


def _n(v: int | None) -> str:
    return "-" if v is None else str(v)


def _x(v: float | None) -> str:
    return "-" if v is None or math.isnan(v) else f"{v:.3f}"


def _usd(v: float | None, n: int | None) -> str:
    return "-" if n is None else "no price" if v is None else f"{v:.2f}"
